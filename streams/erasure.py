"""Erasing a document's content from Kafka, where records cannot be rewritten: markers, tombstones, rolls.

The documents and dlq topics are compacted by key (`tenant/doc_id`, streams.kafka_admin.TOPIC_CONFIGS),
so a tombstone (a record of the key with no value) makes the broker drop every earlier record of
that key. Appending one the moment a deletion is applied could drop an upsert of a re-created
document that was published before the tombstone but not consumed yet (the documents topic may
hold a backlog; the deletions topic never waits for it). So a worker that applied a deletion
appends an *erase marker* to the documents topic instead; the documents consumer, which reads the
key's partition in order, reaches the marker only after every record published before it was
applied, and only then appends the tombstones (documents and dlq). Compaction runs on rolled
segments only, and a segment rolls only when a record arrives after `segment.ms`: `RollSchedule`
says which partitions need a roll marker (a tombstone of a reserved key) and when.

Consumers skip markers, tombstones and roll markers alike (streams.dispatch.is_tombstone).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

ERASE_FIELD = "ragsync_erase"
ROLL_KEY = "\x00ragsync-roll"
"""The reserved key of roll markers: no document key can be it (tenants never start with NUL)."""


@dataclass(frozen=True, slots=True)
class EraseMarker:
    tenant: str
    doc_id: str
    up_to_version: int | None
    dead_letters: bool = True


def marker_value(up_to_version: int | None, dead_letters: bool = True) -> bytes:
    return json.dumps({ERASE_FIELD: {"version": up_to_version, "dead_letters": dead_letters}}).encode()


def parse_marker(key: str, value: bytes) -> EraseMarker | None:
    """The erase marker a documents record is, or None (an event, a tombstone, anything else)."""
    if not value or ERASE_FIELD.encode() not in value[:64]:
        return None
    try:
        body = json.loads(value)[ERASE_FIELD]
    except (ValueError, KeyError, TypeError):
        return None
    tenant, sep, doc_id = key.partition("/")
    if not sep or not isinstance(body, dict):
        return None
    version = body.get("version")
    return EraseMarker(
        tenant, doc_id, int(version) if isinstance(version, int) else None, bool(body.get("dead_letters", True))
    )


class RollSchedule:
    """Partitions that received a tombstone and need a later record so their segment rolls."""

    def __init__(self, segment_ms: int) -> None:
        self.segment_s = segment_ms / 1000
        self._due: dict[tuple[str, int], float] = {}

    def tombstoned(self, topic: str, partition: int, now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        self._due.setdefault((topic, partition), at + self.segment_s + 0.5)

    def due(self, now: float | None = None) -> list[tuple[str, int]]:
        """Partitions whose roll marker is due now; each is forgotten once returned."""
        at = time.monotonic() if now is None else now
        ready = [tp for tp, when in self._due.items() if when <= at]
        for tp in ready:
            del self._due[tp]
        return sorted(ready)

    def __len__(self) -> int:
        return len(self._due)
