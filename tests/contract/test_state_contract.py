"""DocStateStore and DeletionAudit contracts: SQLite (embedded) and Elasticsearch (cluster)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, require_service, unique

from indexer.ports import DeletionRecord, DocState


def _sqlite_states(tmp: Path) -> tuple[Any, Any]:
    from indexer.state import SqliteDeletionAudit, SqliteDocStates

    return SqliteDocStates(tmp / "state.db"), SqliteDeletionAudit(tmp / "state.db")


def _elastic_states(tmp: Path) -> tuple[Any, Any]:
    require_service("elasticsearch")
    from indexer.elastic_audit import ElasticDeletionAudit
    from indexer.elastic_state import ElasticDocStates

    prefix = unique("ragsync-test-")
    return (
        ElasticDocStates("http://127.0.0.1:9200", prefix=prefix),
        ElasticDeletionAudit("http://127.0.0.1:9200", prefix=prefix),
    )


FACTORIES: dict[str, Callable[[Path], tuple[Any, Any]]] = {"sqlite": _sqlite_states, "elasticsearch": _elastic_states}


@pytest.fixture(params=list(FACTORIES))
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    docs, audit = FACTORIES[request.param](tmp_path)
    yield docs, audit
    for s in (docs, audit):
        drop = getattr(s, "drop_all", None)
        if drop:
            drop()
        s.close()


def test_doc_state_round_trip_and_overwrite(stores: tuple[Any, Any]) -> None:
    docs, _ = stores
    assert docs.get("acme", "a.md") is None
    state = DocState(
        tenant="acme",
        doc_id="a.md",
        applied_version=3,
        acl=("group:x",),
        content_version=3,
        content_hash="h" * 16,
        chunker_version="c1",
        passage_ids=["a.md@3#r-1", "a.md@3#r-2"],
    )
    docs.put(state)
    assert docs.get("acme", "a.md") == state
    assert docs.get("globex", "a.md") is None
    docs.put(DocState(tenant="acme", doc_id="a.md", applied_version=4, deleted=True, acl=("group:x",)))
    got = docs.get("acme", "a.md")
    assert got.deleted and got.applied_version == 4 and got.passage_ids == []


def record(event_id: str, doc: str = "a.md", tenant: str = "acme") -> DeletionRecord:
    return DeletionRecord(
        event_id=event_id,
        tenant=tenant,
        doc_id=doc,
        version=2,
        received_at=NOW,
        removed_at={"lexical": NOW + timedelta(milliseconds=5)},
        cache_invalidated_at=NOW + timedelta(milliseconds=9),
        passages_removed=4,
    )


def test_audit_appends_once_per_event_and_filters_by_tenant(stores: tuple[Any, Any]) -> None:
    _, audit = stores
    audit.append(record("e1"))
    audit.append(record("e1"))
    audit.append(record("e2", doc="b.md"))
    audit.append(record("e3", tenant="globex"))
    acme = audit.records("acme")
    assert [r.event_id for r in acme] == ["e1", "e2"]
    assert acme[0] == record("e1")
    assert len(audit.records()) == 3


def tamper(audit: Any, seq: int, *, remove: bool = False) -> None:
    """Change or remove a stored record behind the adapter's back, as someone with file or cluster access could."""
    import json

    if hasattr(audit, "_es"):
        rid = audit._id(seq)
        if remove:
            audit._es.delete(index=audit.index, id=rid, refresh=True)
            return
        src = audit._es.get(index=audit.index, id=rid)["_source"]
        body = json.loads(src["body"])
        body["passages_removed"] += 1
        audit._es.index(index=audit.index, id=rid, document={**src, "body": json.dumps(body)}, refresh=True)
        return
    conn = audit._db.conn
    conn.execute("DROP TRIGGER IF EXISTS audit_chain_no_update")
    conn.execute("DROP TRIGGER IF EXISTS audit_chain_no_delete")
    if remove:
        conn.execute("DELETE FROM audit_chain WHERE seq = ?", (seq,))
    else:
        edit = "UPDATE audit_chain SET body = replace(body, '\"version\":2', '\"version\":1') WHERE seq = ?"
        conn.execute(edit, (seq,))


