"""The embedded profile's worker: drains the SQLite log through the same sink as Faust.

Revocations first, and the backlog still moves. With no ACL change or deletion waiting, the worker
applies document upserts in large batches, and such a batch gives way as soon as a revocation or
deletion arrives: while it is embedding (IndexSink.embed_upserts' `interrupt`) nothing of it is
applied yet and it is simply retried later (the embedding cache keeps what was computed); while it
is being applied, the records applied so far are flushed and committed and the rest is retried.
A batch is embedded a slice ahead of its apply (`_apply_documents`): a helper thread embeds the next
EMBED_AHEAD_DOCS documents while this one writes the slice before them into the stores.

While revocations keep arriving, the worker goes in rounds (`_interleave`): each round applies
every ACL change and deletion waiting, then a small slice of documents embedded during the previous
round, and makes both durable with one flush and one commit; then it embeds the next slice, as many
documents as EMBED_CALL_BUDGET_S allows (at least one). A revocation therefore waits for one
slice's embedding and one round, never for the backlog, and the backlog drains between
revocations instead of waiting for a pause in them (before, every batch gave way and a steady
stream of revocations starved it: 0 documents in a 13 s events phase, bench/propagation.py).

Batches are the unit of durability: every record of a batch is applied (visible to queries at
once), then every store is flushed once, then the batch's offsets are committed together with a
journal of what each record did. Nothing is acknowledged before it is durable, and a batch costs
one flush per store instead of one per write. A crash anywhere before the commit re-delivers the
whole batch, which the sink's versioned, idempotent writes absorb.

With a tracker (streams.tracking), each ACL change and deletion is denied for queries as soon as it
is polled (the owner also runs a deny watcher that does it while a batch embeds), and once its
batch is durable it is confirmed (deny entry cleared, propagation recorded) and the content of
deleted or superseded documents is erased from the log; erasures are then purged at once (`on_erase`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass

from indexer.apply_rules import ApplyResult, Outcome
from indexer.ports import Vectors
from indexer.sink import EMBED_CALL_BUDGET_S, IndexSink, Preempted
from schemas.events import Event
from schemas.retry import Backoff, retry
from streams.dispatch import InvalidEvent, Stats, apply_record, try_decode
from streams.ports import (
    EVENT_TOPICS,
    TOPIC_ACL,
    TOPIC_DELETIONS,
    TOPIC_DLQ,
    TOPIC_DOCUMENTS,
    AppliedEntry,
    EventLog,
    Record,
    dead_letter_value,
)
from streams.tracking import Tracker, confirm_durable, erase_durable

log = logging.getLogger(__name__)

REVOCATION_TOPICS = (TOPIC_ACL, TOPIC_DELETIONS)

GROUP = "ragsync-indexer"

SLICE_DOCS = 32
"""Documents polled for a slice at most; how many of them it holds depends on time (`_embed_slice`)."""

EMBED_AHEAD_DOCS = 32
"""Documents of an upsert batch embedded together while the slice before them is applied (`_apply_documents`)."""
"""Documents polled for a slice at most; how many of them it holds depends on time (`_embed_slice`)."""


@dataclass
class Slice:
    """Documents polled and embedded during one round, applied in the next (see `_interleave`)."""

    pairs: list[tuple[Record, Event | InvalidEvent]]
    vectors: dict[str, Vectors]


class EmbeddedWorker:
    def __init__(
        self,
        events: EventLog,
        sink: IndexSink,
        *,
        group: str = GROUP,
        batch_size: int = 32,
        documents_batch_size: int = 256,
        revocation_bound_s: float = 30.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        tracker: Tracker | None = None,
        on_erase: Callable[[list[Event]], None] | None = None,
    ) -> None:
        self.tracker = tracker
        self.on_erase = on_erase
        self.events = events
        self.sink = sink
        self.group = group
        self.batch_size = batch_size
        self.documents_batch_size = documents_batch_size
        self.revocation_bound_s = revocation_bound_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.stats = Stats()
        self.batches = 0
        self.preemptions = 0
        self.interleaved = 0
        """Document upserts applied in rounds with revocations (`_interleave`)."""
        self._journal = events.journal
        self._log_transaction: Callable[[], AbstractContextManager[None]] = events.one_transaction
        """Groups a round's writes in one transaction where the log can (EventLog.one_transaction)."""

    def backlog(self) -> dict[str, int]:
        return {topic: self.events.lag(topic, self.group) for topic in EVENT_TOPICS}

    def close(self) -> None:
        """Once it has stopped applying: the sink's threads end (IndexSink.close). The log and the
        stores stay open: they belong to whoever opened them."""
        self.sink.close()

    def pending(self) -> int:
        return sum(self.backlog().values())

    def revocations_pending(self) -> bool:
        return self.events.lag(TOPIC_ACL, self.group) + self.events.lag(TOPIC_DELETIONS, self.group) > 0

    def step(self, progress: Callable[[int], None] | None = None) -> int:
        """One round in priority order: revocations and deletions first, then documents.

        With an ACL change or deletion waiting, rounds of revocations, each with a slice of documents,
        until none waits (`_interleave`); else one large batch of upserts, which gives way to a
        revocation that arrives meanwhile. Returns how many records were applied; a batch that gave
        way counts as work left (the next step applies the revocation, then the documents).
        """
        if self.revocations_pending():
            return self._interleave(progress)
        preempted = self.preemptions
        moved = self._drain_topic(TOPIC_DOCUMENTS, 1, progress)
        return moved if self.preemptions == preempted else max(moved, 1)

    def drain(
        self, progress: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None
    ) -> Stats:
        """Apply everything in the log (or until `should_stop`, checked between batches)."""
        while should_stop is None or not should_stop():
            if self.step(progress) == 0:
                break
        return self.stats

    def _drain_topic(self, topic: str, max_batches: int | None, progress: Callable[[int], None] | None) -> int:
        done = 0
        batches = 0
        size = self.documents_batch_size if topic == TOPIC_DOCUMENTS else self.batch_size
        while max_batches is None or batches < max_batches:
            records = self.events.poll(topic, self.group, size)
            if not records:
                break
            batches += 1
            applied = self._apply_batch(topic, records)
            if applied is None:  # gave way to a revocation; nothing was applied
                break
            done += applied
            if progress:
                progress(applied)
        return done

    def _interleave(self, progress: Callable[[int], None] | None) -> int:
        """Rounds while revocations keep arriving: every ACL change and deletion waiting (ACL changes
        first), then the slice of documents embedded during the previous round, made durable together:
        one flush and one commit per round for all three topics. A flush costs the same whatever it
        holds (qdrant-edge: 0.1-0.4 s on a busy disk, holding the GIL), so sharing it costs the
        revocations only the slice's apply (its vectors are ready). Then the next slice is embedded
        (about EMBED_CALL_BUDGET_S): a revocation published meanwhile waits for that, not for the
        backlog. The rounds end once a poll finds no revocation; the slice in hand goes with it."""
        moved = 0
        ready: Slice | None = None
        try:
            while True:
                polled = [self.events.poll(topic, self.group, self.batch_size) for topic in REVOCATION_TOPICS]
                revocations = [(record, try_decode(record)) for records in polled for record in records]
                if not revocations and ready is None:
                    return moved
                if self.tracker is not None:
                    for record, event in revocations:
                        self.tracker.consumed(record, event)  # effective from here on, before any store write
                pairs = revocations + (ready.pairs if ready is not None else [])
                topics = REVOCATION_TOPICS + ((TOPIC_DOCUMENTS,) if ready is not None else ())
                count = self._apply_and_commit(topics, pairs, ready.vectors if ready is not None else {})
                if ready is not None:
                    self.interleaved += len(ready.pairs)
                ready = None
                moved += count
                if progress:
                    progress(count)
                if not revocations:
                    return moved
                ready = self._embed_slice()
        finally:
            if ready is not None:  # polled, never committed: the next poll starts from the committed offset
                self.events.rewind(TOPIC_DOCUMENTS, self.group)

    def _embed_slice(self) -> Slice | None:
        """Poll up to SLICE_DOCS documents and embed them one by one, in log order, until
        EMBED_CALL_BUDGET_S is spent: the slice is the prefix embedded (at least one document), the
        rest is polled again after the next commit. Sized by time spent, not by a pace learnt
        earlier: a slice sized from one whose texts the embedding cache held (those of a batch
        that gave way) was 32 fresh documents, one model call of 4.9 s on the loaded machine."""
        records = self.events.poll(TOPIC_DOCUMENTS, self.group, SLICE_DOCS)
        if not records:
            return None
        began = time.monotonic()
        pairs: list[tuple[Record, Event | InvalidEvent]] = []
        vectors: dict[str, Vectors] = {}
        for record in records:
            if pairs and time.monotonic() - began >= EMBED_CALL_BUDGET_S:
                break
            event = try_decode(record)
            vectors.update(self._embed_batch([event]))
            pairs.append((record, event))
        if len(pairs) < len(records):
            # Back to the committed offset: the next commit acknowledges this prefix and the next
            # poll starts after it.
            self.events.rewind(TOPIC_DOCUMENTS, self.group)
        return Slice(pairs, vectors)

    def _apply_batch(self, topic: str, records: list[Record]) -> int | None:
        decoded = [try_decode(record) for record in records]
        if topic == TOPIC_DOCUMENTS:
            return self._apply_documents(list(zip(records, decoded, strict=True)))
        if self.tracker is not None:
            for record, event in zip(records, decoded, strict=True):
                self.tracker.consumed(record, event)  # effective from here on, before any store write
        return self._apply_and_commit((topic,), list(zip(records, decoded, strict=True)), {})

    def _apply_documents(self, pairs: list[tuple[Record, Event | InvalidEvent]]) -> int | None:
        """A batch of upserts, embedded a slice ahead of its apply; None if it gave way before any was applied.

        Slices of EMBED_AHEAD_DOCS documents: while this thread applies slice k (chunks to passages,
        FTS5, qdrant-edge, doc states: Python holding the GIL for most of it), a helper thread chunks
        and embeds slice k+1, so the model's runs (which release the GIL) go on during the apply instead
        of waiting for it. Records are applied in log order, one slice after the other, and the whole
        batch is still flushed once and committed once (`_commit`): nothing is acknowledged before it
        is durable. A revocation that arrives stops both: the embedding between two calls (Preempted)
        and the apply before the next record; what was applied is committed, the rest polled again.
        """
        slices = [pairs[i : i + EMBED_AHEAD_DOCS] for i in range(0, len(pairs), EMBED_AHEAD_DOCS)]
        stop = threading.Event()

        def interrupt() -> bool:
            return stop.is_set() or self.revocations_pending()

        def embed(part: list[tuple[Record, Event | InvalidEvent]], resume: bool) -> dict[str, Vectors]:
            return self._embed_batch([event for _, event in part], interrupt=interrupt, resume=resume)

        done: list[Record] = []
        entries: list[AppliedEntry] = []
        applied: list[tuple[Record, Event | InvalidEvent, ApplyResult | None]] = []
        vectors: dict[str, Vectors] = {}
        ahead = ThreadPoolExecutor(1, thread_name_prefix="ragsync-embed-ahead")
        try:
            pending: Future[dict[str, Vectors]] | None = ahead.submit(embed, slices[0], False)
            for i, part in enumerate(slices):
                assert pending is not None
                try:
                    vectors.update(pending.result())
                except Preempted:
                    self.preemptions += 1
                    break
                pending = ahead.submit(embed, slices[i + 1], True) if i + 1 < len(slices) else None
                if not self._apply_records(part, vectors, done, entries, applied, yield_to_revocations=True):
                    break
        finally:
            # A store error propagates once the prefix applied before it is acknowledged, as below.
            stop.set()  # a helper still embedding stops at its next call; the commit does not wait for it
            try:
                if done:
                    self._commit((TOPIC_DOCUMENTS,), done, entries, applied)
                else:  # gave way before anything was applied: polled again from the committed offset
                    self.events.rewind(TOPIC_DOCUMENTS, self.group)
            finally:
                ahead.shutdown(wait=True)
        return len(done) if done else None

    def _apply_records(
        self,
        pairs: list[tuple[Record, Event | InvalidEvent]],
        vectors: dict[str, Vectors],
        done: list[Record],
        entries: list[AppliedEntry],
        applied: list[tuple[Record, Event | InvalidEvent, ApplyResult | None]],
        *,
        yield_to_revocations: bool,
    ) -> bool:
        """Apply records in order into done/entries/applied, dead-lettering the ones that cannot be; a
        store error propagates. With `yield_to_revocations`, False as soon as a revocation waits (looked
        at before every record); True when every record was applied."""
        for record, event in pairs:
            if yield_to_revocations and self.revocations_pending():
                self.preemptions += 1
                return False
            reason, result = self._apply_with_retries(record, event, vectors)
            if reason is not None:
                self.events.publish_raw(TOPIC_DLQ, record.key, dead_letter_value(record, reason))
            entries.append(_entry(record, event, result))
            done.append(record)
            applied.append((record, event, result))
        return True

    def _apply_and_commit(
        self,
        topics: tuple[str, ...],
        pairs: list[tuple[Record, Event | InvalidEvent]],
        vectors: dict[str, Vectors],
    ) -> int:
        """Apply records in order, dead-letter the ones that cannot be, then make them durable and
        commit them in one go; how many were applied. On a store error, what was applied before the
        failing record (per topic, a prefix of what was polled) is acknowledged, and the error raised."""
        done: list[Record] = []
        entries: list[AppliedEntry] = []
        applied: list[tuple[Record, Event | InvalidEvent, ApplyResult | None]] = []
        try:
            self._apply_records(pairs, vectors, done, entries, applied, yield_to_revocations=False)
        finally:
            self._commit(topics, done, entries, applied)
        return len(done)

    def _apply_with_retries(
        self, record: Record, event: Event | InvalidEvent, vectors: dict[str, Vectors]
    ) -> tuple[str | None, ApplyResult | None]:
        return retry(
            lambda: apply_record(self.sink, record, self.stats, self.revocation_bound_s, vectors, event),
            Backoff(self.backoff_s),
            attempts=self.max_retries,
            on_retry=lambda attempt, _, __: log.exception(
                "store write failed on %s@%d, retry %d", record.topic, record.offset, attempt
            ),
        )

    def _commit(
        self,
        topics: Sequence[str],
        records: Sequence[Record],
        entries: Sequence[AppliedEntry],
        applied: Sequence[tuple[Record, Event | InvalidEvent, ApplyResult | None]] = (),
    ) -> None:
        """Flush every store, then acknowledge: the order that makes "committed" mean "durable".

        Between the two, the batch's revocations and deletions are confirmed and deleted content is
        erased from the log (idempotent: a crash before the commit redoes both with the batch).
        """
        erasures: list[Event] = []
        try:
            if records:
                self.sink.flush()
                confirm_durable(self.tracker, applied)
                with self._log_transaction():  # the erasures and the offsets: one commit of the log
                    erasures = erase_durable(self.events, applied)
                    if self._journal is not None:
                        self._journal.commit_applied(self.group, records, entries)
                    else:
                        self.events.commit(self.group, list(records))
                self.batches += 1
        finally:
            # Whatever was not committed is polled again from the committed offset.
            for topic in topics:
                self.events.rewind(topic, self.group)
        if erasures and self.on_erase is not None:
            self.on_erase(erasures)

    def _embed_batch(
        self,
        decoded: list[Event | InvalidEvent],
        *,
        interrupt: Callable[[], bool] | None = None,
        resume: bool = False,
    ) -> dict[str, Vectors]:
        """One embedding pass for these upserts; on a model failure each event embeds its own."""
        try:
            return self.sink.embed_upserts([e for e in decoded if isinstance(e, Event)], interrupt, resume=resume)
        except Preempted:
            raise
        except Exception:
            log.exception("batch embedding failed; embedding event by event")
            return {}


def _entry(record: Record, event: Event | InvalidEvent, result: ApplyResult | None) -> AppliedEntry:
    if result is None or isinstance(event, InvalidEvent):
        return AppliedEntry(record.topic, record.offset, None, "dead_letter")
    return AppliedEntry(
        record.topic,
        record.offset,
        event.event_id,
        "stale" if result.outcome is Outcome.STALE else "applied",
        result.passages_written,
        result.passages_embedded,
        result.lag_s,
    )
