"""The dense half's read-back on the real stores: passages the BM25 half of the same search returned are
not read again, every other dense hit still is, and nothing the lexical store does not admit to the
asker reaches the answer (a lagging vector store, another principal's search on the same Retriever).

Each lexical adapter beside the vector store of its profile: SQLite FTS5 with qdrant-edge (embedded),
Elasticsearch with the Qdrant server (cluster), both sides run one after the other and side by side."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DIM, LEXICAL_FACTORIES, NOW, VECTOR_FACTORIES, make_passage, unit

from indexer.ports import VectorHit
from query.retrieval import RetrievalSettings, Retriever
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal

PAIRS = {"embedded": ("sqlite-fts5", "qdrant-edge"), "cluster": ("elasticsearch", "qdrant-server")}
QUERY = "refund deadline"
NEAR = unit(1.0, 0.05)
ANN = Principal(tenant="acme", user="ann", groups=("hr",))
BOB = Principal(tenant="acme", user="bob", groups=("staff",))

# both rankers find it: it has the query's words and lies next to the query vector
BOTH = make_passage("The refund deadline is 14 days after delivery.", acl=("group:staff",), anchor="both")
# only the dense ranker finds it: none of the query's words, next to the query vector
DENSE_ONLY = make_passage("Money back within two weeks of arrival.", acl=("group:staff",), anchor="dense")
# HR's passage, once readable by staff: the vector store still holds the staff grant (it lags behind)
REVOKED = make_passage("Refund deadline exceptions for the board.", acl=("group:hr",), anchor="revoked")
REVOKED_STALE = REVOKED.model_copy(update={"acl": ("group:hr", "group:staff")})


class _Counting:
    """The lexical adapter, recording every read-back (`passages`) with the IDs it was asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.read_back: list[list[str]] = []

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        self.read_back.append(list(passage_ids))
        return list(self.inner.passages(access, passage_ids))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Slow:
    """The vector adapter answering 0.3 s late, so the BM25 half has finished when the dense half reads back."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def search(self, vector: Any, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        time.sleep(0.3)
        return list(self.inner.search(vector, access, limit, floor))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Embedder:
    model_name = "fixed"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> Any:
        return np.stack([NEAR for _ in texts])

    def embed_query(self, text: str) -> Any:
        return NEAR


@pytest.fixture(params=list(PAIRS))
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    lexical_name, vector_name = PAIRS[request.param]
    lexical = LEXICAL_FACTORIES[lexical_name](tmp_path)
    vector = VECTOR_FACTORIES[vector_name](tmp_path)
    try:
        lexical.upsert([BOTH, DENSE_ONLY, REVOKED])
        vector.upsert([BOTH, DENSE_ONLY, REVOKED_STALE], np.stack([unit(1.0), unit(1.0, 0.1), unit(1.0, 0.02)]))
        yield lexical, vector
    finally:
        for store in (lexical, vector):
            drop = getattr(store, "drop_all", None)
            if drop and not getattr(store, "local", True):
                drop()
            store.close()


def _retriever(stores: tuple[Any, Any], concurrent: bool) -> tuple[Retriever, _Counting]:
    lexical, vector = _Counting(stores[0]), _Slow(stores[1])
    settings = RetrievalSettings(k=8, candidates=10, dense_floor=-1.0, concurrent=concurrent)
    return Retriever(lexical, vector, _Embedder(), None, settings), lexical  # type: ignore[arg-type]


def ids(hits: Sequence[Any]) -> set[str]:
    return {h.passage.passage_id for h in hits}


@pytest.mark.parametrize("concurrent", [False, True], ids=["one-after-the-other", "side-by-side"])
def test_the_dense_half_reads_back_only_what_the_bm25_half_did_not_return(
    stores: tuple[Any, Any], concurrent: bool
) -> None:
    retriever, lexical = _retriever(stores, concurrent)
    ranking = retriever.rank(QUERY, AccessFilter.for_principal(BOB, NOW))
    assert ids(ranking.lexical) == {BOTH.passage_id}
    assert ids(ranking.dense) == {BOTH.passage_id, DENSE_ONLY.passage_id}  # REVOKED: read back, refused
    assert [sorted(asked) for asked in lexical.read_back] == [sorted([DENSE_ONLY.passage_id, REVOKED.passage_id])]
    dense = {h.passage.passage_id: h for h in ranking.dense}
    assert dense[BOTH.passage_id].passage == BOTH  # the BM25 half's copy, with the dense score
    assert dense[BOTH.passage_id].score == pytest.approx(float(unit(1.0) @ NEAR), abs=1e-4)
    assert dense[DENSE_ONLY.passage_id].passage == DENSE_ONLY


@pytest.mark.parametrize("concurrent", [False, True], ids=["one-after-the-other", "side-by-side"])
def test_another_principals_bm25_passages_are_never_reused(stores: tuple[Any, Any], concurrent: bool) -> None:
    """Ann (HR) finds REVOKED by its words; Bob (staff) lost it, but the lagging vector store still admits it
    to him. On the same Retriever, right after Ann's search, Bob's read-back must ask for it and drop it."""
    retriever, lexical = _retriever(stores, concurrent)
    ann = retriever.search(ANN, QUERY, NOW)
    assert REVOKED.passage_id in {p.passage_id for p in ann.passages}
    lexical.read_back.clear()
    bob = retriever.search(BOB, QUERY, NOW)
    assert REVOKED.passage_id not in {p.passage_id for p in bob.passages}
    assert REVOKED.passage_id not in bob.dense_ids
    assert any(REVOKED.passage_id in asked for asked in lexical.read_back)
    assert {p.passage_id for p in bob.passages} == {BOTH.passage_id, DENSE_ONLY.passage_id}
