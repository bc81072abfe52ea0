"""VectorIndex contract, sentence vectors (`sentence_vectors`, `search_sentences`): qdrant-edge and the
Qdrant server adapter (server and qdrant-client's local mode), each opened with sentences on.

The sentence vectors sit on the passage's own point, so every write that reaches a passage reaches
them: these tests hold that a revoked, deleted, superseded or retired passage is never found through
its sentences, and that the permission filter is inside the store's query (the nearest denied sentences
never crowd out a permitted one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DIM, NOW, QDRANT_URL, make_passage, require_service, unique, unit

from indexer.ports import MAX_SENTENCE_VECTORS
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff", "user:ann"), NOW)
BOARD = AccessFilter("acme", ("group:board",), NOW)


def _edge(tmp: Path, sentences: bool = True) -> Any:
    from indexer.qdrant_edge import EdgeVectorIndex

    return EdgeVectorIndex(tmp / "vectors", DIM, sentences=sentences)


def _local(tmp: Path, sentences: bool = True) -> Any:
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    return QdrantVectorIndex(
        QdrantClient(path=str(tmp / "qdrant-local")), DIM, collection=unique("passages_"), sentences=sentences
    )


def _server(tmp: Path, sentences: bool = True) -> Any:
    require_service("qdrant")
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    return QdrantVectorIndex(
        QdrantClient(url=QDRANT_URL), DIM, collection=unique("test_passages_"), sentences=sentences
    )


FACTORIES: dict[str, Callable[..., Any]] = {
    "qdrant-edge": _edge,
    "qdrant-server": _server,
    "qdrant-client-local": _local,
}


def _close(index: Any) -> None:
    drop = getattr(index, "drop_all", None)
    if drop and not getattr(index, "local", True):
        drop()
    index.close()


@pytest.fixture(params=list(FACTORIES))
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = FACTORIES[request.param](tmp_path)
    yield made
    _close(made)


def ids(hits: list[Any]) -> list[str]:
    return [h.passage_id for h in hits]


def rows(*vectors: np.ndarray) -> np.ndarray:
    return np.stack(vectors).astype(np.float32)


def test_a_passage_is_found_by_its_best_sentence(index: Any) -> None:
    assert index.sentence_vectors
    far = make_passage("far", anchor="f-1")  # passage vector far from the query, one sentence on it
    near = make_passage("near", anchor="n-1")  # passage vector nearer, sentences further
    bare = make_passage("bare", anchor="b-1")  # no sentence vectors: never a sentence hit
    index.upsert(
        [far, near, bare],
        rows(unit(0, 1), unit(1, 1), unit(1, 0)),
        [rows(unit(0, 0, 1), unit(1, 0.05)), rows(unit(0.3, 1), unit(0, 0, 1)), np.zeros((0, DIM), dtype=np.float32)],
    )
    hits = index.search_sentences(unit(1, 0), STAFF, 10, -1.0)
    assert ids(hits) == ["doc.md@1#f-1", "doc.md@1#n-1"]
    assert hits[0].score == pytest.approx(float(unit(1, 0.05) @ unit(1, 0)), abs=1e-4), "max-sim, not a mean"
    assert (hits[0].doc_id, hits[0].version) == ("doc.md", 1)
    assert ids(index.search(unit(1, 0), STAFF, 1, -1.0)) == ["doc.md@1#b-1"], "the passage vector is unchanged"
    assert ids(index.search_sentences(unit(1, 0), STAFF, 10, 0.5)) == ["doc.md@1#f-1"], "the floor is the store's"


def test_the_permission_filter_is_inside_the_sentence_query(index: Any) -> None:
    passages = [
        make_passage("a", tenant="globex", anchor="g-1"),
        make_passage("b", acl=("group:board",), anchor="b-1"),
        make_passage("c", acl=(), anchor="none-1"),
        make_passage("d", anchor="s-1"),
    ]
    sentence = [rows(unit(1, 0)), rows(unit(1, 0.01)), rows(unit(1, 0.02)), rows(unit(0.1, 1))]
    index.upsert(passages, rows(*(unit(0, 0, 1) for _ in passages)), sentence)
    assert ids(index.search_sentences(unit(1, 0), STAFF, 1, -1.0)) == ["doc.md@1#s-1"]
    assert index.search_sentences(unit(1, 0), AccessFilter("acme", (), NOW), 10, -1.0) == []
    globex = AccessFilter("globex", ("group:staff",), NOW)
    assert ids(index.search_sentences(unit(1, 0), globex, 10, -1.0)) == ["doc.md@1#g-1"]


def test_revoked_deleted_and_removed_passages_are_never_found_by_their_sentences(index: Any) -> None:
    docs = ["x.md", "y.md", "z.md"]
    passages = [make_passage(d, doc_id=d, anchor="a-1") for d in docs]
    index.upsert(passages, rows(*(unit(0, 0, 1) for _ in docs)), [rows(unit(1, 0), unit(0, 1)) for _ in docs])
    index.flush()
    assert sorted(h.doc_id for h in index.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == docs
    index.set_acl("acme", "x.md", ["group:board"], {})
    assert sorted(h.doc_id for h in index.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == ["y.md", "z.md"]
    assert ids(index.search_sentences(unit(1, 0), BOARD, 10, -1.0)) == ["x.md@1#a-1"]
    index.delete_doc("acme", "y.md")
    index.delete_passages("acme", ["z.md@1#a-1"])
    index.flush()
    assert ids(index.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == []
    assert ids(index.search_sentences(unit(0, 1), BOARD, 10, -1.0)) == ["x.md@1#a-1"]
    index.delete_doc("acme", "x.md")
    assert index.search_sentences(unit(0, 1), BOARD, 10, -1.0) == []
    assert index.count("acme") == 0


def test_grant_instants_reach_the_sentence_vectors(index: Any) -> None:
    index.upsert([make_passage("a", anchor="a-1", acl=("group:hr",))], rows(unit(0, 1)), [rows(unit(1, 0))])
    granted = NOW - timedelta(days=3)
    index.set_acl("acme", "doc.md", ["group:hr", "group:staff"], {"group:staff": granted})

    def found(entries: tuple[str, ...], as_of: Any) -> list[str]:
        return ids(index.search_sentences(unit(1, 0), AccessFilter("acme", entries, as_of), 10, -1.0))

    assert found(("group:staff",), granted - timedelta(seconds=1)) == []
    assert found(("group:staff",), granted) == ["doc.md@1#a-1"]
    index.set_acl("acme", "doc.md", ["group:staff"], {"group:staff": granted + timedelta(days=1)})
    assert found(("group:staff",), granted) == [] and found(("group:hr",), NOW) == []


def test_superseded_versions_and_retention_reach_the_sentence_vectors(index: Any) -> None:
    v1 = make_passage("v1", version=1, anchor="t-1", effective_from=NOW - timedelta(days=100))
    v2 = make_passage("v2", version=2, anchor="t-1", effective_from=NOW - timedelta(days=10))
    index.upsert([v1], rows(unit(0, 1)), [rows(unit(1, 0))])
    index.upsert([v2], rows(unit(0, 1)), [rows(unit(1, 0.1))])
    index.supersede("acme", "doc.md", 2, NOW - timedelta(days=10))
    assert ids(index.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == ["doc.md@2#t-1"]
    old = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=50))
    assert ids(index.search_sentences(unit(1, 0), old, 10, -1.0)) == ["doc.md@1#t-1"]
    index.delete_superseded(NOW - timedelta(days=5))
    index.flush()
    assert index.search_sentences(unit(1, 0), old, 10, -1.0) == []
    details = index.purge()  # qdrant-edge: a rebuilt copy, loaded with the sentence vector
    assert details.get("complete", True), details
    assert ids(index.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == ["doc.md@2#t-1"]


def test_an_upsert_without_sentences_replaces_them(index: Any) -> None:
    p = make_passage("same", anchor="s-1")
    index.upsert([p], rows(unit(0, 1)), [rows(unit(1, 0))])
    index.upsert([p], rows(unit(0, 1)))
    assert index.search_sentences(unit(1, 0), STAFF, 10, -1.0) == []
    assert index.count("acme") == 1


def test_at_most_the_first_sentences_are_kept(index: Any) -> None:
    many = [unit(0, 1)] * MAX_SENTENCE_VECTORS + [unit(1, 0)]
    index.upsert([make_passage("long", anchor="l-1")], rows(unit(0, 0, 1)), [rows(*many)])
    (hit,) = index.search_sentences(unit(1, 0), STAFF, 10, -1.0)
    assert hit.score == pytest.approx(0.0, abs=1e-4), "the sentence past the cap was not stored"


def test_a_store_opened_without_sentences_keeps_none(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    for name, factory in FACTORIES.items():
        if name == "qdrant-server" and not _server_up():
            continue
        made = factory(tmp_path / name, sentences=False)
        try:
            assert not made.sentence_vectors
            made.upsert([make_passage("a", anchor="a-1")], rows(unit(0, 1)), [rows(unit(1, 0))])
            assert made.search_sentences(unit(1, 0), STAFF, 10, -1.0) == []
            assert ids(made.search(unit(0, 1), STAFF, 10, -1.0)) == ["doc.md@1#a-1"]
        finally:
            _close(made)


def test_qdrant_edge_adds_sentence_vectors_to_a_shard_made_without_and_reopens_either_way(tmp_path: Path) -> None:
    plain = _edge(tmp_path, sentences=False)
    plain.upsert([make_passage("old", anchor="o-1")], rows(unit(0, 1)))
    plain.flush()
    plain.close()
    added = _edge(tmp_path, sentences=True)
    assert added.sentence_vectors
    assert ids(added.search(unit(0, 1), STAFF, 10, -1.0)) == ["doc.md@1#o-1"]
    assert added.search_sentences(unit(1, 0), STAFF, 10, -1.0) == [], "written before: none until re-synced"
    added.upsert([make_passage("new", anchor="n-1")], rows(unit(0, 1)), [rows(unit(1, 0))])
    added.flush()
    added.close()
    off = _edge(tmp_path, sentences=False)  # the shard keeps its layout; the list is off
    assert not off.sentence_vectors and off.search_sentences(unit(1, 0), STAFF, 10, -1.0) == []
    assert off.count("acme") == 2
    off.close()
    again = _edge(tmp_path, sentences=True)
    assert ids(again.search_sentences(unit(1, 0), STAFF, 10, -1.0)) == ["doc.md@1#n-1"]
    again.close()


def _server_up() -> bool:
    import os

    try:
        require_service("qdrant")
    except pytest.skip.Exception:
        if os.environ.get("RAGSYNC_REQUIRE_SERVICES"):
            raise
        return False
    return True


@pytest.mark.parametrize("name", ["qdrant-server", "qdrant-client-local"])
def test_a_qdrant_collection_made_without_sentence_vectors_keeps_the_list_off(tmp_path: Path, name: str) -> None:
    """The server cannot add a named vector to a collection: one made without stays without (a warning
    says to re-create it), and one made with them still takes passage-only upserts."""
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    if name == "qdrant-server":
        require_service("qdrant")
        client: Callable[[], Any] = lambda: QdrantClient(url=QDRANT_URL)  # noqa: E731
    else:
        local = QdrantClient(path=str(tmp_path / "local"))
        client = lambda: local  # noqa: E731
    collection = unique("test_passages_")
    plain = QdrantVectorIndex(client(), DIM, collection=collection)
    plain.upsert([make_passage("a", anchor="a-1")], rows(unit(0, 1)))
    asked = QdrantVectorIndex(client(), DIM, collection=collection, sentences=True)
    try:
        assert not asked.sentence_vectors
        asked.upsert([make_passage("b", anchor="b-1")], rows(unit(0, 1)), [rows(unit(1, 0))])
        assert asked.search_sentences(unit(1, 0), STAFF, 10, -1.0) == []
        assert sorted(ids(asked.search(unit(0, 1), STAFF, 10, -1.0))) == ["doc.md@1#a-1", "doc.md@1#b-1"]
    finally:
        if name == "qdrant-server":
            asked.drop_all()
            asked.close()
            plain.close()
        else:
            local.close()
