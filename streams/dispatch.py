"""Record -> validated event -> sink, shared by the embedded worker and the Faust agents.

A record that fails validation, or whose content cannot be chunked within bounds (indexer.chunker
Unchunkable), is dead-lettered with the reason and committed, so one bad event never blocks its
topic; a store error is *not* caught here: the caller retries and the
offset stays uncommitted until the write is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from indexer.apply_rules import ApplyResult, Outcome
from indexer.chunker import Unchunkable
from indexer.ports import Vectors
from indexer.sink import IndexSink
from schemas.errors import InvalidEvent as InvalidEvent  # re-export (schemas.errors)
from schemas.events import Event, EventKind
from streams.erasure import parse_marker
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS, Record

log = logging.getLogger(__name__)

_KIND_BY_TOPIC = {
    TOPIC_DOCUMENTS: EventKind.UPSERT,
    TOPIC_ACL: EventKind.ACL,
    TOPIC_DELETIONS: EventKind.DELETE,
}


def try_decode(record: Record) -> Event | InvalidEvent:
    try:
        return decode(record)
    except InvalidEvent as exc:
        return exc


def decode(record: Record) -> Event:
    try:
        event = Event.model_validate_json(record.value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise InvalidEvent(f"invalid event: {problems}"[:2000]) from exc
    expected = _KIND_BY_TOPIC.get(record.topic.rsplit(".", 1)[-1])
    if expected is not None and event.kind != expected:
        raise InvalidEvent(f"{event.kind.value} event on the {record.topic} topic")
    if record.key and record.key != event.key:
        raise InvalidEvent(f"record key {record.key!r} does not match event key {event.key!r}")
    return event


@dataclass
class Stats:
    applied: int = 0
    stale: int = 0
    dead_lettered: int = 0
    passages_written: int = 0
    passages_embedded: int = 0
    max_revocation_lag_s: float = 0.0
    by_topic: dict[str, int] = field(default_factory=dict)

    def add(self, topic: str, result: ApplyResult) -> None:
        self.by_topic[topic] = self.by_topic.get(topic, 0) + 1
        if result.outcome is Outcome.STALE:
            self.stale += 1
            return
        self.applied += 1
        self.passages_written += result.passages_written
        self.passages_embedded += result.passages_embedded
        if result.event.kind in (EventKind.ACL, EventKind.DELETE):
            self.max_revocation_lag_s = max(self.max_revocation_lag_s, result.lag_s)


def handle(
    sink: IndexSink,
    record: Record,
    stats: Stats,
    revocation_bound_s: float,
    vectors: Mapping[str, Vectors] | None = None,
    decoded: Event | InvalidEvent | None = None,
) -> str | None:
    """Apply one record; return a dead-letter reason instead of raising for invalid input.

    `vectors` may hold embeddings computed for a whole batch (IndexSink.embed_upserts), and
    `decoded` the record's `try_decode` result when the caller already validated the batch.
    """
    return apply_record(sink, record, stats, revocation_bound_s, vectors, decoded)[0]


def is_tombstone(record: Record) -> bool:
    """Not an event: a record whose value is gone (a Kafka tombstone or roll marker, a log record
    erased after its document was deleted) or an erase marker (streams.erasure). Nothing to apply
    and nothing to dead-letter; the worker that owns the log acts on erase markers itself."""
    return not record.value or (record.topic == TOPIC_DOCUMENTS and parse_marker(record.key, record.value) is not None)


def apply_record(
    sink: IndexSink,
    record: Record,
    stats: Stats,
    revocation_bound_s: float,
    vectors: Mapping[str, Vectors] | None = None,
    decoded: Event | InvalidEvent | None = None,
    served: Callable[[Event], None] | None = None,
) -> tuple[str | None, ApplyResult | None]:
    """`handle`, also returning the sink's result (None for a dead letter or a tombstone); `served`
    as IndexSink.apply takes it."""
    if is_tombstone(record):
        return None, None
    event = try_decode(record) if decoded is None else decoded
    if isinstance(event, InvalidEvent):
        stats.dead_lettered += 1
        log.warning("dead-lettering %s@%d: %s", record.topic, record.offset, event)
        return str(event), None
    try:
        result = sink.apply(event, (vectors or {}).get(event.event_id), served)
    except Unchunkable as exc:  # the document's content, not a store: retrying cannot help
        stats.dead_lettered += 1
        log.warning("dead-lettering %s@%d: cannot chunk %s: %s", record.topic, record.offset, event.doc_id, exc)
        return f"cannot chunk {event.doc_id}: {exc}", None
    stats.add(record.topic, result)
    if event.kind in (EventKind.ACL, EventKind.DELETE) and result.lag_s > revocation_bound_s:
        log.warning(
            "%s of %s/%s applied %.1fs after it occurred (bound %.1fs)",
            event.kind.value,
            event.tenant,
            event.doc_id,
            result.lag_s,
            revocation_bound_s,
        )
    return None, result
