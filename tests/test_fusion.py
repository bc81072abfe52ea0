"""RRF, the blend of a reranker with the fused order, and the two rankers running at the same time."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from conftest import NOW, make_passage

from indexer.ports import Hit, VectorHit
from query.ports import RerankInput
from query.retrieval import _SEARCHES, RetrievalSettings, Retriever
from query.rrf import RRF_K, blend, fuse
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal

ANN = Principal(tenant="acme", user="ann", groups=("staff",))


def test_rrf_uses_the_briefs_constant_and_breaks_ties_by_best_rank() -> None:
    assert RRF_K == 60
    fused = fuse([["a", "b", "c"], ["b", "c", "a"]])
    assert [pid for pid, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert [pid for pid, _ in fuse([["x", "y"], ["y", "x"]])] == ["x", "y"]  # equal scores: same best rank, then ID


def test_weighted_rrf_scales_each_rankings_votes_and_unit_weights_change_nothing() -> None:
    lists = [["a", "b", "c"], ["c", "b", "a"]]
    assert fuse(lists, weights=[1.0, 1.0]) == fuse(lists)
    down = fuse(lists, weights=[0.5, 1.0])
    assert [pid for pid, _ in down] == ["c", "b", "a"]  # the halved first list no longer ties "a" with "c"
    assert dict(down)["a"] == pytest.approx(0.5 / 61 + 1 / 63)
    with pytest.raises(ValueError, match="one weight per ranking"):
        fuse(lists, weights=[1.0])


def test_blend_is_free_of_the_rerankers_units() -> None:
    head = ["a", "b", "c", "d", "e"]
    scores = [0.1, 0.9, 0.3, 0.2, 0.85]
    order = [pid for pid, _ in blend(head, scores)]
    assert order == [pid for pid, _ in blend(head, [12 * s - 40 for s in scores])]  # logits or cosines alike
    assert order[0] == "b"


def test_blend_keeps_the_fused_order_unless_the_reranker_is_clearly_surer() -> None:
    head = ["first", "second", "third"]
    # A small reranker preference for the fused second does not overturn the fused first ...
    assert next(pid for pid, _ in blend(head, [0.50, 0.51, 0.0])) == "first"
    # ... a weight of 0 is the reranker's order alone, ties keep the fused order ...
    assert next(pid for pid, _ in blend(head, [0.50, 0.51, 0.0], weight=0.0)) == "second"
    assert [pid for pid, _ in blend(head, [1.0, 1.0, 1.0])] == head
    # ... and a reranker that sets one candidate far apart moves it to the top.
    assert next(pid for pid, _ in blend(head, [0.1, 0.1, 0.9])) == "third"
    with pytest.raises(ValueError):
        blend(head, [1.0])


class _Rendezvous:
    """Both rankers wait for each other: only rankers that run at the same time get past the barrier."""

    def __init__(self, concurrent: bool) -> None:
        self.barrier = threading.Barrier(2, timeout=10) if concurrent else None
        self.calls: list[tuple[str, str]] = []

    def meet(self, who: str) -> None:
        self.calls.append((who, threading.current_thread().name))
        if self.barrier is not None:
            self.barrier.wait()


class _Lexical:
    name = "fake-lexical"

    def __init__(self, meeting: _Rendezvous) -> None:
        self.meeting = meeting
        self.hits = [Hit(make_passage("backups run nightly", anchor="a-1"), 3.0)]
        self.store = [h.passage for h in self.hits] + [make_passage("snapshots are compressed", anchor="b-1")]

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        self.meeting.meet("lexical")
        return self.hits

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        """The store of record the dense hits are read back from (in the dense ranker's thread)."""
        return [p for p in self.store if p.passage_id in passage_ids]


class _Vector:
    name = "fake-vector"

    def __init__(self, meeting: _Rendezvous) -> None:
        self.meeting = meeting
        self.hits = [VectorHit("doc.md@1#b-1", "doc.md", 1, 0.8)]

    def search(self, vector: Any, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        self.meeting.meet("dense")
        return self.hits


class _Embedder:
    model_name = "fake"
    dim = 2

    def embed(self, texts: Sequence[str]) -> Any:
        return np.ones((len(texts), 2), dtype=np.float32)

    def embed_query(self, text: str) -> Any:
        return np.ones(2, dtype=np.float32)


class _Reverse:
    """A reranker that prefers the fused last, to show the result is still one list of both rankers' hits."""

    name = "reverse"

    def score(self, query: str, passages: Sequence[RerankInput]) -> list[float]:
        return [float(i) for i in range(len(passages))]


def _retriever(concurrent: bool) -> tuple[Retriever, _Rendezvous]:
    meeting = _Rendezvous(concurrent)
    settings = RetrievalSettings(concurrent=concurrent)
    lexical, vector = _Lexical(meeting), _Vector(meeting)
    return Retriever(lexical, vector, _Embedder(), None, settings, _Reverse()), meeting  # type: ignore[arg-type]


def test_bm25_and_dense_run_at_the_same_time() -> None:
    retriever, meeting = _retriever(concurrent=True)
    access = AccessFilter.for_principal(ANN, NOW)
    ranking = retriever.rank("backups", access)  # a sequential call would break the barrier (10 s timeout)
    assert sorted(who for who, _ in meeting.calls) == ["dense", "lexical"]
    threads = dict(meeting.calls)
    assert threads["lexical"] == threading.current_thread().name != threads["dense"]
    assert [pid for pid, _ in ranking.fused] == ["doc.md@1#b-1", "doc.md@1#a-1"]  # reranked: fused last first
    result = retriever.search(ANN, "backups", NOW)
    assert [p.passage_id for p in result.passages] == ["doc.md@1#b-1", "doc.md@1#a-1"]


def test_sequential_rankers_on_request() -> None:
    retriever, meeting = _retriever(concurrent=False)
    retriever.rank("backups", AccessFilter.for_principal(ANN, NOW))
    assert [who for who, _ in meeting.calls] == ["lexical", "dense"]
    assert {thread for _, thread in meeting.calls} == {threading.current_thread().name}


def test_while_another_search_runs_the_rankers_run_one_after_the_other_with_the_same_lists() -> None:
    """Under load (another search running) the dense half stays in the caller's thread: same lists."""
    alone, _ = _retriever(concurrent=True)
    access = AccessFilter.for_principal(ANN, NOW)
    expected = alone.rank("backups", access)
    retriever, meeting = _retriever(concurrent=True)
    meeting.barrier = None  # side by side, the rankers would still run (this test checks where)
    with _SEARCHES.one() as first:  # another search of this process is running
        assert first
        ranking = retriever.rank("backups", access)
    assert [who for who, _ in meeting.calls] == ["lexical", "dense"]
    assert {thread for _, thread in meeting.calls} == {threading.current_thread().name}
    assert ranking.fused == expected.fused
    assert [h.passage.passage_id for h in ranking.dense] == [h.passage.passage_id for h in expected.dense]
    assert [h.passage.passage_id for h in ranking.lexical] == [h.passage.passage_id for h in expected.lexical]
    meeting.calls.clear()
    retriever.rank("backups", access)  # alone again: the dense half in a pool thread
    assert dict(meeting.calls)["dense"] != threading.current_thread().name


def test_a_failing_ranker_fails_the_search() -> None:
    retriever, meeting = _retriever(concurrent=True)
    meeting.barrier = None

    def broken(*args: Any) -> list[Hit]:
        raise RuntimeError("vector store down")

    retriever.vector.search = broken  # type: ignore[union-attr, method-assign]
    with pytest.raises(RuntimeError, match="vector store down"):
        retriever.rank("backups", AccessFilter.for_principal(ANN, NOW))
