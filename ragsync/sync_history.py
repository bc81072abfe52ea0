"""When each source was last scanned and what the scan found: what `ragsync status` shows per source.

One row per pass in `connectors.db` beside the connectors' own state (its own table), written when
a pass ends, by whichever process ran it (a CLI sync, a watcher, the owner's scheduler). A pass
that raised is recorded too, with why (`failure`), and the problems of each source's latest pass
(the scan report's errors: a document and the reason it could not be read, or a source-wide
problem such as a missing folder or an unknown git ref) are kept beside it, at most MAX_PROBLEMS,
so `ragsync status` and serve's /readyz can say what went wrong without anyone reading a log.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable
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
CREATE TABLE IF NOT EXISTS sync_problems (
    source TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    n INTEGER NOT NULL,
    problem TEXT NOT NULL,
    PRIMARY KEY (source, started_ms, n)
) WITHOUT ROWID;
"""

KEEP_PER_SOURCE = 50
MAX_PROBLEMS = 100
"""Problems kept (and logged) per pass; the count says how many there were in all."""
MAX_PROBLEM_CHARS = 500


@dataclass(frozen=True)
class SyncRun:
    source: str
    name: str
    started_ms: int
    finished_ms: int
    full_pass: bool
    report: ScanReport
    failure: str | None = None  # the pass raised: why (its counts are what it got to before)


def shorten(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """One line, bounded: a problem is shown in a log line, a JSON status and /readyz's reasons."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class SyncHistory:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(sync_runs)")}
        if "failure" not in columns:  # a home from before failed passes were recorded
            try:
                self._db.execute("ALTER TABLE sync_runs ADD COLUMN failure TEXT")
            except sqlite3.OperationalError as exc:  # another process added it meanwhile
                if "duplicate column" not in str(exc):
                    raise
        self._lock = threading.Lock()

    def record(self, run: SyncRun) -> None:
        """The pass, and its problems in place of the source's previous pass's (one transaction)."""
        r = run.report
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO sync_runs (source, name, started_ms, finished_ms, full_pass, upserts,"
                    " acl_changes, deletes, unchanged, errors, deletes_skipped, failure)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
                        shorten(run.failure) if run.failure is not None else None,
                    ),
                )
                self._db.execute(
                    "DELETE FROM sync_runs WHERE source = ? AND started_ms NOT IN"
                    " (SELECT started_ms FROM sync_runs WHERE source = ? ORDER BY started_ms DESC LIMIT ?)",
                    (run.source, run.source, KEEP_PER_SOURCE),
                )
                self._db.execute("DELETE FROM sync_problems WHERE source = ?", (run.source,))
                self._db.executemany(
                    "INSERT INTO sync_problems VALUES (?,?,?,?)",
                    [(run.source, run.started_ms, n, shorten(p)) for n, p in enumerate(r.errors[:MAX_PROBLEMS])],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def last_runs(self) -> list[dict[str, Any]]:
        """The latest pass of every source (with its problems, or why it failed), and its latest full
        pass when that is an older one."""
        with self._lock:
            rows = self._db.execute(
                "SELECT source, name, started_ms, finished_ms, full_pass, upserts, acl_changes, deletes, unchanged,"
                " errors, deletes_skipped, failure FROM sync_runs r WHERE started_ms = (SELECT MAX(started_ms)"
                " FROM sync_runs WHERE source = r.source) ORDER BY source"
            ).fetchall()
            fulls = dict(
                self._db.execute("SELECT source, MAX(finished_ms) FROM sync_runs WHERE full_pass = 1 GROUP BY source")
            )
            problems: dict[tuple[str, int], list[str]] = {}
            for source, started, problem in self._db.execute(
                "SELECT source, started_ms, problem FROM sync_problems ORDER BY source, started_ms, n"
            ):
                problems.setdefault((source, started), []).append(problem)
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
                "failed": row[11],
                "problems": problems.get((row[0], row[2]), []),
            }
            for row in rows
        ]

    def health(self, sources: Iterable[str]) -> dict[str, str]:
        """The named sources whose latest pass failed or had problems, with a reason that names no
        document (it is shown on /readyz, which anyone may call); the details are in `last_runs`."""
        wanted = set(sources)
        out: dict[str, str] = {}
        for run in self.last_runs():
            if run["source"] not in wanted:
                continue
            if run["failed"] is not None:
                out[run["source"]] = "last pass failed (see `ragsync status` or the log)"
            elif run["errors"]:
                held = "; deletions held back" if run["deletes_skipped"] else ""
                out[run["source"]] = f"last pass had {run['errors']} problem(s){held} (see `ragsync status`)"
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()


def source_health(home: Path, sources: Iterable[str]) -> dict[str, str]:
    """`SyncHistory.health` for a home, opening its history only when there are sources to look at."""
    names = list(sources)
    if not names:
        return {}
    history = SyncHistory(home / "connectors.db")
    try:
        return history.health(names)
    finally:
        history.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
