"""Propagation tracking: how long each revocation and deletion took to reach every copy.

For every ACL and delete event a worker records, next to the source's `occurred_at`: when the
event was published to the log, when a worker consumed it (the deny-set write: from then on it
is effective for queries), when each store's write returned, when the cache was invalidated, and
when every store had it durably (converged; the deny entry is cleared then). `summarize` turns
records into percentiles per copy and end to end, plus every event over the bound. Pure, except
for the SQLite adapter at the bottom; the cluster adapter lives in indexer.elastic_propagation.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from schemas._time import from_epoch_ms, to_epoch_ms, utcnow

EFFECTIVE = "effective"
"""The copy name of the deny set: consumed by a worker, hence in force for every query."""
CACHE = "cache"
CONVERGED = "converged"
"""Every store durable: what `end to end` measures."""


@dataclass(frozen=True)
class PropagationRecord:
    event_id: str
    kind: str  # "acl" | "delete"
    tenant: str
    doc_id: str
    version: int
    occurred_at: datetime
    published_at: datetime | None
    consumed_at: datetime
    applied_at: dict[str, datetime] = field(default_factory=dict)
    """Per store (its adapter name): when its write returned."""
    cache_invalidated_at: datetime | None = None
    converged_at: datetime | None = None
    outcome: str = "applied"  # or "stale": nothing to change, already superseded

    def start(self) -> datetime:
        """Where propagation starts: the publish (the source's clock may be skewed, the log's is ours)."""
        return self.published_at or self.occurred_at

    def delays(self) -> dict[str, float]:
        """Seconds from publish to each copy: effective, every store, cache, converged."""
        start = self.start()
        out = {EFFECTIVE: (self.consumed_at - start).total_seconds()}
        for store, at in self.applied_at.items():
            out[store] = (at - start).total_seconds()
        if self.cache_invalidated_at is not None:
            out[CACHE] = (self.cache_invalidated_at - start).total_seconds()
        if self.converged_at is not None:
            out[CONVERGED] = (self.converged_at - start).total_seconds()
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else 0.0,
    }


@dataclass(frozen=True)
class Summary:
    events: int
    by_copy: dict[str, dict[str, float]]
    """copy -> {count, p50, p95, p99, max} in seconds, per kind under "<kind>/<copy>" too."""
    over_bound: list[dict[str, Any]]
    bound_s: float
    unconverged: int


def summarize(records: Iterable[PropagationRecord], bound_s: float) -> Summary:
    """Percentiles per copy (all kinds, and per kind) and every event whose convergence exceeded the bound.

    An event not converged yet counts as over the bound once its age passes it.
    """
    per_copy: dict[str, list[float]] = {}
    over: list[dict[str, Any]] = []
    events = 0
    unconverged = 0
    now = utcnow()
    for record in records:
        events += 1
        delays = record.delays()
        for copy, seconds in delays.items():
            per_copy.setdefault(copy, []).append(seconds)
            per_copy.setdefault(f"{record.kind}/{copy}", []).append(seconds)
        end = delays.get(CONVERGED)
        if end is None:
            unconverged += 1
            end = (now - record.start()).total_seconds()
        if end > bound_s:
            over.append(
                {
                    "event_id": record.event_id,
                    "kind": record.kind,
                    "tenant": record.tenant,
                    "doc_id": record.doc_id,
                    "version": record.version,
                    "published_at": record.start().isoformat(),
                    "converged_s": round(end, 3) if CONVERGED in delays else None,
                    "slowest_copy": max(delays, key=lambda c: delays[c]),
                    "delays_s": {c: round(v, 3) for c, v in delays.items()},
                }
            )
    return Summary(events, {c: stats(v) for c, v in sorted(per_copy.items())}, over, bound_s, unconverged)


class PropagationLog(Protocol):
    def record(self, records: Sequence[PropagationRecord]) -> None:
        """Append (or replace, by event_id: a redelivered event's later record wins)."""

    def records(self, since: datetime | None = None) -> list[PropagationRecord]:
        """Records published at or after `since` (all when None), oldest first."""

    def close(self) -> None: ...


def to_row(r: PropagationRecord) -> dict[str, Any]:
    return {
        "event_id": r.event_id,
        "kind": r.kind,
        "tenant": r.tenant,
        "doc_id": r.doc_id,
        "version": r.version,
        "occurred_ms": to_epoch_ms(r.occurred_at),
        "published_ms": to_epoch_ms(r.published_at) if r.published_at else None,
        "consumed_ms": to_epoch_ms(r.consumed_at),
        "applied_ms": {k: to_epoch_ms(v) for k, v in r.applied_at.items()},
        "cache_ms": to_epoch_ms(r.cache_invalidated_at) if r.cache_invalidated_at else None,
        "converged_ms": to_epoch_ms(r.converged_at) if r.converged_at else None,
        "outcome": r.outcome,
    }


def from_row(d: dict[str, Any]) -> PropagationRecord:
    def ms(value: Any) -> datetime | None:
        return from_epoch_ms(int(value)) if value is not None else None

    return PropagationRecord(
        event_id=str(d["event_id"]),
        kind=str(d["kind"]),
        tenant=str(d["tenant"]),
        doc_id=str(d["doc_id"]),
        version=int(d["version"]),
        occurred_at=from_epoch_ms(int(d["occurred_ms"])),
        published_at=ms(d.get("published_ms")),
        consumed_at=from_epoch_ms(int(d["consumed_ms"])),
        applied_at={k: from_epoch_ms(int(v)) for k, v in dict(d.get("applied_ms") or {}).items()},
        cache_invalidated_at=ms(d.get("cache_ms")),
        converged_at=ms(d.get("converged_ms")),
        outcome=str(d.get("outcome", "applied")),
    )


RETENTION_DAYS = 30


class SqlitePropagationLog:
    """Its own file beside the stores: written after each batch commit, never inside one."""

    def __init__(self, path: Path, *, retention_days: float = RETENTION_DAYS) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS propagation (event_id TEXT PRIMARY KEY, start_ms INTEGER NOT NULL,"
            " row TEXT NOT NULL)"
        )
        self._conn.execute("CREATE INDEX IF NOT EXISTS propagation_start ON propagation(start_ms)")
        self._lock = threading.Lock()
        self._retention_ms = int(retention_days * 86_400_000)
        self._writes = 0

    def record(self, records: Sequence[PropagationRecord]) -> None:
        if not records:
            return
        rows = [(r.event_id, to_epoch_ms(r.start()), json.dumps(to_row(r))) for r in records]
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO propagation(event_id, start_ms, row) VALUES (?,?,?)", rows
                )
                self._writes += 1
                if self._writes % 500 == 1:
                    cutoff = to_epoch_ms(utcnow()) - self._retention_ms
                    self._conn.execute("DELETE FROM propagation WHERE start_ms < ?", (cutoff,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def records(self, since: datetime | None = None) -> list[PropagationRecord]:
        with self._lock:
            if since is None:
                rows = self._conn.execute("SELECT row FROM propagation ORDER BY start_ms, event_id").fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT row FROM propagation WHERE start_ms >= ? ORDER BY start_ms, event_id",
                    (to_epoch_ms(since),),
                ).fetchall()
        return [from_row(json.loads(r[0])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
