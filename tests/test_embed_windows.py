"""Every word piece of a passage is embedded: windows over the model's limit, one vector per passage.

The model reads 254 word pieces at a time; before windows, a passage's pieces past the 254th never
reached the model (a fifth of the Python manual's passages lost some). These tests use the real
MiniLM export and its tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from conftest import MODEL_PATH
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.embed_windows import Window, batches, pool, windows_of

WORDS = ["ranking", "passage", "tokenizer", "subprocess", "asyncio", "vectorisation", "permission", "revocation"]


def _long_text(pieces_past: int, tail: str) -> str:
    """A text whose first 300 words alone pass the model's window, then `tail`."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(300 + pieces_past)) + " " + tail


def test_a_change_past_the_models_window_changes_the_passages_vector(embedder: Any) -> None:
    """Before windows the two vectors were identical: the model never saw the last words."""
    first = _long_text(0, "the answer is qdrant edge collections")
    second = _long_text(0, "the answer is sqlite full text search")
    assert embedder.token_counts([first])[0] > 256
    a, b = embedder.embed([first, second])
    assert float(a @ b) < 0.999
    assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-5 and abs(float(np.linalg.norm(b)) - 1.0) < 1e-5


def test_short_passages_get_exactly_fastembeds_vectors(embedder: Any) -> None:
    """Within the window nothing changes: the vector is the one fastembed's own call gives."""
    from fastembed import TextEmbedding

    texts = ["How do I revoke a token?", "asyncio.run(main()) starts the event loop", "x " * 120]
    reference = TextEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2", specific_model_path=str(MODEL_PATH))
    expected = np.array(list(reference.embed(texts)), dtype=np.float32)
    assert np.allclose(embedder.embed(texts), expected, atol=1e-6)


def test_windows_cover_every_word_piece_once(embedder: Any) -> None:
    """The windows' word pieces, in order, are exactly the untruncated tokenization of the text."""
    from tokenizers import Tokenizer

    text = _long_text(400, "end")
    whole = Tokenizer.from_file(str(MODEL_PATH / "tokenizer.json"))
    whole.no_truncation()
    whole.no_padding()
    expected = whole.encode(text, add_special_tokens=False).ids
    encoding = embedder._tokenizer.encode(text)
    parts = [encoding.ids, *(o.ids for o in encoding.overflowing)]
    assert len(parts) >= 3
    assert all(len(p) <= embedder.window_pieces + 2 for p in parts)
    assert [i for p in parts for i in p[1:-1]] == expected
    assert embedder.token_counts([text]) == [sum(len(p) for p in parts)]


def test_one_vector_per_text_in_the_callers_order(embedder: Any) -> None:
    texts = [_long_text(50, "tail"), "short", _long_text(0, "other"), "another short one"]
    together = embedder.embed(texts)
    assert together.shape == (4, embedder.dim)
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


vectors = st.integers(min_value=1, max_value=4).flatmap(
    lambda dim: st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),
            st.integers(min_value=0, max_value=300),
            st.lists(st.floats(-1, 1, allow_nan=False), min_size=dim, max_size=dim),
        ),
        min_size=1,
        max_size=12,
    )
)


@settings(max_examples=200, deadline=None)
@given(vectors)
def test_pool_is_the_piece_weighted_mean_made_unit_and_a_single_window_unchanged(
    rows: list[tuple[int, int, list[float]]],
) -> None:
    texts = max(t for t, _, _ in rows) + 1
    present = {t for t, _, _ in rows}
    if present != set(range(texts)):
        return  # every text has at least one window, as windows_of guarantees
    windows = [Window(t, (0,) * (pieces + 2), pieces) for t, pieces, _ in rows]
    matrix = np.array([v for _, _, v in rows], dtype=np.float32)
    pooled = pool(windows, matrix, texts)
    for text in range(texts):
        mine = [(w, matrix[i]) for i, w in enumerate(windows) if w.text == text]
        if len(mine) == 1:
            assert np.array_equal(pooled[text], mine[0][1])
            continue
        mean = sum(max(w.pieces, 1) * v.astype(np.float64) for w, v in mine) / sum(max(w.pieces, 1) for w, _ in mine)
        norm = np.linalg.norm(mean)
        expected = mean / norm if norm > 0 else mean
        assert np.allclose(pooled[text], expected, atol=1e-5)


def test_batches_are_sorted_by_length_and_cover_every_window() -> None:
    encodings = [[[101, *range(n), 102]] for n in (5, 300, 1, 40, 40, 7)]
    windows = windows_of(encodings, specials=2)
    planned = list(batches(windows, 2))
    flat = [w for b in planned for w in b]
    assert sorted(w.text for w in flat) == list(range(6))
    assert [len(w.ids) for w in flat] == sorted(len(w.ids) for w in windows)
    assert [w.pieces for w in windows] == [5, 300, 1, 40, 40, 7]


