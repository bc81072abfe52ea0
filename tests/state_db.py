"""What another process sees of state.db: whether its write lock is free, how long the audit trail is."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def writable(db: Path, timeout_s: float = 0.2) -> bool:
    """Whether another connection can take state.db's write lock within `timeout_s` (nobody holds it)."""
    other = sqlite3.connect(db, timeout=timeout_s, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        other.close()


def committed_records(db: Path) -> int:
    """The audit trail as another process reads it from the file (committed records only)."""
    other = sqlite3.connect(db)
    try:
        return int(other.execute("SELECT COUNT(*) FROM audit_chain").fetchone()[0])
    finally:
        other.close()
