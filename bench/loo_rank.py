"""The ranking pipeline replayed from recorded features, so a grid of methods and thresholds can be
measured on every set without querying the stores again (bench/leave_one_out.py).

`query.retrieval.Retriever.rank` is: BM25 and dense lists (each floored), RRF, then the fused top
`rerank_depth` reordered by `SentenceReranker` blended with the fused order. Here the same steps run
over what `bench/loo_collect.py` recorded per question: both rankers' unfloored lists with scores, a
third list (the readable passages ordered by their best sentence's cosine: sentence-level vectors
beside the passage vector, max-sim), and per candidate the sentence cosines, sentence and passage
terms, passage cosine and which gold spans it holds. With the default `Method` the replay gives the
order `Retriever.rank` gives (the collector checks it on every question and reports mismatches).

Pure functions: nothing here touches a store or a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from query.rerank import coverage, term_weights
from query.rrf import blend, fuse


@dataclass(frozen=True)
class Method:
    """Every tuned constant of ranking, with the defaults of query/retrieval.py, query/rerank.py, query/rrf.py."""

    dense_floor: float = 0.30
    bm25_rel_floor: float = 0.0
    """Drop BM25 hits scoring below this share of the top BM25 hit (0: none). A floor that cuts a weak
    list: an absolute BM25 floor cannot (scores shrink on small corpora, eval/README.md)."""
    rrf_k: int = 60
    bm25_weight: float = 1.0
    """Weight of the BM25 list in RRF (dense weighs 1)."""
    sentence_weight: float = 0.0
    """Weight of the sentence max-sim list in RRF (0: not used, the default pipeline)."""
    passage_meaning: float = 0.3
    fusion_weight: float = 0.5
    sentence_coverage: float = 0.5
    passage_coverage: float = 0.2
    rerank_depth: int = 50
    subquery_weight: float = 0.0
    """Weight in RRF of the question's sentences searched one by one (a question of two or more
    sentences: passages ordered by their best cosine to any of them, floored as dense; 0: not used)."""

    def label(self) -> str:
        d = Method()
        parts = [f"{k}={v:g}" for k, v in asdict(self).items() if v != getattr(d, k)]
        return ",".join(parts) or "default"


@dataclass
class Candidate:
    pid: str
    spans: tuple[int, ...]
    """Indexes of the question's gold spans this passage holds."""
    sims: list[float]
    """Cosine of each sentence ("heading: sentence") to the question, as SentenceReranker computes it."""
    units: list[frozenset[str]]
    bag: frozenset[str]
    passage_cos: float


@dataclass
class QuestionFeatures:
    set: str
    id: str
    type: str
    n_spans: int
    terms: list[str]
    lexical: list[tuple[str, float]]
    dense: list[tuple[str, float]]
    sentence: list[tuple[str, float]]
    candidates: dict[str, Candidate] = field(default_factory=dict)
    subquery: list[tuple[str, float]] = field(default_factory=list)
    """Passages by their best dense cosine to any one sentence of a question of several (else empty)."""
    sentence_brute: list[tuple[str, float]] = field(default_factory=list)
    """When `sentence` came from the store's sentence vectors: the brute-force list it replaces (every
    sentence of every readable passage, no cap), kept to compare the two."""


def lists(q: QuestionFeatures, m: Method) -> tuple[list[str], list[str], list[str]]:
    """The floored BM25, dense and sentence lists of IDs."""
    top = q.lexical[0][1] if q.lexical else 0.0
    lexical = [pid for pid, s in q.lexical if s >= m.bm25_rel_floor * top]
    dense = [pid for pid, s in q.dense if s >= m.dense_floor]
    sentence = [pid for pid, s in q.sentence if s >= m.dense_floor] if m.sentence_weight > 0 else []
    return lexical, dense, sentence


def rerank_scores(q: QuestionFeatures, head: Sequence[str], m: Method) -> list[float]:
    """SentenceReranker.score over recorded features."""
    cands = [q.candidates[pid] for pid in head]
    weights = term_weights(q.terms, [set(c.bag) for c in cands])
    out = []
    for c in cands:
        best = max(s + m.sentence_coverage * coverage(weights, u) for s, u in zip(c.sims, c.units, strict=True))
        meaning = m.passage_meaning * c.passage_cos if m.passage_meaning else 0.0
        out.append(best + m.passage_coverage * coverage(weights, c.bag) + meaning)
    return out


def rank(q: QuestionFeatures, m: Method) -> list[str]:
    """The fused and reranked order of every candidate."""
    return ordered(q, m, lambda head: rerank_scores(q, head, m))


def ordered(q: QuestionFeatures, m: Method, scores: Callable[[Sequence[str]], list[float]]) -> list[str]:
    """RRF of the method's lists, then its reranker's `scores` blended over the head: the one order both
    the plain replay and the compiled one use (they differ only in how a head is scored)."""
    lexical, dense, sentence = lists(q, m)
    subquery = [pid for pid, s in getattr(q, "subquery", []) if s >= m.dense_floor] if m.subquery_weight > 0 else []
    named = [(lexical, m.bm25_weight), (dense, 1.0), (sentence, m.sentence_weight), (subquery, m.subquery_weight)]
    used = [(ids, w) for ids, w in named if w > 0]
    fused = fuse([ids for ids, _ in used], k=m.rrf_k, weights=[w for _, w in used])
    if m.rerank_depth <= 0 or len(fused) <= 1:
        return [pid for pid, _ in fused]
    head = [pid for pid, _ in fused[: m.rerank_depth]]
    blended = blend(head, scores(head), m.fusion_weight)
    return [pid for pid, _ in blended] + [pid for pid, _ in fused[m.rerank_depth :]]


