"""Order and duplicates (issue 8, "prove the class is closed"): any at-least-once delivery converges.

Hypothesis generates, for a few documents, a history a connector could emit (upserts, ACL changes,
deletes, a document coming back after a delete; versions increasing per document), then delivers
it the way the event logs may: the three topics interleaved in any order (revocations overtake
upserts, deletions overtake both), each topic in order per document, and any event delivered again
at any later point (a redelivery after a crash or a rebalance). Every record goes through the real
decode path and the real sink into the real embedded stores (SQLite FTS5, qdrant-edge) with the
real embedding model.

Invariants:
- the final state equals applying the latest version per document: the newest content under the
  newest ACL in every store, every older version carrying that ACL too, or nothing at all when the
  newest event is a delete;
- a deleted document never comes back: after a delete is applied, no store ever again holds a
  passage of a version at or below it;
- an ACL change is never lost, and `ragsync verify`'s reconciliation finds no drift.

CI runs a fixed seed (derandomized) with the "ci" profile; the long run is
`HYPOTHESIS_PROFILE=long python3 -m pytest -p no:cacheprovider tests/test_order_property.py` (see bench/README.md).
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from histories import Op
from histories import history as emitted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.cache import InProcessCache
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from ragsync.verify import reconcile_stores
from schemas.events import AclPayload, DeletePayload, Event, UpsertPayload
from streams.dispatch import Stats, handle
from streams.ports import Record, topic_for

settings.register_profile(
    "ci", max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
DOCS = ("a.md", "b.md", "c.md")
GROUPS = ("group:staff", "group:hr", "group:board", "user:ann")
COUNTS: dict[str, int] = {"examples": 0, "deliveries": 0, "duplicates": 0}


acls = st.lists(st.sampled_from(GROUPS), max_size=3, unique=True).map(lambda xs: tuple(sorted(xs)))
ops = st.one_of(
    st.builds(Op, st.just("upsert"), acls, st.integers(1, 3)),
    st.builds(Op, st.just("acl"), acls),
    st.builds(Op, st.just("delete")),
)


def sections(doc: str, version: int, op: Op) -> str:
    """Each section a canary naming the document, version and section."""
    parts = "\n\n".join(
        f"## Part {i}\n\nCanary {doc.removesuffix('.md')}v{version}p{i} says version {version}."
        for i in range(op.sections)
    )
    return f"# {doc}\n\n{parts}\n"


def history(doc: str, steps: list[Op]) -> list[Event]:
    """One minute between events, each upsert stating its instant."""
    return emitted(doc, steps, T0, sections, effective_from=True)


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[Event], list[Event]]:
    """(every event emitted, the order they are delivered in, with duplicates)."""
    emitted: list[Event] = []
    for doc in DOCS[: draw(st.integers(1, len(DOCS)))]:
        emitted.extend(history(doc, draw(st.lists(ops, min_size=2, max_size=9))))
    queues: dict[str, list[Event]] = {}
    for event in sorted(emitted, key=lambda e: (e.doc_id, e.version)):
        queues.setdefault(topic_for(event), []).append(event)  # per topic, in order per document
    delivered: list[Event] = []
    while any(queues.values()):
        topic = draw(st.sampled_from(sorted(t for t, q in queues.items() if q)))
        delivered.append(queues[topic].pop(0))
        if delivered and draw(st.integers(0, 4)) == 0:  # a redelivery of anything already delivered
            delivered.append(draw(st.sampled_from(delivered)))
    return emitted, delivered


@pytest.fixture(scope="module")
def model(embedder: Any) -> Any:
    return embedder


def _record(event: Event, offset: int) -> Record:
    return Record(topic_for(event), 0, offset, event.key, event.model_dump_json().encode())


@settings(settings.get_profile(PROFILE))
@given(case=deliveries())
def test_any_at_least_once_delivery_converges_to_the_latest_version(model: Any, case: Any) -> None:
    emitted, delivered = case
    COUNTS["examples"] += 1
    COUNTS["deliveries"] += len(delivered)
    COUNTS["duplicates"] += len(delivered) - len(emitted)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        lexical = SqliteLexicalIndex(root / "lexical.db")
        vector = EdgeVectorIndex(root / "vectors", model.dim)
        docs = SqliteDocStates(root / "state.db")
        audit = SqliteDeletionAudit(root / "state.db")
        sink = IndexSink(lexical, vector, model, docs, audit, InProcessCache())
        stats = Stats()
        try:
            for offset, event in enumerate(delivered):
                assert handle(sink, _record(event, offset), stats, 30.0) is None, "a valid event is never dead-lettered"
                state = docs.get(event.tenant, event.doc_id)
                if state is not None and state.deleted:  # a deleted document never comes back
                    assert all(p.version > state.applied_version for p in lexical.inventory("acme", event.doc_id))
            for doc in {e.doc_id for e in emitted}:
                _check_final(doc, [e for e in emitted if e.doc_id == doc], lexical, vector, docs)
        finally:
            for store in (lexical, vector, docs, audit):
                store.close()


def _check_final(doc_id: str, events: list[Event], lexical: Any, vector: Any, docs: Any) -> None:
    latest = max(events, key=lambda e: e.version)
    state = docs.get("acme", doc_id)
    assert state is not None and state.applied_version == latest.version, (doc_id, state)
    held = {"lexical": lexical.inventory("acme", doc_id), "vector": vector.inventory("acme", doc_id)}
    if isinstance(latest.payload, DeletePayload):
        assert state.deleted and held == {"lexical": [], "vector": []}, "deleted: nothing left anywhere"
        return
    upsert = max((e for e in events if isinstance(e.payload, UpsertPayload)), key=lambda e: e.version)
    acl_event = max((e for e in events if isinstance(e.payload, UpsertPayload | AclPayload)), key=lambda e: e.version)
    assert isinstance(acl_event.payload, UpsertPayload | AclPayload)
    want_acl = tuple(sorted(acl_event.payload.acl))
    assert not state.deleted and state.content_version == upsert.version
    assert tuple(sorted(state.acl)) == want_acl, "the newest ACL is never lost"
    for name, passages in held.items():
        assert {p.version for p in passages} >= {upsert.version}, name
        assert all(p.acl == want_acl for p in passages), f"{name}: every version under the newest ACL"
    assert reconcile_stores(state, held) == []


def test_report_counts() -> None:
    """How many histories and deliveries were tried (pytest -s prints it), and that the run tried what
    the property claims: deliveries beyond the histories' own events, redeliveries among them."""
    print(f"order/duplicates property: {COUNTS}")
    if COUNTS["examples"]:
        assert COUNTS["deliveries"] >= 2 * COUNTS["examples"], "every history delivers at least two events"
        assert COUNTS["duplicates"] > 0, "redeliveries were tried"


