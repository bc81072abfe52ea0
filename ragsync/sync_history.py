"""When each source was last scanned and what the scan found: what `ragsync status` shows per source.

One row per pass in `connectors.db` beside the connectors' own state (its own table), written when
a pass ends, by whichever process ran it (a CLI sync, a watcher, the owner's scheduler).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.scan import ScanReport

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sync_runs (
    source TEXT NOT NULL,
    name TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    full_pass INTEGER NOT NULL,
    upserts INTEGER NOT NULL,
    acl_changes INTEGER NOT NULL,
    deletes INTEGER NOT NULL,
    unchanged INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    deletes_skipped INTEGER NOT NULL,
    PRIMARY KEY (source, started_ms)
) WITHOUT ROWID;
"""

KEEP_PER_SOURCE = 50


@dataclass(frozen=True)
class SyncRun:
    source: str
    name: str
    started_ms: int
    finished_ms: int
    full_pass: bool
    report: ScanReport


class SyncHistory:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def record(self, run: SyncRun) -> None:
        r = run.report
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO sync_runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run.source,
                    run.name,
                    run.started_ms,
                    run.finished_ms,
                    int(run.full_pass),
                    r.upserts,
                    r.acl_changes,
                    r.deletes,
                    r.unchanged,
                    len(r.errors),
                    int(r.deletes_skipped),
                ),
            )
            self._db.execute(
                "DELETE FROM sync_runs WHERE source = ? AND started_ms NOT IN"
                " (SELECT started_ms FROM sync_runs WHERE source = ? ORDER BY started_ms DESC LIMIT ?)",
                (run.source, run.source, KEEP_PER_SOURCE),
            )

    def last_runs(self) -> list[dict[str, Any]]:
        """The latest pass of every source, and its latest full pass when that is an older one."""
        with self._lock:
            rows = self._db.execute(
                "SELECT source, name, started_ms, finished_ms, full_pass, upserts, acl_changes, deletes, unchanged,"
                " errors, deletes_skipped FROM sync_runs r WHERE started_ms = (SELECT MAX(started_ms) FROM sync_runs"
                " WHERE source = r.source) ORDER BY source"
            ).fetchall()
            fulls = dict(
                self._db.execute("SELECT source, MAX(finished_ms) FROM sync_runs WHERE full_pass = 1 GROUP BY source")
            )
        return [
            {
                "source": row[0],
                "name": row[1],
                "last_sync": _iso(row[3]),
                "seconds": round((row[3] - row[2]) / 1000, 3),
                "full_pass": bool(row[4]),
                "last_full_pass": _iso(fulls[row[0]]) if row[0] in fulls else None,
                "upserts": row[5],
                "acl_changes": row[6],
                "deletes": row[7],
                "unchanged": row[8],
                "errors": row[9],
                "deletes_skipped": bool(row[10]),
            }
            for row in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
