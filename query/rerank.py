"""Cross-encoder reranking of the fused top candidates, from a local ONNX export.

RRF only knows ranks, so a passage both rankers put at rank 15 beats one ranker's rank-1 hit; a
cross-encoder reads the question and the passage together and can put the passage that answers
back on top. It is the most expensive stage per passage, so it only sees the fused top
`rerank_depth` (20 by default), never the whole candidate lists.

The adapter loads `model.onnx` and `tokenizer.json` from a folder (the layout of the sentence-
transformers cross-encoder exports, e.g. ms-marco-MiniLM-L-6-v2) with onnxruntime and tokenizers,
both already installed with fastembed. Nothing is downloaded: without a folder there is no
reranker, and the fused order is the answer order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from indexer.ports import Embedder
from query.ports import RerankInput
from query.sentences import embedding_text, sentences

log = logging.getLogger(__name__)

MAX_TOKENS = 512


class RerankerUnavailable(RuntimeError):
    pass


class OnnxCrossEncoder:
    """(question, heading + passage) pairs through a BERT-style cross-encoder; the first logit is the score."""

    def __init__(self, model_path: Path, *, batch_size: int = 16, max_tokens: int = MAX_TOKENS) -> None:
        model_file, tokenizer_file = model_path / "model.onnx", model_path / "tokenizer.json"
        if not model_file.is_file() or not tokenizer_file.is_file():
            raise RerankerUnavailable(f"no model.onnx and tokenizer.json under {model_path}")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            self._session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
            self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # onnxruntime and tokenizers raise their own bare exception types
            raise RerankerUnavailable(f"could not load the cross-encoder from {model_path}: {exc}") from exc
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.batch_size = batch_size
        self.name = f"cross-encoder:{model_path.name}"

    def score(self, query: str, passages: Sequence[RerankInput]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(passages), self.batch_size):
            batch = passages[start : start + self.batch_size]
            pairs = [(query, f"{p.heading}\n{p.text}" if p.heading else p.text) for p in batch]
            encoded = self._tokenizer.encode_batch(pairs)
            feed: dict[str, Any] = {
                "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
            }
            (logits, *_) = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})
            scores.extend(float(row[0]) if np.ndim(row) else float(row) for row in logits)
        return scores


def load_reranker(model_path: Path | None) -> OnnxCrossEncoder | None:
    """No folder, no reranker; a folder that does not load is said once and reranking is off."""
    if model_path is None:
        return None
    try:
        return OnnxCrossEncoder(model_path)
    except RerankerUnavailable as exc:
        log.warning("Reranker unavailable (%s): answers use the fused order.", exc)
        return None


class SentenceMaxSim:
    """A passage scores as its best sentence: max cosine between the question and "heading: sentence".

    A passage vector averages everything the passage says, so a paraphrased question that matches
    one sentence of a long passage ranks it low; its best sentence does not dilute. It uses the
    embedder already loaded for dense retrieval (no other model), and sentence vectors are cached by
    text like passage vectors, so a repeated question or a neighbouring one pays only for new text.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self.name = f"sentence-maxsim:{embedder.model_name}"

    def score(self, query: str, passages: Sequence[RerankInput]) -> list[float]:
        spans: list[tuple[int, int]] = []
        texts: list[str] = []
        for p in passages:
            own = [embedding_text(p.heading, s) for s in sentences(p.text)] or [embedding_text(p.heading, p.text)]
            spans.append((len(texts), len(texts) + len(own)))
            texts.extend(own)
        if not texts:
            return []
        q = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        sims = np.asarray(self.embedder.embed(texts), dtype=np.float32) @ q
        return [float(sims[a:b].max()) for a, b in spans]
