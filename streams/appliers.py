"""The appliers of the Faust worker (streams.faust_app): what its agents share to apply events.

Why apart: the app module wires Faust (topics, agents, timers); this one holds how an event is
applied once fetched, and which thread it runs on, so each reads whole. Threads by priority: ACL
changes and deletions have a pool of their own (ACCESS_THREADS, one thread per actor of both topics),
the documents agent a single thread whose OS priority is lowered (DOCUMENTS_NICE), the deny entries a
thread of their own, and purges the loop's default pool. On a busy machine the shared default pool
held revocations in its queue behind purges and the document being embedded, and the embedding took
the CPU the appliers' round trips needed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from indexer.apply_rules import ApplyResult
from indexer.sink import IndexSink
from schemas.events import Event
from schemas.retry import Backoff, retry_async
from streams.dispatch import InvalidEvent, Stats, apply_record, try_decode
from streams.erasure import RollSchedule
from streams.kafka_admin import COMPACTION_SEGMENT_MS
from streams.ports import EVENT_TOPICS, TOPIC_DOCUMENTS, Record
from streams.tracking import Tracker

log = logging.getLogger("streams.faust_app")  # the worker's logger, as before the split (log filters)

REVOCATION_CONCURRENCY = 24
"""Actors applying ACL changes and deletions at once (each in a thread of its own: store round trips).
A revocation costs about seven sequential round trips (state, both stores, cache, state, deny entry,
propagation record), a deletion about ten (its audit record among them). The appliers' throughput is
actors / time per event, and on a CPU-contended machine a round trip to Elasticsearch takes hundreds
of milliseconds: 8 actors applied 3 revocations and 1.4 deletions a second at a load average of 30,
against 10 a second published, and the queue was the delay (26 s and 69 s p50). The stores are
waiting on the CPU, not saturated, so more requests in flight turn that queue into parallel work.
Tried 64 (2026-12-02, bench/README.md): every one of the 48 access threads was busy at
--background-load 4, but with 64 per topic revocations and deletions converged later (the event loop,
the deny agent and Elasticsearch shared by more threads: effective p99 3.9 s against 1.5-1.9 s)."""

ACCESS_THREADS = 2 * REVOCATION_CONCURRENCY
"""One thread per actor of the ACL and deletion topics: an applier never waits for a free thread."""

DOCUMENTS_NICE = 10
"""How much the documents thread lowers its OS priority (Linux `nice` is per thread). Embedding and
chunking are the worker's CPU-bound work; at nice 10 they take the CPU the access appliers, the event
loop and the heartbeats leave, so a contended machine slows the backlog instead of the revocations.
Raising niceness needs no privilege; the backlog still drains at whatever CPU is left over."""


def lower_priority(increment: int = DOCUMENTS_NICE) -> None:
    """Lower the calling thread's OS scheduling priority by `increment` (best effort; Linux only:
    elsewhere `setpriority` on a thread ID would touch the whole process, so it is left alone)."""
    if not hasattr(os, "setpriority") or os.uname().sysname != "Linux":
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
    except OSError as exc:
        log.warning("could not lower the documents thread's priority: %s", exc)


class KeyedLocks:
    """One asyncio lock per key in use, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


