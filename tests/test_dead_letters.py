"""Reading and replaying dead letters works the same on every event log (SQLite and Kafka)."""

from __future__ import annotations

from typing import Any

from ragsync.dead_letters import DLQ_GROUP, pending, replay
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS, Record, dead_letter_value


def dead_letter(log: Any, offset: int, value: bytes, reason: str) -> None:
    """All for one document, so one partition on Kafka too: order holds per partition only."""
    original = Record(TOPIC_DOCUMENTS, 0, offset, "acme/doc.md", value)
    log.publish_raw(TOPIC_DLQ, original.key, dead_letter_value(original, reason))


def drain(log: Any, topic: str, group: str) -> list[Record]:
    out: list[Record] = []
    while batch := log.poll(topic, group, max_records=100, timeout_s=2.0):
        out.extend(batch)
    return out


def test_pending_replay_and_what_stays(event_log: Any) -> None:
    dead_letter(event_log, 7, b'{"event": 1}', "store down")
    dead_letter(event_log, 8, "caf\u00e9 bytes".encode("latin-1"), "not JSON")
    dead_letter(event_log, 9, b"cut", "too big (value truncated from 20000000 bytes)")
    dead_letter(event_log, 10, b'{"event": 4}', "store down")
    event_log.flush()

    listed = pending(event_log)
    again = pending(event_log)  # listing never moves the replay position

    assert [(d.origin, d.reason, d.replayable) for d in listed] == [
        ("documents 0:7", "store down", True),
        ("documents 0:8", "not JSON", True),
        ("documents 0:9", "too big (value truncated from 20000000 bytes)", False),
        ("documents 0:10", "store down", True),
    ]
    assert [d.id for d in again] == [d.id for d in listed]
    assert listed[1].value == "caf\u00e9 bytes".encode("latin-1"), "original bytes kept verbatim"

    done = replay(event_log)

    assert done.replayed == [listed[0].id, listed[1].id] and done.stuck is not None and done.stuck.id == listed[2].id
    assert [r.value for r in drain(event_log, TOPIC_DOCUMENTS, "dlq-test-reader")] == [
        b'{"event": 1}',
        "caf\u00e9 bytes".encode("latin-1"),
    ]
    assert [d.origin for d in pending(event_log)] == ["documents 0:9", "documents 0:10"]
    assert event_log.lag(TOPIC_DLQ, DLQ_GROUP) == 2  # what the ragsync_dead_letters metric reports
