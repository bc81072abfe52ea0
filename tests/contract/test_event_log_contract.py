"""EventLog contract: the SQLite log and Kafka."""

from __future__ import annotations

import time
from typing import Any

from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS


def upsert(doc: str, version: int) -> Event:
    return Event(
        event_id=make_event_id("test", "acme", doc, version, EventKind.UPSERT),
        kind=EventKind.UPSERT,
        tenant="acme",
        doc_id=doc,
        version=version,
        source="test",
        payload=UpsertPayload(
            content=f"v{version}",
            content_type="text",
            content_hash="0" * 16,
            acl=("group:staff",),
            source_url="file:///x",
        ),
    )


def poll_all(log: Any, topic: str, group: str, want: int, timeout_s: float = 20) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        out.extend(log.poll(topic, group, 100, 0.5))
    return out


def test_routes_by_kind_and_keeps_doc_order(event_log: Any) -> None:
    for v in range(1, 6):
        event_log.publish(upsert("test:a.md", v))
    event_log.publish(
        Event(
            event_id="acl-event-1",
            kind=EventKind.ACL,
            tenant="acme",
            doc_id="test:a.md",
            version=6,
            source="test",
            payload=AclPayload(acl=("group:x",)),
        )
    )
    event_log.publish(
        Event(
            event_id="del-event-1",
            kind=EventKind.DELETE,
            tenant="acme",
            doc_id="test:a.md",
            version=7,
            source="test",
            payload=DeletePayload(),
        )
    )
    event_log.flush()
    docs = poll_all(event_log, TOPIC_DOCUMENTS, "g1", 5)
    assert [Event.model_validate_json(r.value).version for r in docs] == [1, 2, 3, 4, 5]
    assert all(r.key == "acme/test:a.md" for r in docs)
    assert len(poll_all(event_log, TOPIC_ACL, "g1", 1)) == 1
    assert len(poll_all(event_log, TOPIC_DELETIONS, "g1", 1)) == 1


def test_uncommitted_records_are_redelivered(event_log: Any) -> None:
    for v in range(1, 4):
        event_log.publish(upsert(f"test:d{v}.md", 1))
    event_log.flush()
    first = poll_all(event_log, TOPIC_DOCUMENTS, "g2", 3)
    assert len(first) == 3
    event_log.commit("g2", [r for r in first if r.value == first[0].value])
    event_log.rewind(TOPIC_DOCUMENTS, "g2")
    again = poll_all(event_log, TOPIC_DOCUMENTS, "g2", 2)
    assert {r.value for r in again} == {r.value for r in first[1:]}
    event_log.commit("g2", again)
    event_log.rewind(TOPIC_DOCUMENTS, "g2")
    assert event_log.poll(TOPIC_DOCUMENTS, "g2", 100, 1.0) == []
    assert event_log.lag(TOPIC_DOCUMENTS, "g2") == 0


def test_groups_are_independent_and_lag_counts(event_log: Any) -> None:
    for v in range(1, 5):
        event_log.publish(upsert("test:x.md", v))
    event_log.flush()
    assert event_log.lag(TOPIC_DOCUMENTS, "ga") == 4
    got = poll_all(event_log, TOPIC_DOCUMENTS, "ga", 4)
    event_log.commit("ga", got)
    assert event_log.lag(TOPIC_DOCUMENTS, "ga") == 0
    assert event_log.lag(TOPIC_DOCUMENTS, "gb") == 4
    assert len(poll_all(event_log, TOPIC_DOCUMENTS, "gb", 4)) == 4


def test_raw_bytes_round_trip(event_log: Any) -> None:
    event_log.publish_raw(TOPIC_DOCUMENTS, "acme/bad", b"\xff not json")
    event_log.flush()
    got = poll_all(event_log, TOPIC_DOCUMENTS, "g3", 1)
    assert got[0].value == b"\xff not json" and got[0].key == "acme/bad"


# ---- remnants, physical removal, dead letters: declared on the port, answered by every adapter ----