def test_a_recreated_document_whose_acl_overtakes_its_upsert_is_not_lost(model: Any, tmp_path: Path) -> None:
    """Found by the property above: delete v2, then the re-created document's ACL v4 overtook its upsert
    v3; v3 was then taken for stale against the tombstone and the document stayed deleted for good,
    while upsert v1 arriving late could bring deleted content back."""
    events = history("a.md", [Op("upsert", (), 1), Op("delete"), Op("upsert", ("group:staff",), 1), Op("acl", ())])
    assert [e.version for e in events] == [1, 2, 3, 4]
    v1, delete, v3, acl = events
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    vector = EdgeVectorIndex(tmp_path / "vectors", model.dim)
    docs = SqliteDocStates(tmp_path / "state.db")
    audit = SqliteDeletionAudit(tmp_path / "state.db")
    sink = IndexSink(lexical, vector, model, docs, audit, InProcessCache())
    try:
        for offset, event in enumerate([delete, acl, v1, v3, delete]):
            handle(sink, _record(event, offset), Stats(), 30.0)
        _check_final("t:a.md", events, lexical, vector, docs)
        assert {p.version for p in lexical.inventory("acme", "t:a.md")} == {3}, "deleted v1 never comes back"
    finally:
        for store in (lexical, vector, docs, audit):
            store.close()
