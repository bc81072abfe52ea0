"""What bench/soak.py samples of a running `ragsync serve` from outside it: CPU, memory, the home's
size, the audit trail and state.db's write lock, each read the way another process would see them
(/proc, the files, a connection of its own), so the soak measures serve without asking serve.
"""

from __future__ import annotations

import os
import sqlite3
from collections import Counter
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of the process (its reaped children included), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / TICK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def home_size(home: Path) -> dict[str, int]:
    out: Counter[str] = Counter()
    for path in home.rglob("*"):
        if path.is_file():
            out[path.relative_to(home).parts[0]] += path.stat().st_size
    return dict(sorted(out.items())) | {"total": sum(out.values())}


def audit_kinds(home: Path) -> dict[str, int]:
    """The trail as another process reads it from the file (a connection opened and closed here)."""
    conn = sqlite3.connect(home / "state.db", timeout=5)
    try:
        return {str(k): int(n) for k, n in conn.execute("SELECT kind, COUNT(*) FROM audit_chain GROUP BY kind")}
    finally:
        conn.close()


def write_lock_free(home: Path) -> bool:
    conn = sqlite3.connect(home / "state.db", timeout=0.5, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]

    return {"count": len(values), "p50": round(at(0.5), 3), "p95": round(at(0.95), 3), "max": round(ordered[-1], 3)}
