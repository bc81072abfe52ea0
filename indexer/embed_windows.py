"""Every word piece of a passage embedded: texts cut into the model's windows, batched by length, pooled back.

MiniLM reads at most 256 tokens ([CLS], 254 word pieces, [SEP]); a fastembed call silently drops the
rest, and passages of code or API signatures pass 254 word pieces well within 1,000 characters (a fifth
of the Python manual's did). So each text is tokenized once, without truncation, into consecutive
windows of at most that many word pieces (no overlap: every piece is seen once), every window is
embedded, and a text's vector is the mean of its windows' vectors weighted by their word pieces, made
unit length again. The stores keep one vector per passage, as their contracts say; a short text is one
window and gets exactly the vector the model gives it.

Windows are sorted by length before they are batched, so a batch pads to little more than its own
length (sorted by characters, 21 % of a batch of the manual's passages was padding; by word pieces, 5 %).
Pure functions: the ONNX session and tokenizer stay in indexer.embedder.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from indexer.ports import Vectors


@dataclass(frozen=True, slots=True)
class Window:
    text: int
    """Index of the text this window is part of."""
    ids: tuple[int, ...]
    """Token ids with the model's special tokens, as the model reads them."""
    pieces: int
    """Word pieces of the text in this window (its weight in the text's vector)."""


def windows_of(encodings: Sequence[Sequence[Sequence[int]]], specials: int) -> list[Window]:
    """`encodings[i]` is text i's windows as token-id lists, special tokens included (a tokenizer
    truncating at the model's length with stride 0 gives the first window and its overflow)."""
    out: list[Window] = []
    for index, parts in enumerate(encodings):
        for ids in parts:
            out.append(Window(index, tuple(ids), max(len(ids) - specials, 0)))
    return out


def batches(windows: Sequence[Window], batch_size: int) -> Iterator[list[Window]]:
    """Windows shortest first, `batch_size` at a time: each batch pads to its longest, which is
    close to its shortest."""
    ordered = sorted(windows, key=lambda w: len(w.ids))
    for start in range(0, len(ordered), batch_size):
        yield ordered[start : start + batch_size]


def padded(batch: Sequence[Window], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), int64, padded on the right to the batch's longest window."""
    longest = max(len(w.ids) for w in batch)
    ids = np.full((len(batch), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(batch), longest), dtype=np.int64)
    for row, window in enumerate(batch):
        ids[row, : len(window.ids)] = window.ids
        mask[row, : len(window.ids)] = 1
    return ids, mask


def pool(windows: Sequence[Window], vectors: Vectors, texts: int) -> Vectors:
    """One unit vector per text: the mean of its windows' vectors weighted by word pieces.

    A text of one window keeps its window's vector unchanged (bit for bit), so short passages are
    embedded exactly as before; a text with no word pieces (empty) keeps its one window's vector."""
    dim = vectors.shape[1]
    sums = np.zeros((texts, dim), dtype=np.float64)
    weights = np.zeros(texts, dtype=np.float64)
    counts = np.zeros(texts, dtype=np.int64)
    first = np.full(texts, -1, dtype=np.int64)
    for row, window in enumerate(windows):
        weight = float(max(window.pieces, 1))
        sums[window.text] += weight * vectors[row]
        weights[window.text] += weight
        counts[window.text] += 1
        if first[window.text] < 0:
            first[window.text] = row
    if (counts == 0).any():
        raise ValueError("a text without a window")
    out = np.empty((texts, dim), dtype=np.float32)
    single = counts == 1
    out[single] = vectors[first[single]]
    several = ~single
    if several.any():
        means = sums[several] / weights[several, None]
        norms = np.linalg.norm(means, axis=1, keepdims=True)
        out[several] = (means / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return out
