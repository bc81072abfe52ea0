"""The embedded owner's deny watcher: revocations and deletions effective while the worker is busy.

The embedded worker drains ACL and deletion events before document upserts and lets an upsert
batch give way to them, but a batch that is embedding finishes its current model call first (a
second or so on two cores). This thread reads the ACL and deletion topics on a consumer group of
its own and writes each event's deny-set entry the moment it appears, so a query stops showing the
document within a poll interval whatever the worker is doing; the worker then applies the event and
clears the entry (streams.tracking). The group's offsets only say how far the watcher got.
"""

from __future__ import annotations

import logging
import threading

from streams.doorbell import Doorbell
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, EventLog
from streams.tracking import Tracker

log = logging.getLogger(__name__)

GROUP = "ragsync-deny"
POLL_S = 0.02
IDLE_POLL_S = 0.1
"""Once the two topics have been quiet for a few polls the interval doubles up to this: a revocation
published into a quiet log is effective within it, and an idle owner wakes 10 times a second, not 50."""
BELL_TIMEOUT_S = 1.0
"""With a doorbell (streams.doorbell) a quiet watcher sleeps until an append rings it; this only
stands in for a lost notification."""


class DenyWatcher:
    def __init__(
        self,
        events: EventLog,
        tracker: Tracker,
        *,
        group: str = GROUP,
        poll_s: float = POLL_S,
        bell: Doorbell | None = None,
    ) -> None:
        self.events = events
        self.bell = bell
        self.tracker = tracker
        self.group = group
        self.poll_s = poll_s
        self.seen = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self) -> int:
        """Deny everything new on the two topics; how many records were read."""
        read = 0
        for topic in (TOPIC_ACL, TOPIC_DELETIONS):
            records = self.events.poll(topic, self.group, 256)
            for record in records:
                self.tracker.consumed(record)
            if records:
                self.events.commit(self.group, records)
                read += len(records)
        self.seen += read
        return read

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ragsync-deny", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        wait = self.poll_s
        while not self._stop.is_set():
            mark = self.bell.rings if self.bell is not None else 0
            try:
                if self.step():
                    wait = self.poll_s
                    continue
            except Exception:  # the worker still denies each event itself before applying it
                log.exception("deny watcher step failed")
                self._stop.wait(1.0)
            if self.bell is not None:
                self.bell.wait(mark, BELL_TIMEOUT_S)
                continue
            self._stop.wait(wait)
            wait = min(max(self.poll_s, IDLE_POLL_S), wait * 2)

    def stop(self) -> None:
        self._stop.set()
        if self.bell is not None:
            self.bell.ring()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
