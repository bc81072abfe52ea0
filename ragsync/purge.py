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

from indexer.ports import PurgeRecord
from ragsync.wiring import Components
from schemas._time import utcnow

log = logging.getLogger(__name__)

EVENT_LOG = "event-log"
EMBEDDING_CACHE = "embedding-cache"
RETENTION = "retention"


class Purger:
    def __init__(self, components: Components, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.components = components
        self.clock = clock
        self._covered: int | None = None
        self.last_run_at: float | None = None
        self.runs = 0

    # ---- what needs purging ------------------------------------------------------------------

    def covered(self) -> int:
        """The audit seq up to which every purgeable store has been purged (0: never)."""
        if self._covered is None:
            audit = self.components.audit
            by_store: dict[str, int] = {}
            for record in audit.purges():
                by_store[record.store] = max(by_store.get(record.store, 0), record.covers_seq)
            stores = [name for name, _ in self._targets()]
            self._covered = min((by_store.get(s, 0) for s in stores), default=0)
        return self._covered

    def pending(self) -> int:
        """Deletion records not yet covered by every store's purge."""
        tip = self.components.audit.tip()
        return max(0, tip - self.covered())

    def _targets(self) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
        """(copy name, purge call) for every opened store that can purge; nothing is opened here."""
        c = self.components
        opened = set(c.opened())
        out: list[tuple[str, Callable[[], dict[str, Any]]]] = []
        if "lexical" in opened and hasattr(c.lexical, "purge"):
            out.append((c.lexical.name, c.lexical.purge))
        if "vector" in opened and c.vector is not None and hasattr(c.vector, "purge"):
            out.append((c.vector.name, c.vector.purge))
        if "events" in opened and hasattr(c.events, "purge"):
            out.append((EVENT_LOG, c.events.purge))
        embedder = c.embedder if "embedder" in opened else None
        cache = getattr(embedder, "cache", None)
        if cache is not None and hasattr(cache, "purge"):
            out.append((EMBEDDING_CACHE, cache.purge))
        return out

    # ---- purging -----------------------------------------------------------------------------

    def run(self) -> list[PurgeRecord]:
        """Purge every store once; one audit record per store whose purge completed."""
        started = time.monotonic()
        audit = self.components.audit
        covers = audit.tip()
        records: list[PurgeRecord] = []
        incomplete: list[str] = []
        for name, purge in self._targets():
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
            else:
                incomplete.append(name)
        if incomplete:
            self._covered = None  # recomputed from the trail: some store still lags
            log.warning("purge incomplete for %s; the next purge retries", ", ".join(incomplete))
        else:
            self._covered = covers
        self.last_run_at = time.monotonic()
        self.runs += 1
        log.info("purged %d store(s) up to audit seq %d in %.2fs", len(records), covers, time.monotonic() - started)
        return records

    def expire_superseded(self, days: float) -> int:
        """Delete passages superseded more than `days` ago from every store; returns how many."""
        c = self.components
        cutoff = self.clock() - timedelta(days=days)
        expire = getattr(c.lexical, "delete_superseded", None)
        if expire is None:
            return 0
        removed = expire(cutoff)
        if not removed:
            return 0
        if c.vector is not None and hasattr(c.vector, "delete_superseded"):
            c.vector.delete_superseded(cutoff)
        forget = getattr(c.embedder, "forget", None)
        if callable(forget):
            from indexer.sink import embedding_text

            forget([embedding_text(p) for p in removed])
        c.audit.append_purge(
            PurgeRecord(
                store=RETENTION,
                at=self.clock(),
                covers_seq=c.audit.tip(),
                details={"superseded_before": cutoff.isoformat(), "passages": len(removed)},
            )
        )
        log.info("retention: %d passages superseded before %s deleted", len(removed), cutoff.date())
        return len(removed)


RETENTION_EVERY_S = 3600.0


def scheduled_purges(components: Components) -> Callable[[bool], None]:
    """The worker's purge schedule, called by its timer (and with `now` after an erasure): purge
    whenever deletions wait for one (a run takes up to one lease interval on Elasticsearch, so a
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
        if now or purger.pending() > 0:
            purger.run()

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
