"""The learned query adapter (issue 23 item 3): only the question's vector moves, the store's filter stays."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import NOW, make_passage

from indexer.ports import Hit, VectorHit
from query.adapter import QueryAdapter
from query.retrieval import RetrievalSettings, Retriever
from ragsync.query_adapter import PACKAGED, AdapterUnavailable, load_adapter, save_adapter
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal, grants_allow

ANN = Principal(tenant="acme", user="ann", groups=("staff",))
SWAP = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
"""Moves a question along the first axis onto the second."""

EAST = make_passage("east wing", anchor="east-1")
NORTH = make_passage("north wing", anchor="north-1")
SECRET = make_passage("north vault codes", anchor="vault-1", acl=("group:board",))
VECTORS = {
    EAST.passage_id: np.array([1.0, 0.0, 0.0], dtype=np.float32),
    NORTH.passage_id: np.array([0.6, 0.8, 0.0], dtype=np.float32),
    SECRET.passage_id: np.array([0.0, 1.0, 0.0], dtype=np.float32),
}


class _Lexical:
    name = "fake-lexical"
    store = (EAST, NORTH, SECRET)

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        return []

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        return [p for p in self.store if p.passage_id in passage_ids and _readable(access, p)]


def _readable(access: AccessFilter, p: Passage) -> bool:
    return p.tenant == access.tenant and grants_allow(access.entries, p.acl, {}, access.as_of)


class _Vector:
    """Cosine search with the asker's filter applied inside the search, as the stores do."""

    name = "fake-vector"

    def __init__(self) -> None:
        self.asked: list[tuple[Any, AccessFilter]] = []

    def search(self, vector: Any, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        self.asked.append((np.asarray(vector), access))
        q = np.asarray(vector, dtype=np.float32)
        found = [
            VectorHit(p.passage_id, p.doc_id, p.version, float(VECTORS[p.passage_id] @ q))
            for p in _Lexical.store
            if _readable(access, p)
        ]
        return sorted((h for h in found if h.score >= floor), key=lambda h: -h.score)[:limit]


class _Embedder:
    model_name = "fake"
    dim = 3

    def embed(self, texts: Sequence[str]) -> Any:
        return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)

    def embed_query(self, text: str) -> Any:
        return np.array([1.0, 0.0, 0.0], dtype=np.float32)


def _retriever(adapter: QueryAdapter | None) -> tuple[Retriever, _Vector]:
    vector = _Vector()
    settings = RetrievalSettings(concurrent=False, dense_floor=-1.0)
    return Retriever(_Lexical(), vector, _Embedder(), None, settings, adapter=adapter), vector  # type: ignore[arg-type]


def test_the_adapter_moves_the_dense_search_and_nothing_it_may_not_read_comes_back() -> None:
    access = AccessFilter.for_principal(ANN, NOW)
    plain, plain_store = _retriever(None)
    assert [h.passage.passage_id for h in plain.dense_hits("wing", access)] == [EAST.passage_id, NORTH.passage_id]
    moved, store = _retriever(QueryAdapter(SWAP, 1.0))
    hits = moved.dense_hits("wing", access)
    # The question now lies on the second axis: the north wing first; the vault, nearer still, stays unread.
    assert [h.passage.passage_id for h in hits] == [NORTH.passage_id, EAST.passage_id]
    (searched, filtered), (plain_searched, plain_filtered) = store.asked[0], plain_store.asked[0]
    assert np.allclose(searched, [0.0, 1.0, 0.0]) and np.allclose(plain_searched, [1.0, 0.0, 0.0])
    assert filtered == plain_filtered == access  # the store's filter is the asker's, unchanged


def test_strength_blends_and_every_vector_searched_is_a_unit_vector() -> None:
    q = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    assert np.array_equal(QueryAdapter(SWAP, 0.0).apply(q), q)
    half = QueryAdapter(SWAP, 0.5).apply(q)
    assert np.allclose(half, [np.sqrt(0.5), np.sqrt(0.5), 0.0])
    assert np.isclose(np.linalg.norm(QueryAdapter(SWAP * 3.0, 0.7).apply(q)), 1.0)
    # A matrix that sends the question to zero leaves the question as it was rather than searching with noise.
    assert np.array_equal(QueryAdapter(np.zeros((3, 3), dtype=np.float32), 1.0).apply(q), q)
    with pytest.raises(ValueError):
        QueryAdapter(SWAP, 1.5)
    with pytest.raises(ValueError):
        QueryAdapter(SWAP).apply(np.ones(4, dtype=np.float32))


def test_an_adapter_file_for_another_model_or_with_nan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    save_adapter(path, SWAP, source="test", note="")
    assert np.allclose(load_adapter(path, 1.0, 3).matrix, SWAP)
    with pytest.raises(AdapterUnavailable, match="gives 4 dimensions"):
        load_adapter(path, 1.0, 3 + 1)
    save_adapter(path, np.full((3, 3), np.nan, dtype=np.float32), source="test", note="")
    with pytest.raises(AdapterUnavailable, match="non-finite"):
        load_adapter(path, 1.0, 3)
    with pytest.raises(AdapterUnavailable):
        load_adapter(tmp_path / "missing.npz", 1.0, 3)


def test_the_packaged_adapter_fits_minilm_and_stays_near_the_identity() -> None:
    adapter = load_adapter(PACKAGED, 1.0, 384)
    assert 0.0 < float(np.linalg.norm(adapter.matrix - np.eye(384))) < 0.5 * np.sqrt(384)


def test_the_setting_loads_the_adapter_only_above_zero_and_refuses_a_file_that_does_not_fit(tmp_path: Path) -> None:
    from conftest import MODEL_PATH

    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")

    def retriever(**settings: Any) -> Retriever:
        s = Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="s" * 32, **settings)
        components = build_embedded(s)
        try:
            return components.retriever()
        finally:
            components.close()

    assert retriever().adapter is None  # the default: off
    on = retriever(query_adapter_strength=0.5).adapter
    assert on is not None and on.strength == 0.5 and on.dim == 384  # the packaged adapter
    small = tmp_path / "small.npz"
    save_adapter(small, SWAP, source="test", note="")
    with pytest.raises(AdapterUnavailable, match="384"):
        retriever(query_adapter_strength=0.5, query_adapter_path=small)