def test_audit_chain_links_records_and_detects_tampering(stores: tuple[Any, Any]) -> None:
    from indexer.audit_chain import verify
    from indexer.ports import PurgeRecord

    _, audit = stores
    for i in range(4):
        audit.append(record(f"t{i}", doc=f"d{i}.md"))
    audit.append_purge(PurgeRecord(store="lexical", at=NOW + timedelta(seconds=1), covers_seq=4, details={"merged": 1}))
    links, head = audit.chain()
    assert [link.seq for link in links] == [1, 2, 3, 4, 5] and head == (5, links[-1].hash)
    assert links[1].prev_hash == links[0].hash
    assert verify(links, head) == []
    assert audit.tip() == 5
    (purge,) = audit.purges("lexical")
    assert purge.covers_seq == 4 and purge.details == {"merged": 1} and purge.seq == 5
    assert [r.seq for r in audit.records()] == [1, 2, 3, 4]

    tamper(audit, 2)
    problems = verify(*audit.chain())
    assert [p.seq for p in problems] == [2] and "edited" in problems[0].problem

    tamper(audit, 3, remove=True)
    problems = verify(*audit.chain())
    assert {p.seq for p in problems} >= {2, 4}

    tamper(audit, 5, remove=True)
    links, head = audit.chain()
    assert any("chain head" in p.problem for p in verify(links, head))


def test_latest_record_of_each_kind_is_what_makes_a_purge_pending(stores: tuple[Any, Any]) -> None:
    from indexer.audit_records import KIND_DELETION, KIND_PURGE
    from indexer.ports import PurgeRecord

    _, audit = stores
    assert audit.latest(KIND_DELETION) == audit.latest(KIND_PURGE) == 0
    audit.append(record("k1"))
    for store in ("lexical", "vector"):
        audit.append_purge(PurgeRecord(store=store, at=NOW + timedelta(seconds=1), covers_seq=1, details={}))
    assert audit.latest(KIND_DELETION) == 1 and audit.latest(KIND_PURGE) == 3 and audit.tip() == 3
    audit.append(record("k2", doc="b.md"))
    assert audit.latest(KIND_DELETION) == 4 and audit.latest(KIND_PURGE) == 3
    links, head = audit.chain()
    assert len(links) == 4 and head == (4, links[-1].hash)


def test_states_lists_every_document_and_tombstone_in_order(stores: tuple[Any, Any]) -> None:
    docs, _ = stores
    assert docs.states() == []
    docs.put(DocState("globex", "d:b.md", applied_version=1, acl=("group:x",), content_version=1, passage_ids=["p"]))
    docs.put(DocState("acme", "d:z.md", applied_version=3, deleted=True))
    docs.put(DocState("acme", "d:a.md", applied_version=2, acl=("group:staff",), content_version=2, acl_version=2))
    listed = docs.states()
    assert [(s.tenant, s.doc_id, s.applied_version, s.deleted) for s in listed] == [
        ("acme", "d:a.md", 2, False),
        ("acme", "d:z.md", 3, True),
        ("globex", "d:b.md", 1, False),
    ]
    assert listed[2].passage_ids == ["p"] and listed[0].acl == ("group:staff",)


def test_counts_by_tenant_count_live_documents_only(stores: tuple[Any, Any]) -> None:
    docs, _ = stores
    assert docs.counts_by_tenant() == {}
    for tenant, doc, deleted in (("acme", "a.md", False), ("acme", "b.md", False), ("acme", "c.md", True)):
        docs.put(DocState(tenant=tenant, doc_id=doc, applied_version=1, deleted=deleted))
    docs.put(DocState(tenant="globex", doc_id="a.md", applied_version=1))
    docs.flush()
    assert docs.counts_by_tenant() == {"acme": 2, "globex": 1}
