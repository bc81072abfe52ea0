"""Reads of the embedded lexical store that never rank: passages by id (through the permission filter),
a document's passages, counts, the verify inventory and the storage-order walk.

A mixin of indexer.sqlite_fts.SqliteLexicalIndex (and so of indexer.tantivy_lexical's subclass, which
keeps the same SQLite tables): kept apart so the store's module reads as writing and searching.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

from indexer.ports import StoredPassage
from indexer.sqlite_fts_schema import ALWAYS_MS, read_hit, row_hit
from schemas._time import to_epoch_ms
from schemas.passages import Passage
from schemas.principal import AccessFilter


class StoreReads:
    _conn: sqlite3.Connection
    _lock: threading.RLock

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        wanted = list(dict.fromkeys(passage_ids))
        if not wanted or not access.entries:
            return []
        as_of = to_epoch_ms(access.as_of)
        acl_marks = ",".join("?" for _ in access.entries)
        out: list[Passage] = []
        with self._lock:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" for _ in chunk)
                cur = self._conn.execute(
                    "SELECT p.*, 0.0 AS score FROM passages p"
                    f" WHERE p.tenant = ? AND p.passage_id IN ({marks})"
                    " AND p.effective_ms <= ? AND (p.superseded_ms IS NULL OR p.superseded_ms > ?)"
                    f" AND EXISTS (SELECT 1 FROM passage_acl a WHERE a.rid = p.rid AND a.entry IN ({acl_marks})"
                    " AND a.since_ms <= ?)",
                    (access.tenant, *chunk, as_of, as_of, *access.entries, as_of),
                )
                cols = [d[0] for d in cur.description]
                out.extend(read_hit(dict(zip(cols, row, strict=True))).passage for row in cur.fetchall())
        return out

    def doc_passages(self, tenant: str, doc_id: str) -> list[Passage]:
        with self._lock:
            cur = self._conn.execute(
                "SELECT p.*, 0.0 AS score FROM passages p WHERE p.tenant = ? AND p.doc_id = ? ORDER BY version, rid",
                (tenant, doc_id),
            )
            cols = [d[0] for d in cur.description]
            return [row_hit(dict(zip(cols, row, strict=True))).passage for row in cur.fetchall()]

    def count(self, tenant: str, doc_id: str | None = None) -> int:
        with self._lock:
            if doc_id is None:
                row = self._conn.execute("SELECT COUNT(*) FROM passages WHERE tenant = ?", (tenant,)).fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM passages WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
                ).fetchone()
            return int(row[0])

    def inventory(self, tenant: str, doc_id: str) -> list[StoredPassage]:
        """ACL entries from passage_acl, the table the search filter joins, not the JSON copy."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT p.passage_id, p.version, a.entry, a.since_ms FROM passages p"
                " LEFT JOIN passage_acl a ON a.rid = p.rid WHERE p.tenant = ? AND p.doc_id = ? ORDER BY p.passage_id",
                (tenant, doc_id),
            ).fetchall()
        found: dict[str, tuple[int, dict[str, int]]] = {}
        for passage_id, version, entry, since_ms in rows:
            _, entries = found.setdefault(passage_id, (int(version), {}))
            if entry is not None:
                entries[str(entry)] = int(since_ms)
        return [
            StoredPassage(pid, v, tuple(sorted(e)), tuple((k, ms) for k, ms in sorted(e.items()) if ms != ALWAYS_MS))
            for pid, (v, e) in sorted(found.items())
        ]

    def counts_by_tenant(self) -> dict[str, int]:
        """Passages stored per tenant (any ACL, any date): for status, never for answering."""
        with self._lock:
            rows = self._conn.execute("SELECT tenant, COUNT(*) FROM passages GROUP BY tenant").fetchall()
        return {str(tenant): int(n) for tenant, n in rows}

    def passages_after(self, rid: int, limit: int) -> list[tuple[int, Passage]]:
        """Stored passages in storage order after row `rid`, with their rows: for maintenance that walks
        every passage (embedding those a model-less sync left without a vector), never for answering."""
        with self._lock:
            cur = self._conn.execute(
                "SELECT *, 0.0 AS score FROM passages WHERE rid > ? ORDER BY rid LIMIT ?", (rid, limit)
            )
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
        return [(int(str(row["rid"])), row_hit(row).passage) for row in rows]