def test_remnants_count_valued_records_and_removal_says_who_removes_them(event_log: Any) -> None:
    from streams.ports import TOPIC_DLQ

    dead_before = event_log.dead_letters()
    doc = f"test:{time.monotonic_ns()}.md"
    for v in (1, 2):
        event_log.publish(upsert(doc, v))
    event_log.publish_raw(TOPIC_DLQ, f"acme/{doc}", b'{"reason": "bad"}')
    event_log.flush()
    assert event_log.dead_letters() == dead_before + 1
    found = event_log.remnants("acme", doc)
    assert found["documents"] == 2 and found["dlq"] == 1
    assert event_log.remnants("acme", doc, 1)["documents"] == 1
    assert event_log.remnants("acme", "test:never.md")["documents"] == 0
    if event_log.removal == "purge":  # the log rewrites erased records itself; purge checkpoints them out
        event_log.erase_document("acme", doc, 2)
        assert event_log.remnants("acme", doc) == {"documents": 0, "dlq": 0}
        assert event_log.purge().get("checkpoint_complete") is True
    else:  # the broker's cleaner removes them: nothing of ours to purge, and the certificate says how long
        assert event_log.removal == "compaction"
        assert event_log.purge() == {} and found["compaction_bound_s"] > 0


def test_tombstone_is_durable_and_leaves_later_records_counted(event_log: Any) -> None:
    """Every log takes a tombstone (declared on the port, never probed for): Kafka appends null values for
    compaction, the SQLite log, which erases in place, has nothing to append. Either way the tombstone
    itself erases nothing now, and a re-creation published after it is the log's like any record."""
    doc = f"test:{time.monotonic_ns()}.md"
    for v in (1, 2):
        event_log.publish(upsert(doc, v))
    event_log.flush()
    event_log.tombstone(f"acme/{doc}", dead_letters=True)
    event_log.publish(upsert(doc, 3))
    event_log.flush()
    assert event_log.remnants("acme", doc, 2)["documents"] == 2
    assert event_log.remnants("acme", doc)["documents"] == 3


def test_a_journal_when_declared_keeps_what_each_commit_applied(event_log: Any) -> None:
    """`journal` is declared on the port (never probed with isinstance): None, or a journal whose entries
    are written with the offset commit, so a publisher elsewhere can wait for its events and read them."""
    from streams.ports import AppliedEntry

    journal = event_log.journal
    if journal is None:
        assert event_log.name == "kafka"  # the broker's consumer groups keep offsets only
        return
    group = f"journal-{time.monotonic_ns()}"
    start = journal.end_offsets([TOPIC_DOCUMENTS])[TOPIC_DOCUMENTS]
    event = upsert(f"test:{time.monotonic_ns()}.md", 1)
    event_log.publish(event)
    event_log.flush()
    assert journal.end_offsets([TOPIC_DOCUMENTS])[TOPIC_DOCUMENTS] == start + 1
    records = [r for r in poll_all(event_log, TOPIC_DOCUMENTS, group, start + 1) if r.offset >= start]
    assert [r.offset for r in records] == [start]
    journal.commit_applied(group, records, [AppliedEntry(TOPIC_DOCUMENTS, start, event.event_id, "applied", 2)])
    assert journal.committed_offsets(group)[TOPIC_DOCUMENTS] == start + 1
    assert [
        (e.event_id, e.outcome, e.passages_written) for e in journal.applied(group, TOPIC_DOCUMENTS, start, start + 1)
    ] == [(event.event_id, "applied", 2)]


def test_commits_inside_one_transaction_hold_once_it_ends(event_log: Any) -> None:
    """Declared on every log, so the embedded worker groups a round's writes without probing the log for
    the method: what is committed inside the block is the group's position once the block ends (the
    SQLite log commits it with the block's one transaction; Kafka's block groups nothing)."""
    for v in range(1, 4):
        event_log.publish(upsert(f"test:t{v}.md", 1))
    event_log.flush()
    records = poll_all(event_log, TOPIC_DOCUMENTS, "g-tx", 3)
    assert len(records) == 3
    with event_log.one_transaction():
        event_log.commit("g-tx", records[:2])
        event_log.commit("g-tx", records[2:])
    event_log.rewind(TOPIC_DOCUMENTS, "g-tx")
    assert event_log.poll(TOPIC_DOCUMENTS, "g-tx", 100, 1.0) == []
    assert event_log.lag(TOPIC_DOCUMENTS, "g-tx") == 0