@dataclass
class Indexer:
    """What the agents share: the sink, the retry policy, per-key locks, per-topic stats, and the
    tracker (deny set and propagation records) with the maintenance hook (physical purges)."""

    sink: IndexSink
    revocation_bound_s: float = 30.0
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    stats: dict[str, Stats] = field(default_factory=lambda: {t: Stats() for t in EVENT_TOPICS})
    tracker: Tracker | None = None
    maintain: Callable[[bool], None] | None = None
    """Purge what deletions left in the stores' files; True: an erasure asks for it now."""
    rolls: RollSchedule = field(default_factory=lambda: RollSchedule(COMPACTION_SEGMENT_MS))
    _maintaining: asyncio.Lock = field(default_factory=asyncio.Lock)
    _deny_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragsync-deny")
    )
    _access_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=ACCESS_THREADS, thread_name_prefix="ragsync-access")
    )
    _documents_pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ragsync-documents", initializer=lower_priority
        )
    )

    async def deny(self, record: Record) -> None:
        """Write the deny entry of an ACL or delete record (the moment it is effective).

        On a thread of its own, never the event loop's default pool: the appliers (4 per topic),
        the documents agent and purges share that pool, and under load their queue held deny writes
        back by tens of seconds, behind the very backlog the deny set exists to overtake.
        """
        if self.tracker is not None:
            await asyncio.get_running_loop().run_in_executor(self._deny_pool, self.tracker.consumed, record)

    async def deny_many(self, records: list[Record]) -> None:
        """`deny` for the records fetched together: one thread hop and one deny-set write for all."""
        if self.tracker is not None and records:
            await asyncio.get_running_loop().run_in_executor(self._deny_pool, self.tracker.consumed_many, records)

    async def apply(self, record: Record) -> str | None:
        """Apply one record, retrying store errors until they succeed; a dead-letter reason otherwise None."""
        return (await self.apply_tracked(record))[0]

    async def apply_tracked(self, record: Record) -> tuple[str | None, ApplyResult | None, Event | InvalidEvent]:
        """Apply one record durably (retrying store errors until they succeed) and confirm it to the
        tracker: (dead-letter reason or None, the sink's result, the decoded event).

        The sink does blocking I/O, so it runs in a thread and the event loop keeps serving the
        other agents, heartbeats and commits meanwhile: ACL changes and deletions in the access
        pool, upserts (embedding) in the documents thread, so neither ever queues behind the other.
        """
        stats = self.stats[record.topic]
        pool = self._documents_pool if record.topic == TOPIC_DOCUMENTS else self._access_pool
        loop = asyncio.get_running_loop()
        return await retry_async(
            lambda: loop.run_in_executor(pool, self._apply_durably, record, stats),
            self.backoff(),
            on_retry=lambda attempt, delay, _: log.exception(
                "store write failed on %s[%d]@%d (attempt %d), retrying in %.1fs",
                record.topic,
                record.partition,
                record.offset,
                attempt,
                delay,
            ),
        )

    def backoff(self) -> Backoff:
        """Between retries of a write or send that must land (the agent's partition waits meanwhile)."""
        return Backoff(self.backoff_s, self.max_backoff_s)

    def _apply_durably(
        self, record: Record, stats: Stats
    ) -> tuple[str | None, ApplyResult | None, Event | InvalidEvent]:
        decoded = try_decode(record)
        served = self.tracker.served if self.tracker is not None else None
        reason, result = apply_record(self.sink, record, stats, self.revocation_bound_s, decoded=decoded, served=served)
        self.sink.flush()
        if self.tracker is not None:
            self.tracker.applied(record, decoded, result)
            self.tracker.confirmed([decoded])
        return reason, result, decoded

    async def maintenance(self, now: bool = False) -> None:
        """Run the maintenance hook in a thread, one run at a time (a purge may wait for leases)."""
        if self.maintain is None or (self._maintaining.locked() and not now):
            return
        async with self._maintaining:
            try:
                await asyncio.to_thread(self.maintain, now)
            except Exception:
                log.exception("maintenance failed; the next timer retries")

    async def retry_clears(self) -> None:
        """The tracker's deny-set clears that failed or waited (streams.deny_clears), retried on an
        access thread: never the deny writer's own thread, which a retry timing out would hold up."""
        if self.tracker is None or not self.tracker.clears_waiting():
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._access_pool, self.tracker.retry_clears)
        except Exception:
            log.exception("retrying deny-set clears failed; the next timer retries")

    def summary(self) -> str:
        return ", ".join(
            f"{topic}: {s.applied} applied, {s.stale} stale, {s.dead_lettered} dead-lettered"
            for topic, s in self.stats.items()
        )

    def close(self) -> None:
        """Once the Faust worker stopped: the appliers' threads and the sink's end (queued work is
        dropped, uncommitted, so it is redelivered; work in flight finishes first)."""
        for pool in (self._deny_pool, self._access_pool, self._documents_pool):
            pool.shutdown(wait=True, cancel_futures=True)
        self.sink.close()
