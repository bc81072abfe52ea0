"""Second-stage rerankers of the fused top candidates (the Reranker port).

RRF only knows ranks, so a passage both rankers put at rank 15 beats one ranker's rank-1 hit; a
reranker reads the question and each candidate together and can put the passage that answers back
on top. It is the most expensive stage per passage, so it only sees the fused top `rerank_depth`,
never the whole candidate lists, and its score is blended with the fused rank (query/rrf.py
`blend`) rather than replacing it.

Two adapters:

* `SentenceReranker`, the default whenever an embedder is loaded: best sentence by meaning and
  rare question words, with the embedder dense retrieval already uses.
* `OnnxCrossEncoder`, when `rerank_model_path` names a local cross-encoder export: it loads
  `model.onnx` and `tokenizer.json` from a folder (the layout of the sentence-transformers
  cross-encoder exports, e.g. ms-marco-MiniLM-L-6-v2) with onnxruntime and tokenizers, both
  already installed with fastembed. Nothing is downloaded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from indexer.ports import Embedder
from query.ports import RerankInput
from query.sentences import content_terms, embedding_text, sentences
from schemas._memo import TextMemo
from schemas.errors import (
    RerankerUnavailable as RerankerUnavailable,  # re-export (schemas.errors)
)

log = logging.getLogger(__name__)

MAX_TOKENS = 512


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


SENTENCE_COVERAGE_WEIGHT = 0.5
PASSAGE_COVERAGE_WEIGHT = 0.2
"""Weights of the question's rare words against meaning, measured on the three evaluation sets
(eval/README.md): the recall of the fused top 10 moves by at most one question across 0.3-0.7 and
0-0.2, so these are the middle of a flat region, not a tuned point."""
PASSAGE_MEANING_WEIGHT = 0.3
"""Weight of the whole passage's cosine (the vector dense retrieval ranked it by) beside its best
sentence. On the three sets (eval/README.md) 0.3-0.5 is a plateau where every recall target holds:
Git paraphrases 0.714 -> 0.810, Python and flex unchanged or better; below 0.3 Git loses those
paraphrases again, at 1.0 flex loses one."""


def term_weights(query_terms: Sequence[str], bags: Sequence[AbstractSet[str]]) -> dict[str, float]:
    """BM25's idf of each question term over the candidates themselves (bags: each passage's terms).

    The reranker's job is to tell the candidates apart, so a term every candidate contains (the
    product's name, the page's subject) weighs nothing and a term only one holds weighs most. It
    needs no collection statistics, so any lexical store (or none) serves it.
    """
    n = len(bags)
    weights: dict[str, float] = {}
    for term in query_terms:
        df = sum(1 for bag in bags if term in bag)
        weights[term] = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
    return weights


def coverage(weights: Mapping[str, float], terms: AbstractSet[str]) -> float:
    """Share of the question's term weight that `terms` holds (0 when the question has no content word)."""
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in terms) / total if total > 0 else 0.0


class SentenceReranker:
    """A passage scores as its best sentence: meaning plus the question's rare words, in one sentence.

        score = max over sentences s of [cos(question, "heading: s") + a * coverage(s + heading)]
                + b * coverage(passage + heading) + c * cos(question, passage)

    A passage vector averages everything the passage says, so a paraphrased question that matches
    one sentence of a long passage ranks it low; its best sentence does not dilute. Meaning alone
    cannot tell an option's synopsis line from the sentence that explains it (MiniLM puts both at
    0.6-0.8), so the sentence must also hold the words that tell the candidates apart, weighted by
    how few candidates hold them (`term_weights`). The best sentence alone misses an answer spread
    over a passage (a rule in one sentence, its reason in the next, its name in the heading), so
    the passage's own vector counts too (`c`): the one dense retrieval ranked it by, a cache hit.
    It uses the embedder already loaded for dense retrieval (no other model), and sentence vectors
    are cached by text like passage vectors.

    The score is one stage of two: the Retriever blends it with the fused rank (`rrf.blend`), so
    what BM25 and dense agreed on still counts.
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        sentence_coverage: float = SENTENCE_COVERAGE_WEIGHT,
        passage_coverage: float = PASSAGE_COVERAGE_WEIGHT,
        passage_meaning: float = PASSAGE_MEANING_WEIGHT,
    ) -> None:
        self.embedder = embedder
        self.sentence_coverage = sentence_coverage
        self.passage_coverage = passage_coverage
        self.passage_meaning = passage_meaning
        self.name = f"sentence:{embedder.model_name}"

    def score(self, query: str, passages: Sequence[RerankInput]) -> list[float]:
        if not passages:
            return []
        spans: list[tuple[int, int]] = []
        texts: list[str] = []
        units: list[tuple[frozenset[str], ...]] = []
        bags: list[frozenset[str]] = []
        for p in passages:
            embedded, own_units, bag = reading(p)
            units.append(own_units)
            bags.append(bag)
            spans.append((len(texts), len(texts) + len(embedded)))
            texts.extend(embedded)
        whole = len(texts)
        if self.passage_meaning:
            texts.extend(p.dense_text or embedding_text(p.heading, p.text) for p in passages)
        q = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        sims = (np.asarray(self.embedder.embed(texts), dtype=np.float32) @ q).tolist()
        weights = term_weights(sorted(content_terms(query)), bags)
        total = sum(weights.values())
        scores = []
        for i, ((a, b), own_units, bag) in enumerate(zip(spans, units, bags, strict=True)):
            best = max(
                sim + self.sentence_coverage * _coverage(weights, total, unit)
                for sim, unit in zip(sims[a:b], own_units, strict=True)
            )
            meaning = self.passage_meaning * sims[whole + i] if self.passage_meaning else 0.0
            scores.append(best + self.passage_coverage * _coverage(weights, total, bag) + meaning)
        return scores


def _coverage(weights: Mapping[str, float], total: float, terms: AbstractSet[str]) -> float:
    """coverage() with the total worked out once per question."""
    return sum(w for t, w in weights.items() if t in terms) / total if total > 0 else 0.0


Reading = tuple[tuple[str, ...], tuple[frozenset[str], ...], frozenset[str]]
_READINGS: TextMemo[tuple[str, str], Reading] = TextMemo(max_entries=4096)
"""Per (heading, text): the texts embedded for each sentence, each sentence's terms with the heading's,
and the passage's terms: the same for every question, so worked out once while the passage is in use
(schemas._memo: keyed by the text the asker already holds, kept at most ttl_s after it was worked out)."""


def reading(p: RerankInput) -> Reading:
    """The memoised reading of a passage (the sentence texts embedded, their terms, the passage's terms)."""
    return _READINGS.get((p.heading, p.text), partial(_reading, p))


def _reading(p: RerankInput) -> Reading:
    own = sentences(p.text)
    heading = content_terms(p.heading)
    units = tuple(content_terms(s) | heading for s in own) or (content_terms(p.text) | heading,)
    embedded = tuple(embedding_text(p.heading, s) for s in own) or (embedding_text(p.heading, p.text),)
    return embedded, units, content_terms(p.text) | heading
