"""The runtime of the process that owns an embedded home: `ragsync serve` (and `ragsync worker`).

It opens the stores once, then keeps them in sync while the API answers from them:

- a worker thread drains the event log continuously (ACL and deletion topics first), so events
  published by any process (a `ragsync sync` elsewhere, a webhook push, a watcher, the schedule
  below) are applied within a poll interval plus one batch; when the log is empty it does the
  idle maintenance of `ragsync.maintenance`;
- a scheduler thread syncs the `[[sources]]` of the settings file on their intervals and, for
  watched folders, on every change (`ragsync.sources`).

The server calls `start` in its lifespan startup and `stop` in its shutdown (SIGTERM): stop lets the
worker finish its batch, flush and commit, then returns; nothing applied is lost, and nothing is
acknowledged that was not applied. `checks()`, `readiness_details()` and `degraded()` are what
`/readyz` reports.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from ragsync.embedded import EVENTS_DB
from ragsync.home_lock import OwnerInfo
from ragsync.wiring import Components
from schemas.retry import Backoff
from streams.doorbell import Doorbell, FileBell
from streams.embedded_worker import EmbeddedWorker

log = logging.getLogger(__name__)

POLL_S = 0.05
"""How often a worker with work in hand looks at the log."""
IDLE_POLL_S = 0.2
"""How often it looks once the log has been quiet for a few polls (the interval doubles up to this):
bounds how long an event published into a quiet log waits, and keeps an idle serve's wake-ups, and
so its CPU, low (bench/soak.py). Revocations are effective sooner, through the deny watcher."""
BELL_TIMEOUT_S = 1.0
"""An embedded owner sleeps until an append to its log rings the doorbell (streams.doorbell): this
only stands in for a lost notification and paces maintenance while nothing is appended."""
STEP_RETRY = Backoff(0.5, 30.0)
"""After an indexer step failed (a store outage): the batch stays uncommitted and is retried after this."""


class Owner:
    def __init__(
        self,
        components: Components,
        *,
        info: OwnerInfo | None = None,
        sources: Sequence[Any] = (),
        poll_s: float = POLL_S,
    ) -> None:
        self.components = components
        self.settings = components.settings
        self.info = info
        self.sources = list(sources)
        self.poll_s = poll_s
        self.worker: EmbeddedWorker | None = None
        self.deny_watcher: Any = None
        self.scheduler: Any = None
        self.started_at: float | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self.bell: Doorbell | None = None
        self.file_bell: FileBell | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Open every store (failing here, not at the first question) and start the threads. Idempotent."""
        if self._thread is not None:
            return
        c = self.components
        for port in ("events", "lexical", "docs", "audit", "cache", "embedder", "vector", "deny", "propagation"):
            getattr(c, port)
        from ragsync.pipeline import embedded_worker
        from ragsync.propagation_metrics import process_metrics
        from streams.deny_watcher import DenyWatcher

        metrics = process_metrics(self.settings.revocation_bound_s)
        tracker = c.tracker(observe=metrics.observe)
        metrics.watch_clears(tracker.clears_waiting)
        tracker.sweep(c.docs)
        self.worker = embedded_worker(c, tracker)
        # Revocations and deletions effective within a poll even while a batch embeds (streams/deny_watcher.py).
        if self.settings.profile == "embedded":
            self.bell = Doorbell()
            log_db = self.settings.home / EVENTS_DB
            self.file_bell = FileBell([log_db, log_db.with_name(log_db.name + "-wal")], self.bell)
            self.file_bell.start()
        self.deny_watcher = DenyWatcher(c.events, tracker, bell=self.bell)
        self.deny_watcher.start()
        self._thread = threading.Thread(target=self._run, name="ragsync-indexer", daemon=True)
        self._thread.start()
        if self.sources:
            from ragsync.sources import Scheduler

            self.scheduler = Scheduler(c, self.sources)
            self.scheduler.start()
        self.started_at = time.time()
        backlog = self.worker.backlog()
        log.info("owner started on %s; backlog %s", self.settings.home, backlog)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Finish the batch in hand, flush, commit, stop. Idempotent."""
        self._stop.set()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.bell is not None:
            self.bell.ring()
        if self.deny_watcher is not None:
            self.deny_watcher.stop()
        if self.file_bell is not None:
            self.file_bell.stop()
            self.file_bell = None
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("indexer did not stop within %.0fs; its uncommitted batch will be redelivered", timeout_s)
            elif self.worker is not None:
                self.worker.close()  # the sink's threads end with the worker that used them
            self._thread = None

    def wait_idle(self, timeout_s: float) -> bool:
        """Until the log is drained and maintenance is done (tests, benchmarks)."""
        return self._idle.wait(timeout_s)

    # ---- the worker thread ----------------------------------------------------------------

    def _run(self) -> None:
        from ragsync.maintenance import Maintenance

        assert self.worker is not None
        maintenance = Maintenance(self.components, tracker=self.worker.tracker)
        failures = 0
        wait = self.poll_s
        while not self._stop.is_set():
            mark = self.bell.rings if self.bell is not None else 0
            try:
                if self.worker.step() > 0:
                    self._idle.clear()
                    failures, wait = 0, self.poll_s
                    maintenance.purge_if_overdue()  # a deletion's bytes go within purge_max_delay_s, busy or not
                    continue
                if maintenance.step():
                    wait = self.poll_s
                    continue
                self.last_error = None
            except Exception as exc:  # a store outage: the batch stays uncommitted, retry with backoff
                self.last_error = f"{type(exc).__name__}: {exc}"
                failures += 1
                log.exception("indexer step failed; retrying in %.1fs", STEP_RETRY.delay(failures))
                self._idle.clear()
                self._stop.wait(STEP_RETRY.delay(failures))
                continue
            self._idle.set()
            if self.bell is not None:
                self.bell.wait(mark, BELL_TIMEOUT_S)
                continue
            self._stop.wait(wait)
            wait = min(max(self.poll_s, IDLE_POLL_S), wait * 2)

    # ---- what the API reports -------------------------------------------------------------

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def backlog(self) -> dict[str, int]:
        return self.worker.backlog() if self.worker is not None else {}

    def stores(self) -> dict[str, str]:
        c = self.components
        opened = set(c.opened())
        return {
            "event_log": "open" if "events" in opened else "closed",
            "lexical": "open" if "lexical" in opened else "closed",
            "vector": "open" if "vector" in opened else ("disabled" if c.embedder is None else "closed"),
            "doc_state": "open" if "docs" in opened else "closed",
        }

    def checks(self) -> dict[str, Any]:
        """/readyz checks (None when fine, else why not): the stores are open and the indexer runs."""

        def stores() -> str | None:
            closed = [name for name, state in self.stores().items() if state == "closed"]
            return f"not open: {', '.join(closed)}" if closed else None

        def indexer() -> str | None:
            if self.running():
                return None
            return "stopped" + (f" ({self.last_error})" if self.last_error else "")

        return {"stores": stores, "indexer": indexer}

    def readiness_details(self) -> dict[str, Any]:
        """What /readyz adds to its checks: each store's state and the backlog per topic (no tenant data)."""
        return {"stores": self.stores(), "backlog": self.backlog(), "indexer_error": self.last_error}

    def degraded(self) -> dict[str, str]:
        """The sources this owner syncs whose latest pass failed or had problems (/readyz: degraded, 200)."""
        from ragsync.sync_history import source_health

        return source_health(self.settings.home, [s.name for s in self.sources])

    def status(self) -> dict[str, Any]:
        from ragsync.status import home_status

        info = home_status(self.components, self.info)
        info["indexer"] = {
            "running": self.running(),
            "last_error": self.last_error,
            "batches": self.worker.batches if self.worker else 0,
            "applied": self.worker.stats.applied if self.worker else 0,
            "preemptions": self.worker.preemptions if self.worker else 0,
        }
        return info

    def verify(self, tenant: str | None = None, attempts: int = 3) -> dict[str, Any]:
        """`ragsync verify` on the stores this process holds, while its indexer keeps applying.

        A batch applied while the stores are read can show as drift that is gone a moment later (a
        document's passages read before the batch, its doc state after): when the indexer applied
        anything during a pass that found drift, the pass is repeated, up to `attempts` times."""
        from ragsync.verify import verify

        def applied() -> int:
            return self.worker.stats.applied if self.worker is not None else 0

        for _ in range(attempts):
            before = applied()
            report = verify(self.components, tenant=tenant)
            if not report.drift or applied() == before:
                break
        return report.as_dict()

    def committed(self) -> dict[str, int]:
        journal = self.components.events.journal
        return journal.committed_offsets("ragsync-indexer") if journal is not None else {}
