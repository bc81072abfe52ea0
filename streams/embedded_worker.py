"""The embedded profile's worker: drains the SQLite log through the same sink as Faust.

Revocations first: before every batch of document upserts it drains the ACL and deletion
topics, so a revocation waits for at most one upsert batch, never for the backlog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from indexer.ports import Vectors
from indexer.sink import IndexSink
from schemas.events import Event
from streams.dispatch import InvalidEvent, Stats, handle, try_decode
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DLQ, TOPIC_DOCUMENTS, EventLog, dead_letter_value

log = logging.getLogger(__name__)

GROUP = "ragsync-indexer"


class EmbeddedWorker:
    def __init__(
        self,
        events: EventLog,
        sink: IndexSink,
        *,
        group: str = GROUP,
        batch_size: int = 32,
        revocation_bound_s: float = 30.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
    ) -> None:
        self.events = events
        self.sink = sink
        self.group = group
        self.batch_size = batch_size
        self.revocation_bound_s = revocation_bound_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.stats = Stats()

    def pending(self) -> int:
        return sum(self.events.lag(t, self.group) for t in (TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS))

    def _drain_topic(self, topic: str, max_batches: int | None, progress: Callable[[int], None] | None) -> int:
        done = 0
        batches = 0
        while max_batches is None or batches < max_batches:
            records = self.events.poll(topic, self.group, self.batch_size)
            if not records:
                break
            batches += 1
            decoded = [try_decode(record) for record in records]
            vectors = self._embed_batch(decoded) if topic == TOPIC_DOCUMENTS else {}
            for record, event in zip(records, decoded, strict=True):
                attempt = 0
                while True:
                    try:
                        reason = handle(self.sink, record, self.stats, self.revocation_bound_s, vectors, event)
                        break
                    except Exception:
                        attempt += 1
                        if attempt > self.max_retries:
                            # Leave the offset uncommitted: the next run starts again here.
                            self.events.rewind(topic, self.group)
                            raise
                        log.exception("store write failed on %s@%d, retry %d", topic, record.offset, attempt)
                        time.sleep(self.backoff_s * 2 ** (attempt - 1))
                if reason is not None:
                    self.events.publish_raw(TOPIC_DLQ, record.key, dead_letter_value(record, reason))
                # Commit record by record: nothing is acknowledged before it is durably applied.
                self.events.commit(self.group, [record])
                done += 1
                if progress:
                    progress(1)
        return done

    def _embed_batch(self, decoded: list[Event | InvalidEvent]) -> dict[str, Vectors]:
        """One embedding call for the batch's upserts; on any failure each event embeds its own."""
        try:
            return self.sink.embed_upserts([e for e in decoded if isinstance(e, Event)])
        except Exception:
            log.exception("batch embedding failed; embedding event by event")
            return {}

    def drain(self, progress: Callable[[int], None] | None = None) -> Stats:
        while True:
            moved = self._drain_topic(TOPIC_ACL, None, progress)
            moved += self._drain_topic(TOPIC_DELETIONS, None, progress)
            moved += self._drain_topic(TOPIC_DOCUMENTS, 1, progress)
            if moved == 0:
                return self.stats