def recall(q: QuestionFeatures, order: Sequence[str], k: int = 10) -> float:
    found: set[int] = set()
    for pid in order[:k]:
        found.update(q.candidates[pid].spans)
    return len(found) / q.n_spans if q.n_spans else 0.0


def reciprocal_rank(q: QuestionFeatures, order: Sequence[str]) -> float:
    for i, pid in enumerate(order, 1):
        if q.candidates[pid].spans:
            return 1.0 / i
    return 0.0


HARD = ("paraphrase", "situation")


@dataclass
class Figures:
    """One set's figures under one method: recall@10 of fused and each ranker, overall and per type."""

    n: int
    fused: float
    mrr: float
    hard: float
    by_type: dict[str, dict[str, float]]

    def objective(self) -> float:
        """What selection maximises: overall and paraphrase-or-situation recall, equally."""
        return (self.fused + self.hard) / 2


def _mean(values: Iterable[float]) -> float:
    vs = list(values)
    return sum(vs) / len(vs) if vs else math.nan


def figures(questions: Sequence[QuestionFeatures], m: Method) -> Figures:
    return _figures([(q, rank(q, m)) for q in questions], m)


def cosines(matrix: np.ndarray, query: np.ndarray) -> list[float]:
    return [float(x) for x in np.asarray(matrix, dtype=np.float32) @ np.asarray(query, dtype=np.float32)]


@dataclass
class Compiled:
    """One question's candidates as arrays, so a grid of methods costs numpy operations, not loops.

    `fast_rank` gives the order `rank` gives (bench/leave_one_out.py checks it on every question
    under the default method); sums run in another order, so scores may differ in the last bits."""

    q: QuestionFeatures
    index: dict[str, int]
    starts: np.ndarray
    sims: np.ndarray
    units: np.ndarray  # sentences x question terms, 0/1
    bags: np.ndarray  # candidates x question terms, 0/1
    passage_cos: np.ndarray


def compile_question(q: QuestionFeatures) -> Compiled:
    pids = list(q.candidates)
    terms = q.terms
    starts, sims, units, bags, pcos = [], [], [], [], []
    for pid in pids:
        c = q.candidates[pid]
        starts.append(len(sims))
        sims.extend(c.sims)
        units.extend([[1.0 if t in u else 0.0 for t in terms] for u in c.units])
        bags.append([1.0 if t in c.bag else 0.0 for t in terms])
        pcos.append(c.passage_cos)
    width = len(terms)
    return Compiled(
        q,
        {pid: i for i, pid in enumerate(pids)},
        np.asarray(starts, dtype=np.int64),
        np.asarray(sims, dtype=np.float64),
        np.asarray(units, dtype=np.float64).reshape(len(sims), width),
        np.asarray(bags, dtype=np.float64).reshape(len(pids), width),
        np.asarray(pcos, dtype=np.float64),
    )


def fast_scores(c: Compiled, head: Sequence[str], m: Method) -> list[float]:
    idx = np.asarray([c.index[pid] for pid in head], dtype=np.int64)
    n = len(head)
    df = c.bags[idx].sum(axis=0)
    w = np.log((n - df + 0.5) / (df + 0.5) + 1.0)
    total = float(w.sum())
    if total > 0:
        sentence_cov = c.units @ w / total
        bag_cov = c.bags[idx] @ w / total
    else:
        sentence_cov = np.zeros(len(c.sims))
        bag_cov = np.zeros(n)
    best = np.maximum.reduceat(c.sims + m.sentence_coverage * sentence_cov, c.starts)[idx]
    scores = (
        best + m.passage_coverage * bag_cov + (m.passage_meaning * c.passage_cos[idx] if m.passage_meaning else 0.0)
    )
    return [float(x) for x in scores]


def fast_rank(c: Compiled, m: Method) -> list[str]:
    return ordered(c.q, m, lambda head: fast_scores(c, head, m))


def fast_figures(compiled: Sequence[Compiled], m: Method) -> Figures:
    return _figures([(c.q, fast_rank(c, m)) for c in compiled], m)


def _figures(orders: Iterable[tuple[QuestionFeatures, list[str]]], m: Method) -> Figures:
    rows = []
    for q, order in orders:
        lexical, dense, _ = lists(q, m)
        rows.append((q, recall(q, order), reciprocal_rank(q, order), recall(q, lexical), recall(q, dense)))
    return _summarise(rows)


def _summarise(rows: list[tuple[QuestionFeatures, float, float, float, float]]) -> Figures:
    by_type: dict[str, dict[str, float]] = {}
    for t in sorted({r[0].type for r in rows}):
        sub = [r for r in rows if r[0].type == t]
        by_type[t] = {
            "n": len(sub),
            "fused": _mean(r[1] for r in sub),
            "bm25": _mean(r[3] for r in sub),
            "dense": _mean(r[4] for r in sub),
        }
    return Figures(
        n=len(rows),
        fused=_mean(r[1] for r in rows),
        mrr=_mean(r[2] for r in rows),
        hard=_mean(r[1] for r in rows if r[0].type in HARD),
        by_type=by_type,
    )
