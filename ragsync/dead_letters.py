"""Dead letters: the events the indexer could not apply, read back and sent again (`ragsync dlq`).

Both event logs keep a `dlq` topic; each dead letter holds the original record's bytes verbatim
beside the reason (streams.ports.dead_letter_value). "Pending" means not yet replayed: replay
commits the dlq position of the `ragsync-dlq` group (DLQ_GROUP), so the next list
starts after it and the `ragsync_dead_letters` metric counts what is left.

Replaying is safe to repeat: the original bytes go back to their original topic, where the indexer
applies them with its usual version checks, so an event that is older than what the stores hold is
skipped as stale (a replay never resurrects a deleted document or restores a revoked ACL), and an
event that is still malformed is dead-lettered again with its reason. A dead letter whose value was
cut to fit the log (Kafka's message limit) is never replayed: its bytes are not the event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streams.ports import EVENT_TOPICS, TOPIC_DLQ, EventLog, Record

DLQ_GROUP = "ragsync-dlq"
"""Replay commits here: the dead letters after its position are the pending ones."""

_POLL_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of the dlq topic, decoded."""

    id: str  # "<partition>:<offset>" in the dlq topic
    record: Record
    reason: str
    topic: str | None  # where the original record was
    origin: str  # "<topic> <partition>:<offset>" of the original, for people
    key: str
    value: bytes | None  # the original bytes, None when the dead letter itself is unreadable
    truncated: bool

    @classmethod
    def decode(cls, record: Record) -> DeadLetter:
        ident = f"{record.partition}:{record.offset}"
        try:
            body = json.loads(record.value)
            reason = str(body["reason"])
            topic = str(body["topic"])
            value = str(body["value"]).encode("latin-1")
            origin = f"{topic} {body.get('partition', '?')}:{body.get('offset', '?')}"
            key = str(body.get("key", record.key))
        except (ValueError, KeyError, TypeError, UnicodeEncodeError):
            return cls(ident, record, "unreadable dead letter", None, "?", record.key, None, False)
        return cls(ident, record, reason, topic, origin, key, value, "(value truncated from" in reason)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reason": self.reason,
            "origin": self.origin,
            "key": self.key,
            "bytes": len(self.value) if self.value is not None else None,
            "replayable": self.replayable,
        }

    @property
    def replayable(self) -> bool:
        return self.value is not None and not self.truncated and self.topic in EVENT_TOPICS


def pending(events: EventLog, limit: int | None = None) -> list[DeadLetter]:
    """Dead letters after the replay group's position, oldest first, without moving it."""
    out: list[DeadLetter] = []
    events.rewind(TOPIC_DLQ, DLQ_GROUP)  # start at the committed position, wherever a reader left off
    try:
        while limit is None or len(out) < limit:
            batch = events.poll(TOPIC_DLQ, DLQ_GROUP, max_records=500, timeout_s=_POLL_TIMEOUT_S)
            if not batch:
                break
            out.extend(DeadLetter.decode(r) for r in batch if r.value)  # an empty one was erased with its document
    finally:
        events.rewind(TOPIC_DLQ, DLQ_GROUP)
    return out if limit is None else out[:limit]


@dataclass
class Replay:
    replayed: list[str]
    stuck: DeadLetter | None


def replay(events: EventLog, limit: int | None = None) -> Replay:
    """Publish pending dead letters back to their topics, oldest first, each durable before it is
    marked replayed; stops at the first that cannot be replayed, so none after it is marked."""
    done = Replay([], None)
    for letter in pending(events, limit):
        if not letter.replayable or letter.topic is None or letter.value is None:
            done.stuck = letter
            break
        events.publish_raw(letter.topic, letter.key, letter.value)
        events.flush()
        events.commit(DLQ_GROUP, [letter.record])
        done.replayed.append(letter.id)
    return done
