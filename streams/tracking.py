"""What a worker does around a revocation or deletion: deny it first, apply it, then confirm it.

1. `consumed` (the moment a worker reads the event, before anything slow): the deny-set entry is
   written, so the change is effective for every query from then on (indexer.deny), and the
   instant is kept as the event's `consumed_at`. Workers call it from a path of its own that no
   document backlog can hold up: a Kafka reader of its own (streams.deny_reader) and a Faust agent
   of its own on the ACL and deletion topics, the embedded owner's deny-watcher thread.
2. The worker applies the event through the sink as always (`ApplyResult` carries each store's time).
3. `confirmed` (once the stores hold it durably, i.e. after the flush and before or with the offset
   commit): the deny entry is cleared (what is older than the event, and its own entry: a newer
   one, or another event's at the same version, stays), and a propagation record with every
   instant is written and handed to the metrics.

A deny-set outage never stops a worker: the entry is skipped with a warning (the stores, which do
not depend on it, still converge) and the event is tracked all the same. A clear that fails is kept
and retried (streams.deny_clears: after each confirmation and from the worker's periodic path), and
so is one that must wait for an older event of its document this worker has consumed and not yet
applied. Upserts are confirmed too, in batches: an upsert supersedes older entries of its document.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from indexer.apply_rules import ApplyResult, Outcome
from indexer.deny import DenyEntry, DenyKind, DenySet, DenyUnavailable
from indexer.ports import DocStateStore
from indexer.propagation import PropagationLog, PropagationRecord
from schemas._time import from_epoch_ms, utcnow
from schemas.events import AclPayload, DeletePayload, Event, EventKind
from streams.deny_clears import CAP, Clear, ClearRetries, held
from streams.dispatch import InvalidEvent, try_decode
from streams.erasure import parse_marker
from streams.ports import TOPIC_DOCUMENTS, EventLog, Record

log = logging.getLogger(__name__)

TRACKED = (EventKind.ACL, EventKind.DELETE)
DONE_MEMORY = 100_000
OLDER_WAIT_S = 120.0
"""How long a clear waits for an older event of its document, consumed here and not yet applied, at
most: one pending longer has presumably moved to another worker with its partition (this tracker
never hears of it again) or waits on a store outage; its entry then goes with the clear."""


def deny_entry(event: Event, at: datetime) -> DenyEntry | None:
    """The deny-set entry an ACL or delete event calls for; None for an upsert. Pure."""
    if event.kind is EventKind.DELETE:
        return DenyEntry(event.tenant, event.doc_id, DenyKind.DELETED, event.version, at, (), event.event_id)
    if isinstance(event.payload, AclPayload):
        return DenyEntry(event.tenant, event.doc_id, DenyKind.ACL, event.version, at, event.payload.acl, event.event_id)
    return None


@dataclass
class Pending:
    """An ACL or delete event between consumption and confirmation."""

    event: Event
    consumed_at: datetime
    published_at: datetime | None
    applied_at: dict[str, datetime] = field(default_factory=dict)
    cache_invalidated_at: datetime | None = None
    outcome: str = "applied"
    served_at: datetime | None = None
    """When `served` cleared the deny entry (the stores held it): confirming it clears nothing more,
    and its propagation record says it converged then."""


class Tracker:
    """Shared by the deny path and the apply path of one worker process (thread-safe)."""

    def __init__(
        self,
        deny: DenySet | None,
        propagation: PropagationLog | None,
        *,
        clock: Callable[[], datetime] = utcnow,
        observe: Callable[[PropagationRecord], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        retry_cap: int = CAP,
    ) -> None:
        self.deny = deny
        self.propagation = propagation
        self.clock = clock
        self.observe = observe
        self.monotonic = monotonic
        self.retries = ClearRetries(retry_cap)
        """Clears that failed or wait for an older event of their document (`retry_clears`)."""
        self._pending: dict[str, Pending] = {}
        self._done: OrderedDict[str, None] = OrderedDict()
        """Recently confirmed event IDs: a deny path that reads an event after its confirmation adds nothing."""
        self._lock = threading.Lock()
        self._warned = 0.0
        self.deny_failures = 0

    # ---- 1. consumed -------------------------------------------------------------------------

    def consumed(self, record: Record, event: Event | InvalidEvent | None = None) -> Pending | None:
        """Deny the event's document at once (ACL and delete events); idempotent per event_id."""
        event = try_decode(record) if event is None else event
        if isinstance(event, InvalidEvent) or event.kind not in TRACKED:
            return None
        with self._lock:
            known = self._pending.get(event.event_id)
            done = event.event_id in self._done
        if known is not None:
            return known
        if done:
            return None
        at = self.clock()
        entry = deny_entry(event, at)
        if entry is not None and self.deny is not None:
            try:
                self.deny.add(entry)
            except (DenyUnavailable, OSError) as exc:
                what = f"{event.kind.value} of {event.tenant}/{event.doc_id}"
                self._warn(f"deny set unavailable, the {what} waits for the stores: {exc}")
        published = from_epoch_ms(record.timestamp_ms) if record.timestamp_ms is not None else None
        with self._lock:
            late = self._written_late(event)
            if not late:
                self._pending.setdefault(event.event_id, Pending(event, at, published))
            kept = self._pending.get(event.event_id)
        if late:
            self._clear(Clear(event.tenant, event.doc_id, event.version, frozenset({event.event_id})))
        return kept

    def _written_late(self, event: Event) -> bool:
        """Under the lock, after this path wrote the event's entry: whether the other deny path (the
        reader and the Faust agent both write entries) had meanwhile taken the event through served or
        confirmed, whose clear ran before this write. Then the entry just written must go again, or it
        would outlive its event (the document hidden until the next worker start)."""
        if event.event_id in self._done:
            return True
        pending = self._pending.get(event.event_id)
        return pending is not None and pending.served_at is not None

    def consumed_many(self, records: Sequence[Record]) -> None:
        """`consumed` for a batch of records: the deny entries in one write (DenySet.add_many), each
        event's `consumed_at` the instant before that write."""
        if self.deny is None:
            for record in records:
                self.consumed(record)
            return
        at = self.clock()
        fresh: list[tuple[Record, Event]] = []
        with self._lock:
            for record in records:
                event = try_decode(record)
                if isinstance(event, InvalidEvent) or event.kind not in TRACKED:
                    continue
                if event.event_id not in self._pending and event.event_id not in self._done:
                    fresh.append((record, event))
        entries = [e for _, event in fresh if (e := deny_entry(event, at)) is not None]
        try:
            self.deny.add_many(entries)
        except (DenyUnavailable, OSError) as exc:
            self._warn(f"deny set unavailable, {len(entries)} revocations and deletions wait for the stores: {exc}")
        overtaken: list[Event] = []
        with self._lock:
            for record, event in fresh:
                if self._written_late(event):
                    overtaken.append(event)  # served or confirmed while this batch was written: its entry goes
                    continue
                published = from_epoch_ms(record.timestamp_ms) if record.timestamp_ms is not None else None
                self._pending.setdefault(event.event_id, Pending(event, at, published))
        for event in overtaken:
            self._clear(Clear(event.tenant, event.doc_id, event.version, frozenset({event.event_id})))

    # ---- 2. applied --------------------------------------------------------------------------

    def applied(self, record: Record, event: Event | InvalidEvent, result: ApplyResult | None) -> None:
        """Note each store's time for a tracked event (consumed now, if the deny path has not seen it)."""
        if result is None or isinstance(event, InvalidEvent) or event.kind not in TRACKED:
            return
        pending = self.consumed(record, event)
        if pending is None:
            return
        pending.applied_at.update(result.applied_at)
        pending.cache_invalidated_at = result.cache_invalidated_at
        pending.outcome = "stale" if result.outcome is Outcome.STALE else "applied"

    def served(self, event: Event) -> None:
        """Every store answering queries holds the event durably and the cache is invalidated
        (IndexSink.apply `served`, stores durable on write): its deny entry goes now, before the
        bookkeeping writes (audit record, doc state) that `confirmed` follows. Only for an event the
        deny path has seen: otherwise `applied` may still add its entry, and `confirmed` clears it."""
        with self._lock:
            pending = self._pending.get(event.event_id)
            if pending is None or pending.served_at is not None:
                return
            pending.served_at = self.clock()
        self._clear(Clear(event.tenant, event.doc_id, event.version, frozenset({event.event_id})))

    # ---- 3. confirmed ------------------------------------------------------------------------

    def confirmed(self, events: Sequence[Event | InvalidEvent]) -> list[PropagationRecord]:
        """The events' writes are durable: clear their deny entries, write their propagation records,
        then retry the clears that wait (one of these events may be what they waited for)."""
        now = self.clock()
        records: list[PropagationRecord] = []
        upserts: dict[tuple[str, str], int] = {}
        for event in events:
            if isinstance(event, InvalidEvent):
                continue
            if event.kind not in TRACKED:
                key = (event.tenant, event.doc_id)
                upserts[key] = max(upserts.get(key, 0), event.version)
                continue
            with self._lock:
                pending = self._pending.pop(event.event_id, None)
                self._done[event.event_id] = None
                while len(self._done) > DONE_MEMORY:
                    self._done.popitem(last=False)
            if pending is None:
                continue
            if pending.served_at is None:
                self._clear(Clear(event.tenant, event.doc_id, event.version, frozenset({event.event_id})))
            records.append(
                PropagationRecord(
                    event_id=event.event_id,
                    kind=event.kind.value,
                    tenant=event.tenant,
                    doc_id=event.doc_id,
                    version=event.version,
                    occurred_at=event.occurred_at,
                    published_at=pending.published_at,
                    consumed_at=pending.consumed_at,
                    applied_at=dict(pending.applied_at),
                    cache_invalidated_at=pending.cache_invalidated_at,
                    converged_at=pending.served_at or now,
                    outcome=pending.outcome,
                )
            )
        self._clear_superseded(upserts)
        if records and self.propagation is not None:
            try:
                self.propagation.record(records)
            except Exception:  # evidence of timing must never block the write path
                log.exception("could not write %d propagation records", len(records))
        if self.observe is not None:
            for r in records:
                self.observe(r)
        self.retry_clears()
        return records

    def _clear(self, clear: Clear) -> None:
        """Clear now, or keep the clear for a retry: an older event of its document is consumed here
        and not yet applied (its entry must outlive this clear), or the deny set did not answer."""
        if self.deny is None:
            return
        if self._older_pending(clear):
            self.retries.keep(clear)
            return
        self._attempt(clear)

    def _attempt(self, clear: Clear) -> bool:
        """The deny-set calls of one clear; on a failure the clear is kept and the next retry waits."""
        assert self.deny is not None
        for event_id in clear.calls():
            try:
                self.deny.clear(clear.tenant, clear.doc_id, clear.version, event_id)
            except (DenyUnavailable, OSError) as exc:
                # A lingering entry only narrows what queries see; `retry_clears` clears it later.
                self.retries.keep(clear)
                wait = self.retries.failed(self.monotonic())
                what = f"entry of {clear.tenant}/{clear.doc_id}"
                self._warn(f"deny set unavailable, {what} kept for a retry in {wait:.1f}s: {exc}")
                return False
            self.retries.done(clear.tenant, clear.doc_id, clear.version, event_id)
        self.retries.succeeded()
        return True

    def _older_pending(self, clear: Clear) -> bool:
        """Whether an event of the clear's document older than it is consumed here, not yet served,
        and consumed less than OLDER_WAIT_S ago: its entry must outlive this clear."""
        oldest = self.clock().timestamp() - OLDER_WAIT_S
        with self._lock:
            return any(
                p.event.version < clear.version
                and p.event.doc_id == clear.doc_id
                and p.event.tenant == clear.tenant
                and p.served_at is None
                and p.consumed_at.timestamp() >= oldest
                for p in self._pending.values()
            )

    def retry_clears(self) -> int:
        """Retry the clears that failed or waited, once due (after a failure the next try waits
        longer: streams.deny_clears.RETRY). Every confirmation ends with this, and the worker's
        periodic path calls it. Stops at the first failure. Returns how many clears were done."""
        if self.deny is None:
            return 0
        taken = self.retries.take(self.monotonic())
        done = 0
        for i, clear in enumerate(taken):
            if self._older_pending(clear):
                self.retries.keep(clear)
            elif self._attempt(clear):
                done += 1
            else:
                for rest in taken[i + 1 :]:
                    self.retries.keep(rest)
                break
        if done:
            log.info("deny set: %d cleared on a retry, %d still waiting", done, len(self.retries))
        return done

    def clears_waiting(self) -> int:
        """Documents with a deny-set clear waiting for a retry (a gauge of the worker's metrics)."""
        return len(self.retries)

    def _clear_superseded(self, upserts: dict[tuple[str, str], int]) -> None:
        """Entries older than an applied upsert of their document (one lookup per tenant). Not the
        entries at the upsert's version: an ACL change at v is newer than the upsert of v (it was
        issued after it, or the sink holds the later one), and a deletion at v stops an upsert at v;
        those entries go with their own events' confirmations."""
        if self.deny is None or not upserts:
            return
        by_tenant: dict[str, dict[str, int]] = {}
        for (tenant, doc_id), version in upserts.items():
            by_tenant.setdefault(tenant, {})[doc_id] = version
        for tenant, docs in by_tenant.items():
            try:
                found = self.deny.lookup(tenant, docs)
            except (DenyUnavailable, OSError) as exc:
                self._warn(f"deny set unavailable while confirming upserts, their clears kept for a retry: {exc}")
                for doc_id, version in docs.items():
                    self.retries.keep(Clear(tenant, doc_id, version))
                continue
            for doc_id in sorted({e.doc_id for e in found if e.version < docs[e.doc_id]}):
                self._clear(Clear(tenant, doc_id, docs[doc_id]))

    def _warn(self, message: str) -> None:
        self.deny_failures += 1
        now = time.monotonic()
        if now - self._warned > 30.0:
            self._warned = now
            log.warning("%s", message)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def sweep(self, docs: DocStateStore) -> int:
        """Clear entries whose event every store already holds, or made stale (a worker died between
        applying and clearing; streams.deny_clears.held says which, from the doc state). Run at worker
        start. Each goes by its own event ID, so an entry of the same version the state does not hold
        stays; an entry whose clear would take an older entry that is not held with it stays too."""
        if self.deny is None:
            return 0
        try:
            entries = self.deny.entries()
        except (DenyUnavailable, OSError) as exc:
            self._warn(f"deny set unavailable, not swept: {exc}")
            return 0
        by_doc: dict[tuple[str, str], list[DenyEntry]] = {}
        for entry in entries:
            by_doc.setdefault((entry.tenant, entry.doc_id), []).append(entry)
        cleared = 0
        for (tenant, doc_id), found in by_doc.items():
            state = docs.get(tenant, doc_id)
            if state is None:
                continue
            kept = [e.version for e in found if not held(e, state)]
            for entry in sorted(found, key=lambda e: e.version):
                if held(entry, state) and not any(version < entry.version for version in kept):
                    self._clear(Clear(tenant, doc_id, entry.version, frozenset({entry.event_id} - {""})))
                    cleared += 1
        if cleared:
            log.info("deny set: %d entries of applied events cleared", cleared)
        return cleared