def test_an_int8_models_vector_does_not_depend_on_its_batch(tmp_path: Path) -> None:
    """Dynamic quantisation scales a run's activations by the whole batch: the int8 model embeds one
    window per run, so a passage's vector is the one it gets alone (as a question is embedded)."""
    from indexer.embedder import FastEmbedder

    variant = tmp_path / "int8-export"
    variant.mkdir()
    for item in MODEL_PATH.iterdir():
        (variant / item.name).symlink_to(item)
    (variant / "ragsync-model.json").write_text('{"variant": "int8"}')
    model = FastEmbedder(variant)
    assert model.batch_size == 1 and FastEmbedder(MODEL_PATH).batch_size == 32
    texts = ["short", _long_text(10, "tail"), "a somewhat longer sentence about start conditions"]
    assert np.array_equal(model.embed(texts)[2], model.embed([texts[2]])[0])


def _int8_variant(tmp_path: Path) -> Path:
    variant = tmp_path / "int8-lanes"
    variant.mkdir(parents=True)
    for item in MODEL_PATH.iterdir():
        (variant / item.name).symlink_to(item)
    (variant / "ragsync-model.json").write_text('{"variant": "int8"}')
    return variant


def test_a_model_run_one_window_at_a_time_runs_windows_side_by_side_with_the_same_vectors(tmp_path: Path) -> None:
    """Small files' passages are short: one ONNX run of a short window on two threads spends much of it
    at the threads' barriers, so such a model runs two windows at once, one thread each. Every vector
    must be the one the text gets alone, in the caller's order, and the runs must really overlap."""
    import threading

    from indexer.embedder import FastEmbedder

    threads_seen: set[str] = set()

    class Watched(FastEmbedder):
        def _run(self, batch: Any) -> Any:
            threads_seen.add(threading.current_thread().name)
            return super()._run(batch)

    model = Watched(_int8_variant(tmp_path), threads=2)
    assert model.lanes == 2
    texts = [f"note {i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(5 + i % 7)) for i in range(40)]
    texts += [_long_text(20, "tail of a long one"), _long_text(300, "and a longer one")]
    threads_seen.clear()
    together = model.embed(texts)
    assert len(threads_seen) == 2, threads_seen
    alone = np.stack([model.embed([t])[0] for t in texts])
    assert np.array_equal(together, alone)
    serial = FastEmbedder(_int8_variant(tmp_path / "serial"), threads=1)
    assert serial.lanes == 1
    assert np.array_equal(serial.embed(texts), together)


def test_a_failed_run_fails_the_call_and_starts_no_further_runs(tmp_path: Path) -> None:
    import threading

    import pytest

    from indexer.embedder import FastEmbedder

    class Failing(FastEmbedder):
        started = 0
        lock = threading.Lock()

        def _run(self, batch: Any) -> Any:
            with self.lock:
                Failing.started += 1
                count = Failing.started
            if count == 3:
                raise RuntimeError("run 3 failed")
            return super()._run(batch)

    model = Failing(_int8_variant(tmp_path), threads=2)
    Failing.started = 0
    with pytest.raises(RuntimeError, match="run 3 failed"):
        model.embed([f"text number {i}" for i in range(50)])
    assert Failing.started < 10


class CountingTokenizer:
    """The embedder's tokenizer, counting the texts it encodes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.encoded: list[str] = []

    def encode_batch(self, texts: list[str]) -> Any:
        self.encoded.extend(texts)
        return self.inner.encode_batch(texts)


def test_token_counts_then_embed_tokenizes_each_text_once_and_gives_the_same_vectors(embedder: Any) -> None:
    """The sink counts a batch's tokens to sort it, then embeds it: the ids counted are the ids embedded
    (kept by `token_counts`, taken once by `embed`), and the vectors are the ones `embed` alone gives."""
    texts = [_long_text(30, "tail"), "short", "another short one", "short"]
    alone = embedder.embed(texts)
    counting = CountingTokenizer(embedder._tokenizer)
    embedder._tokenizer = counting
    try:
        counts = embedder.token_counts(texts)
        assert counting.encoded == texts
        again = embedder.embed([texts[2], texts[0], texts[1], texts[3]])
        assert counting.encoded == [*texts, "short"], "only the repeated text, whose ids were taken, again"
        assert embedder.embed(["short"]) is not None and counting.encoded[-1] == "short", "taken once, then tokenized"
    finally:
        embedder._tokenizer = counting.inner
    assert np.array_equal(again, alone[[2, 0, 1, 3]]), "bit for bit"
    assert counts == [sum(len(w) for w in windows) for windows in embedder._pieces(texts)]
