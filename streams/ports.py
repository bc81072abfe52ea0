"""The event-log port: publish, consume by topic with a consumer group, commit after apply.

Delivery is at-least-once: a record is handed out again until its offset is committed, and
committing happens only after every store confirmed the write. Correctness under redelivery
comes from the indexer's idempotent, versioned writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from indexer.ports import PurgeDetails, Removal
from schemas.events import Event, EventKind

TOPIC_DOCUMENTS = "documents"
TOPIC_ACL = "acl"
TOPIC_DELETIONS = "deletions"
TOPIC_DLQ = "dlq"
EVENT_TOPICS = (TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS)
"""Priority order: revocations and deletions are drained before document upserts."""

_TOPIC_BY_KIND = {
    EventKind.UPSERT: TOPIC_DOCUMENTS,
    EventKind.ACL: TOPIC_ACL,
    EventKind.DELETE: TOPIC_DELETIONS,
}


def topic_for(event: Event) -> str:
    return _TOPIC_BY_KIND[event.kind]


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: str
    value: bytes
    timestamp_ms: int | None = None
    """When the record was appended to the log (its `published_at`), when the log knows."""


class EventLog(Protocol):
    removal: Removal
    """How erased records leave the log's files: "purge" (SQLite: `purge` checkpoints them out of the
    WAL) or "compaction" (Kafka: the broker's cleaner drops them; `remnants` reads the broker now)."""

    def publish(self, event: Event) -> None:
        """Durably append the event to its kind's topic, keyed by tenant/doc_id."""

    def publish_raw(self, topic: str, key: str, value: bytes) -> None:
        """Append bytes as they are (dead letters, and tests of malformed input)."""

    def publish_many(self, events: Sequence[Event]) -> None:
        """Append every event in order; all are durable when it returns (one sync for the batch)."""

    def flush(self) -> None:
        """Block until every published record is durable."""

    def poll(self, topic: str, group: str, max_records: int = 100, timeout_s: float = 0.0) -> list[Record]:
        """Records after the group's position; repeated calls advance an uncommitted position."""

    def commit(self, group: str, records: list[Record]) -> None:
        """Mark records (and every earlier one in their partitions) as applied for the group."""

    def rewind(self, topic: str, group: str) -> None:
        """Forget the uncommitted position, so the next poll starts at the committed offset."""

    def lag(self, topic: str, group: str) -> int:
        """Records not yet committed by the group."""

    def erase_document(
        self,
        tenant: str,
        doc_id: str,
        up_to_version: int | None,
        *,
        dead_letters: bool = True,
        published_by_ms: int | None = None,
    ) -> int:
        """After a deletion was applied, take the document's content out of the log, so no copy outlives it:
        its upserts with version <= `up_to_version` (all when None), with `dead_letters` its dead letters,
        and with `published_by_ms` (an erasure) every record of it published by then, whatever its version.
        Returns how many records are erased by the time it returns (an adapter that erases later, as Kafka's
        compaction does, returns 0; each adapter's docstring says how it erases)."""

    def compact_document(self, tenant: str, doc_id: str, below_version: int) -> int:
        """After an upsert was applied: remove the content of the document's older upserts."""

    def tombstone(self, key: str, *, dead_letters: bool = True) -> None:
        """An erase marker read from the documents topic was applied: append the key's tombstones (null
        values on the compacted topics, with `dead_letters` the dlq's too), durable when it returns. Only
        a log erased by "compaction" writes markers; one that erases in place has none to follow up."""

    def remnants(self, tenant: str, doc_id: str, up_to_version: int | None = None) -> dict[str, Any]:
        """Records of the document (versions up to the given one; None: every version) still carrying a
        value, per topic (`documents`, `dlq`), read now: what a deletion certificate reports. A log
        removed by "compaction" adds `compaction_bound_s`, how long its cleaner may take."""

    def purge(self) -> PurgeDetails:
        """When `removal` is "purge": make erased values leave the log's files; otherwise nothing to do ({})."""

    def dead_letters(self) -> int:
        """Dead letters ever written (the dlq topic's end offsets), for status."""

    def one_transaction(self) -> AbstractContextManager[None]:
        """A block whose erasures, compactions and journalled commits the log makes durable together (the
        SQLite log: one transaction, one fsync for a worker's round); a log that cannot group them
        (Kafka: each write is the broker's) returns a block that groups nothing."""

    @property
    def journal(self) -> AppliedJournal | None:
        """The journal this log keeps with each offset commit, or None: the embedded log keeps one (a
        publisher in another process waits on it); Kafka's consumer groups keep none."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AppliedEntry:
    """What applying one record did: a worker journals it with the offset commit that acknowledges it."""

    topic: str
    offset: int
    event_id: str | None  # None for a record that was not a valid event (dead-lettered)
    outcome: str  # "applied" | "stale" | "dead_letter"
    passages_written: int = 0
    passages_embedded: int = 0
    lag_s: float = 0.0


class AppliedJournal(Protocol):
    """A log that can keep, atomically with a group's offset commit, what applying each record did.

    This is what lets a publisher in another process wait for its own events and report what
    became of them (`ragsync sync` while `ragsync serve` applies): the embedded log has it.
    """

    def commit_applied(self, group: str, records: Sequence[Record], entries: Sequence[AppliedEntry]) -> None: ...

    def applied(self, group: str, topic: str, start: int, end: int) -> list[AppliedEntry]:
        """Journal entries of the topic's offsets in [start, end)."""

    def end_offsets(self, topics: Sequence[str]) -> dict[str, int]:
        """Next offset of each topic (what a publisher waits for)."""

    def committed_offsets(self, group: str) -> dict[str, int]:
        """Next offset the group will apply, per topic."""


def publish_durably(events: EventLog) -> Callable[[Event], None]:
    """A publish that returns only once the event is durable (Kafka's publish alone only enqueues).

    Connectors record an event as emitted right after publish returns, so that must mean durable.
    """

    def publish(event: Event) -> None:
        events.publish(event)
        events.flush()

    return publish


def dead_letter_value(record: Record, reason: str) -> bytes:
    """A dead letter keeps the original bytes verbatim (as latin-1 text) beside the reason."""
    import json

    return json.dumps(
        {
            "reason": reason,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key,
            "value": record.value.decode("latin-1"),
        }
    ).encode()
