"""Physical purges: what turns "no query finds it" into "no file holds it", store by store.

A deletion is logical the moment the sink applies it (every store drops the document, the caches
forget it). Its bytes leave each store's files at that store's next purge: FTS5 segments merged and
the write-ahead log truncated (SQLite), Lucene segments with deleted documents rewritten
(Elasticsearch), segments with deleted points vacuumed (Qdrant), erased log records checkpointed out
of the event log's WAL. A purge covers every deletion recorded in the audit trail before it started
(`covers_seq`), and each store's purge that completes is itself an audit record, so a deletion
certificate can say, per copy, when the document was removed logically and when physically.

When: the embedded owner purges when idle after deletions (and at the latest `purge_max_delay_s`
after one), the Faust worker on a timer, and an erasure (`ragsync erase`) right after it is applied.
Superseded versions older than `retain_superseded_days` (when set) are deleted here too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from indexer.audit_records import KIND_DELETION, KIND_PURGE
from indexer.ports import PurgeDetails, PurgeRecord
from indexer.sentence_vectors import all_texts
from indexer.sink import embedding_text
from query.retrieval import passage_sentence_texts
from ragsync.wiring import Components
from schemas._time import utcnow
from schemas.retry import Backoff

log = logging.getLogger(__name__)

EVENT_LOG = "event-log"
EMBEDDING_CACHE = "embedding-cache"
RETENTION = "retention"


RETRY_AFTER_S = 2.0
RETRY_MAX_S = 60.0
"""After a store's purge failed or could not complete, the next try waits this long, doubling up to
RETRY_MAX_S: a store that cannot purge (a reader holding its WAL) is retried, never spun on."""
RETRY = Backoff(RETRY_AFTER_S, RETRY_MAX_S)


class Purger:
    """Purges the stores whose purge does not cover the last deletion yet.

    What is pending comes from the trail: the last deletion record against each store's last purge
    record (`covers_seq`). Purge records never count as deletions, so a purge never makes another
    one pending: after a deletion, exactly one purge per store (or a retry of one that failed).
    """

    def __init__(self, components: Components, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.components = components
        self.clock = clock
        self._by_store: dict[str, int] | None = None
        self._purges_seen = -1
        self._retry_at = 0.0
        self._failures = 0
        self.last_run_at: float | None = None
        self.runs = 0

    # ---- what needs purging ------------------------------------------------------------------

    def _coverage(self) -> dict[str, int]:
        """covers_seq per store as the trail says, re-read only when a purge was recorded meanwhile
        (by this process's other purger or, on the cluster, by another worker)."""
        audit = self.components.audit
        last_purge = audit.latest(KIND_PURGE)
        if self._by_store is None or last_purge != self._purges_seen:
            by_store: dict[str, int] = {}
            for record in audit.purges():
                by_store[record.store] = max(by_store.get(record.store, 0), record.covers_seq)
            self._by_store, self._purges_seen = by_store, last_purge
        return self._by_store

    def lagging(self) -> list[str]:
        """The opened stores whose purge does not cover the last deletion recorded."""
        last = self.components.audit.latest(KIND_DELETION)
        stores = [name for name, _ in self._targets()]
        if last == 0:
            return []
        known = self._by_store  # only ever behind the trail: when it covers the deletion, so does the trail
        if known is not None and all(known.get(s, 0) >= last for s in stores):
            return []
        by_store = self._coverage()
        return [s for s in stores if by_store.get(s, 0) < last]

    def pending(self) -> int:
        """How many stores still have to purge the last deletion (0: nothing to purge)."""
        return len(self.lagging())

    def due(self) -> bool:
        """Pending, and not waiting to retry a purge that failed."""
        return time.monotonic() >= self._retry_at and self.pending() > 0

    def _targets(self) -> list[tuple[str, Callable[[], PurgeDetails]]]:
        """(copy name, purge call) for every opened store whose bytes leave by a purge of ours (see
        indexer.ports.Removal: Kafka's compaction and Redis are not); nothing is opened here."""
        c = self.components
        opened = set(c.opened())
        out: list[tuple[str, Callable[[], PurgeDetails]]] = []
        if "lexical" in opened:
            out.append((c.lexical.name, c.lexical.purge))
        if "vector" in opened and c.vector is not None:
            out.append((c.vector.name, c.vector.purge))
        if "events" in opened and c.events.removal == "purge":
            out.append((EVENT_LOG, c.events.purge))
        embedder = c.embedder if "embedder" in opened else None
        cache = embedder.cache if embedder is not None else None
        if cache is not None and cache.removal == "purge":
            out.append((EMBEDDING_CACHE, cache.purge))
        return out

    # ---- purging -----------------------------------------------------------------------------

    def run(self, *, everything: bool = False) -> list[PurgeRecord]:
        """Purge every lagging store once (`everything`: every store); one audit record, committed, per
        store whose purge completed. A store whose purge failed or did not complete is retried after
        a backoff (see `due`)."""
        started = time.monotonic()
        audit = self.components.audit
        covers = audit.tip()
        lagging = None if everything else set(self.lagging())
        records: list[PurgeRecord] = []
        incomplete: list[str] = []
        for name, purge in self._targets():
            if lagging is not None and name not in lagging:
                continue
            try:
                details = purge()
            except Exception:
                log.exception("purge of %s failed; the next purge retries", name)
                incomplete.append(name)
                continue
            if details.get("complete", True) and details.get("checkpoint_complete", True):
                record = PurgeRecord(store=name, at=self.clock(), covers_seq=covers, details=_plain(details))
                audit.append_purge(record)
                records.append(record)
                if self._by_store is not None:
                    self._by_store[name] = max(self._by_store.get(name, 0), covers)
            else:
                incomplete.append(name)
        if incomplete:
            self._failures += 1
            wait = RETRY.delay(self._failures)
            self._retry_at = time.monotonic() + wait
            log.warning("purge incomplete for %s; retrying in %.0fs", ", ".join(incomplete), wait)
        else:
            self._failures, self._retry_at = 0, 0.0
        self.last_run_at = time.monotonic()
        self.runs += 1
        if records or incomplete:
            log.info("purged %d store(s) up to audit seq %d in %.2fs", len(records), covers, time.monotonic() - started)
        return records

    def expire_superseded(self, days: float) -> int:
        """Delete passages superseded more than `days` ago from every store; returns how many."""
        c = self.components
        cutoff = self.clock() - timedelta(days=days)
        removed = c.lexical.delete_superseded(cutoff)
        if not removed:
            return 0
        if c.vector is not None:
            c.vector.delete_superseded(cutoff)
        if c.embedder is not None:
            sentences = all_texts(removed, passage_sentence_texts) if c.settings.sentence_vectors else []
            c.embedder.forget([embedding_text(p) for p in removed] + sentences)
        c.audit.append_purge(
            PurgeRecord(
                store=RETENTION,
                at=self.clock(),
                covers_seq=c.audit.tip(),
                details={"superseded_before": cutoff.isoformat(), "passages": len(removed)},
            )
        )
        log.info("retention: %d passages superseded before %s deleted", len(removed), cutoff.date())
        self.run(everything=True)  # their bytes leave the files now: no deletion record makes it pending
        return len(removed)


RETENTION_EVERY_S = 3600.0


def scheduled_purges(components: Components) -> Callable[[bool], None]:
    """The worker's purge schedule, called by its timer (and with `now` after an erasure): purge
    whenever a deletion waits for one (a run takes up to one lease interval on Elasticsearch, so a
    deletion's bytes are gone within about two timer periods plus that), and apply
    `retain_superseded_days` hourly."""
    purger = Purger(components)
    settings = components.settings
    last_retention = [0.0]

    def hook(now: bool = False) -> None:
        days = settings.retain_superseded_days
        if days is not None and time.monotonic() - last_retention[0] >= RETENTION_EVERY_S:
            last_retention[0] = time.monotonic()
            purger.expire_superseded(days)
        if now or purger.due():
            purger.run(everything=now)

    return hook


def _plain(details: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe details for the audit body (counts, flags, names)."""
    out: dict[str, Any] = {}
    for key, value in details.items():
        if isinstance(value, bool | int | float | str) or value is None:
            out[key] = value
        elif isinstance(value, dict):
            out[key] = {str(k): v for k, v in value.items() if isinstance(v, bool | int | float | str)}
    return out
