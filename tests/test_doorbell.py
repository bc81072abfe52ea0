"""The doorbell that wakes an idle serve's log readers: no append slips between a look and a wait,
and an append by another process rings it (inotify on the log's files)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from streams.doorbell import Doorbell, FileBell
from streams.sqlite_log import SqliteEventLog


def test_a_ring_between_the_look_and_the_wait_is_not_lost() -> None:
    bell = Doorbell()
    mark = bell.rings
    bell.ring()  # an append after the reader looked, before it waits
    assert bell.wait(mark, 5.0) is True
    assert bell.wait(bell.rings, 0.05) is False  # nothing new since


def test_every_waiting_reader_wakes() -> None:
    bell = Doorbell()
    mark = bell.rings
    woke: list[bool] = []
    readers = [threading.Thread(target=lambda: woke.append(bell.wait(mark, 10.0))) for _ in range(2)]
    for r in readers:
        r.start()
    bell.ring()
    for r in readers:
        r.join(10)
    assert woke == [True, True]


def test_an_append_by_another_process_rings(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    SqliteEventLog(db).close()  # the log exists before serve watches it
    bell = Doorbell()
    watcher = FileBell([db, db.with_name(db.name + "-wal")], bell)
    watcher.start()
    try:
        assert bell.wait(bell.rings, 0.5) is False  # quiet log, no ring
        mark = bell.rings
        code = (
            "import sys; from streams.sqlite_log import SqliteEventLog as L; "
            f"log = L(__import__('pathlib').Path({str(db)!r})); log.publish_raw('documents', 'k', b'v'); log.close()"
        )
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
        assert bell.wait(mark, 10.0) is True
    finally:
        watcher.stop()
