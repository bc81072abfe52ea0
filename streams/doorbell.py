"""Wake the log's readers when a record may have been appended, instead of polling ten times a second.

An embedded serve reads its SQLite log in two loops (the deny watcher and the indexer). Records are
appended by serve itself (webhook pushes, the source scheduler) and by other processes (`ragsync
sync`, `erase`), so no in-process call can announce them all; polling every 0.1–0.2 s did, at about
two thirds of an idle serve's CPU (issue 20). Every append writes the database's WAL file, and the
kernel reports that write (inotify, through watchdog): `watch_files` rings the bell on it, and the
loops wait on the bell with a long timeout that only stands in for a lost notification.

Several loops wait on one bell, so it counts rings rather than holding a flag one reader would
clear for all: a loop notes `rings` before it looks, then `wait(since=that)` returns at once if a
ring came in between (no append slips between the look and the wait).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class Doorbell:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rings = 0

    @property
    def rings(self) -> int:
        with self._cond:
            return self._rings

    def ring(self) -> None:
        with self._cond:
            self._rings += 1
            self._cond.notify_all()

    def wait(self, since: int, timeout_s: float) -> bool:
        """Until a ring after `since` (True) or the timeout (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._rings != since, timeout_s)


class FileBell:
    """Rings `bell` whenever one of `files` (all in one folder) is written, created or replaced."""

    def __init__(self, files: Iterable[Path], bell: Doorbell) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        paths = [p.resolve() for p in files]
        folders = {p.parent for p in paths}
        if len(folders) != 1:
            raise ValueError("FileBell watches files of one folder")
        names = {str(p) for p in paths}

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                if str(event.src_path) in names or str(event.dest_path or "") in names:
                    bell.ring()

        self._observer: Any = Observer()
        self._observer.schedule(Handler(), str(folders.pop()), recursive=False)

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(5)
