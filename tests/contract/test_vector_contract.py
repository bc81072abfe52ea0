"""VectorIndex contract: qdrant-edge (embedded) and the Qdrant server adapter (qdrant-client)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
from concurrent_writes import revoke_then_delete_twelve
from conftest import NOW, make_passage, unit

from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff", "user:ann"), NOW)


def ids(hits: list[Any]) -> list[str]:
    return [h.passage_id for h in hits]


def test_nearest_first_with_payload(vector_index: Any) -> None:
    vector_index.upsert(
        [make_passage("east", anchor="e-1"), make_passage("north", anchor="n-1")],
        np.stack([unit(1, 0), unit(0, 1)]),
    )
    hits = vector_index.search(unit(1, 0.1), STAFF, 10, 0.0)
    assert ids(hits) == ["doc.md@1#e-1", "doc.md@1#n-1"]
    assert hits[0].score > hits[1].score
    assert (hits[0].doc_id, hits[0].version) == ("doc.md", 1)


def test_the_store_holds_no_text(vector_index: Any) -> None:
    """IDs and filter fields only: a vector store's segments and log never hold a document's words."""
    vector_index.upsert(
        [make_passage("zebrawordinvector", anchor="z-1", heading_path=("quaggaheading",))], np.stack([unit(1, 0)])
    )
    (hit,) = vector_index.search(unit(1, 0), STAFF, 10, 0.0)
    assert hit.passage_id == "doc.md@1#z-1"
    payload = vector_index.payload_of("acme", "doc.md@1#z-1")
    assert set(payload) <= {
        "passage_id",
        "doc_id",
        "version",
        "tenant",
        "acl",
        "acl_since",
        "effective_from",
        "superseded_on",
    }
    assert "zebrawordinvector" not in str(payload) and "quaggaheading" not in str(payload)


def test_tenant_and_acl_filter_inside_query(vector_index: Any) -> None:
    vector_index.upsert(
        [
            make_passage("a", tenant="globex", anchor="g-1"),
            make_passage("b", acl=("group:board",), anchor="b-1"),
            make_passage("c", acl=(), anchor="none-1"),
            make_passage("d", anchor="s-1"),
        ],
        np.stack([unit(1, 0), unit(1, 0.01), unit(1, 0.02), unit(0.1, 1)]),
    )
    # The three nearest are all denied; the store must still return the permitted one.
    assert ids(vector_index.search(unit(1, 0), STAFF, 1, 0.0)) == ["doc.md@1#s-1"]
    assert vector_index.search(unit(1, 0), AccessFilter("acme", (), NOW), 10, 0.0) == []
    assert ids(vector_index.search(unit(1, 0), AccessFilter("globex", ("group:staff",), NOW), 10, 0.0)) == [
        "doc.md@1#g-1"
    ]


def test_dates_supersede_and_as_of(vector_index: Any) -> None:
    vector_index.upsert(
        [make_passage("v1", version=1, anchor="t-1", effective_from=NOW - timedelta(days=100))], np.stack([unit(1, 0)])
    )
    vector_index.upsert(
        [make_passage("v2", version=2, anchor="t-1", effective_from=NOW - timedelta(days=10))], np.stack([unit(1, 0)])
    )
    vector_index.upsert(
        [make_passage("v3", version=3, anchor="t-1", effective_from=NOW + timedelta(days=10))], np.stack([unit(1, 0)])
    )
    vector_index.supersede("acme", "doc.md", 2, NOW - timedelta(days=10))
    assert ids(vector_index.search(unit(1, 0), STAFF, 10, 0.0)) == ["doc.md@2#t-1"]
    old = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=50))
    assert ids(vector_index.search(unit(1, 0), old, 10, 0.0)) == ["doc.md@1#t-1"]
    later = AccessFilter("acme", STAFF.entries, NOW + timedelta(days=11))
    assert sorted(ids(vector_index.search(unit(1, 0), later, 10, 0.0))) == ["doc.md@2#t-1", "doc.md@3#t-1"]
    assert vector_index.count("acme", "doc.md") == 3


def test_acl_replacement_delete_and_floor(vector_index: Any) -> None:
    vector_index.upsert(
        [make_passage("x", anchor="x-1"), make_passage("y", doc_id="y.md", anchor="y-1")],
        np.stack([unit(1, 0), unit(0.1, 1)]),
    )
    vector_index.set_acl("acme", "doc.md", ["group:board"], {})
    assert ids(vector_index.search(unit(1, 0), STAFF, 10, 0.0)) == ["y.md@1#y-1"]
    assert ids(vector_index.search(unit(1, 0), AccessFilter("acme", ("group:board",), NOW), 10, 0.0)) == [
        "doc.md@1#x-1"
    ]
    # Floor: a cosine of about 0.1 is below a 0.5 floor.
    assert ids(vector_index.search(unit(1, 0), STAFF, 10, 0.5)) == []
    assert ids(vector_index.search(unit(0, 1), STAFF, 10, 0.5)) == ["y.md@1#y-1"]
    vector_index.delete_doc("acme", "y.md")
    assert vector_index.count("acme", "y.md") == 0
    assert vector_index.search(unit(0, 1), STAFF, 10, 0.0) == []
    vector_index.delete_passages("acme", ["doc.md@1#x-1"])
    assert vector_index.count("acme") == 0


def test_upsert_idempotent(vector_index: Any) -> None:
    p = make_passage("same", anchor="s-1")
    vector_index.upsert([p], np.stack([unit(1, 0)]))
    vector_index.upsert([p], np.stack([unit(1, 0)]))
    assert vector_index.count("acme") == 1


def test_inventory_lists_every_version_with_the_acl_the_filter_matches(vector_index: Any) -> None:
    from indexer.ports import StoredPassage

    passages = [
        make_passage("old", anchor="a-1"),
        make_passage("new", version=2, anchor="a-1"),
        make_passage("other", doc_id="other.md", anchor="o-1"),
        make_passage("globex", tenant="globex", anchor="a-1"),
    ]
    vector_index.upsert(passages, np.stack([unit(1, 0), unit(0, 1), unit(1, 1), unit(1, 2)]))
    vector_index.set_acl("acme", "doc.md", ["user:ceo", "group:hr"], {})
    assert vector_index.inventory("acme", "doc.md") == [
        StoredPassage("doc.md@1#a-1", 1, ("group:hr", "user:ceo")),
        StoredPassage("doc.md@2#a-1", 2, ("group:hr", "user:ceo")),
    ]
    vector_index.delete_doc("acme", "doc.md")
    assert vector_index.inventory("acme", "doc.md") == []
    assert [s.passage_id for s in vector_index.inventory("globex", "doc.md")] == ["doc.md@1#a-1"]


def test_grant_instants_admit_an_entry_only_from_its_instant_on(vector_index: Any) -> None:
    """Access per version (issue 18): an entry admits as of an instant only from its grant instant on;
    set_acl replaces the instants (an entry dropped and granted again starts over)."""
    vector_index.upsert([make_passage("a", anchor="a-1", acl=("group:hr",))], np.stack([unit(1, 0)]))
    granted = NOW - timedelta(days=3)
    vector_index.set_acl("acme", "doc.md", ["group:hr", "group:staff"], {"group:staff": granted})

    def found(entries: tuple[str, ...], as_of: Any) -> list[str]:
        return ids(vector_index.search(unit(1, 0), AccessFilter("acme", entries, as_of), 10, -1.0))

    assert found(("group:staff",), granted - timedelta(seconds=1)) == []
    assert found(("group:staff",), granted) == ["doc.md@1#a-1"]
    assert found(("group:hr",), granted - timedelta(days=1)) == ["doc.md@1#a-1"], "no instant: always"
    assert found(("group:hr", "group:staff"), granted - timedelta(seconds=1)) == ["doc.md@1#a-1"]
    vector_index.set_acl("acme", "doc.md", ["group:staff"], {"group:staff": granted + timedelta(days=1)})
    assert found(("group:staff",), granted) == [], "replaced, not merged"
    assert found(("group:hr",), NOW) == []
    (held,) = vector_index.inventory("acme", "doc.md")
    assert held.acl == ("group:staff",) and [e for e, _ in held.since] == ["group:staff"]


# ---- retention, physical purge, probes and upkeep: declared on the port, answered by every adapter ----


def test_retention_purge_and_what_the_store_still_holds(vector_index: Any) -> None:
    from indexer.payload import point_id

    old = make_passage("a", doc_id="old.md", superseded_on=NOW - timedelta(days=10))
    live = make_passage("b", doc_id="live.md")
    vector_index.upsert([old, live], np.stack([unit(1), unit(0, 1)]))
    vector_index.flush()
    points = [point_id(p.tenant, p.passage_id) for p in (old, live)]
    assert vector_index.held(points) == 2 and vector_index.held([]) == 0
    assert vector_index.point_ids(points) == set(points) and vector_index.point_ids([]) == set()
    vector_index.delete_superseded(NOW - timedelta(days=5))
    vector_index.flush()
    assert vector_index.held(points) == 1 and vector_index.point_ids(points) == {points[1]}
    details = vector_index.purge()
    assert details.get("complete", True), details
    assert vector_index.held(points) == 1 and vector_index.count("acme") == 1
    left = vector_index.deleted_vectors()
    assert left is None or left >= 0
    indexed = vector_index.indexed()
    assert indexed is None or (indexed[0] == 1 and 0 <= indexed[1] <= 1)
    assert not vector_index.optimize_due(10**9, 0.0)  # far fewer changes than asked for


def test_twelve_concurrent_revocations_then_deletions_are_each_visible_when_their_call_returns(
    vector_index: Any,
) -> None:
    """As the LexicalIndex contract's: each change is in effect for the next search when its call
    returns; adapters that declare `combines_writes` (QdrantVectorIndex, server or local) make the twelve in
    two writes."""
    docs = [f"d{i:02d}.md" for i in range(12)]
    vector_index.upsert([make_passage(d, doc_id=d, anchor="a-1") for d in docs], np.stack([unit(1, 0)] * 12))
    board = AccessFilter("acme", ("group:board",), NOW)

    def revoked(doc: str) -> bool:
        staff = {h.doc_id for h in vector_index.search(unit(1, 0), STAFF, 20, 0.0)}
        return doc not in staff and doc in {h.doc_id for h in vector_index.search(unit(1, 0), board, 20, 0.0)}

    def deleted(doc: str) -> bool:
        found = {h.doc_id for h in vector_index.search(unit(1, 0), board, 20, 0.0)}
        return doc not in found and vector_index.count("acme", doc) == 0

    revoke_then_delete_twelve(vector_index, docs, revoked, deleted)
    assert vector_index.count("acme") == 0