def after_durable(
    events: EventLog,
    tracker: Tracker | None,
    applied: Sequence[tuple[Record, Event | InvalidEvent, ApplyResult | None]],
) -> list[Event]:
    """What follows the durable apply of a batch of one topic (stores flushed; before or with the
    commit): confirm each event to the tracker, then take the content of deleted or superseded
    documents out of the log. Returns the erasures among the events (the caller purges at once).

    Erasing is idempotent and runs for stale deletions too: a redelivered deletion (the crash came
    after the apply, before the erase) still erases. An erase marker on the documents topic (a Kafka
    log read by this worker) becomes its tombstones here.
    """
    confirm_durable(tracker, applied)
    return erase_durable(events, applied)


def confirm_durable(
    tracker: Tracker | None, applied: Sequence[tuple[Record, Event | InvalidEvent, ApplyResult | None]]
) -> None:
    """The first half of `after_durable`: confirm each event to the tracker (deny entries cleared,
    propagation recorded). Apart so the embedded worker does it outside the log transaction that
    erases and acknowledges, which the deny watcher's polls wait for."""
    if tracker is not None:
        for record, event, result in applied:
            tracker.applied(record, event, result)
        tracker.confirmed([event for _, event, _ in applied])


def erase_durable(
    events: EventLog, applied: Sequence[tuple[Record, Event | InvalidEvent, ApplyResult | None]]
) -> list[Event]:
    """The second half of `after_durable`: the log erasures and compactions; the erasures returned."""
    erasures: list[Event] = []
    for record, event, result in applied:
        if isinstance(event, InvalidEvent):
            marker = parse_marker(record.key, record.value) if record.topic == TOPIC_DOCUMENTS else None
            if marker is not None:
                events.tombstone(record.key, dead_letters=marker.dead_letters)
            continue
        if isinstance(event.payload, DeletePayload):
            if event.payload.erase:
                # Every version: a dead-lettered upsert may claim a version above the erasure's, which
                # was chosen from what the indexer and the connector knew. Bounded by the erasure's
                # publish time, so a re-creation published after it keeps its content.
                published = record.timestamp_ms if record.timestamp_ms is not None else int(time.time() * 1000)
                events.erase_document(event.tenant, event.doc_id, event.version, published_by_ms=published)
                erasures.append(event)
            else:
                events.erase_document(event.tenant, event.doc_id, event.version)
        elif event.kind is EventKind.UPSERT and result is not None and result.outcome is Outcome.APPLIED:
            events.compact_document(event.tenant, event.doc_id, event.version)
    return erasures
