"""Durable bookkeeping of the embedded profile: applied versions and tombstones, the deletion
audit log, and per-tenant cache generations, all in one SQLite file beside the indexes.

Generations live here (not only in memory) so a long-running `ragsync serve` sees a bump made
by a `ragsync sync` in another process.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from indexer.cache import GenerationSource
from indexer.ports import DeletionRecord, DocState
from schemas._time import from_epoch_ms, to_epoch_ms

_SCHEMA = """
CREATE TABLE IF NOT EXISTS doc_state (
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    applied_version INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    acl TEXT NOT NULL,
    content_version INTEGER,
    acl_version INTEGER,
    content_hash TEXT,
    chunker_version TEXT,
    passage_ids TEXT NOT NULL,
    PRIMARY KEY (tenant, doc_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deletion_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    received_ms INTEGER NOT NULL,
    removed TEXT NOT NULL,
    cache_invalidated_ms INTEGER NOT NULL,
    passages_removed INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS deletion_audit_no_update BEFORE UPDATE ON deletion_audit
BEGIN SELECT RAISE(ABORT, 'deletion audit is append-only'); END;
CREATE TRIGGER IF NOT EXISTS deletion_audit_no_delete BEFORE DELETE ON deletion_audit
BEGIN SELECT RAISE(ABORT, 'deletion audit is append-only'); END;
CREATE TABLE IF NOT EXISTS generations (tenant TEXT PRIMARY KEY, generation INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""


class _Db:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_SCHEMA)
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(doc_state)")}
        if "acl_version" not in columns:  # homes written before content and ACL versions were split
            self.conn.execute("ALTER TABLE doc_state ADD COLUMN acl_version INTEGER")
        self.lock = threading.Lock()


class SqliteDocStates:
    def __init__(self, path: Path) -> None:
        self._db = _Db(path)

    def get(self, tenant: str, doc_id: str) -> DocState | None:
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT applied_version, deleted, acl, content_version, acl_version, content_hash, chunker_version,"
                " passage_ids FROM doc_state WHERE tenant = ? AND doc_id = ?",
                (tenant, doc_id),
            ).fetchone()
        if row is None:
            return None
        return DocState(
            tenant=tenant,
            doc_id=doc_id,
            applied_version=row[0],
            deleted=bool(row[1]),
            acl=tuple(json.loads(row[2])),
            content_version=row[3],
            acl_version=row[4],
            content_hash=row[5],
            chunker_version=row[6],
            passage_ids=list(json.loads(row[7])),
        )

    def put(self, state: DocState) -> None:
        with self._db.lock:
            self._db.conn.execute(
                "INSERT OR REPLACE INTO doc_state(tenant, doc_id, applied_version, deleted, acl, content_version,"
                " acl_version, content_hash, chunker_version, passage_ids) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    state.tenant,
                    state.doc_id,
                    state.applied_version,
                    int(state.deleted),
                    json.dumps(list(state.acl)),
                    state.content_version,
                    state.acl_version,
                    state.content_hash,
                    state.chunker_version,
                    json.dumps(state.passage_ids),
                ),
            )

    def chunker_versions(self) -> set[str]:
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT DISTINCT chunker_version FROM doc_state WHERE deleted = 0 AND chunker_version IS NOT NULL"
            ).fetchall()
        return {str(r[0]) for r in rows}

    def close(self) -> None:
        self._db.conn.close()


class SqliteDeletionAudit:
    """Append-only: triggers refuse UPDATE and DELETE, and a redelivered event adds nothing."""

    def __init__(self, path: Path) -> None:
        self._db = _Db(path)

    def append(self, record: DeletionRecord) -> None:
        with self._db.lock:
            self._db.conn.execute(
                "INSERT OR IGNORE INTO deletion_audit(event_id, tenant, doc_id, version, received_ms, removed,"
                " cache_invalidated_ms, passages_removed) VALUES (?,?,?,?,?,?,?,?)",
                (
                    record.event_id,
                    record.tenant,
                    record.doc_id,
                    record.version,
                    to_epoch_ms(record.received_at),
                    json.dumps({k: to_epoch_ms(v) for k, v in record.removed_at.items()}),
                    to_epoch_ms(record.cache_invalidated_at),
                    record.passages_removed,
                ),
            )

    def records(self, tenant: str | None = None) -> list[DeletionRecord]:
        sql = (
            "SELECT event_id, tenant, doc_id, version, received_ms, removed, cache_invalidated_ms,"
            " passages_removed FROM deletion_audit"
        )
        args: tuple[str, ...] = ()
        if tenant is not None:
            sql += " WHERE tenant = ?"
            args = (tenant,)
        with self._db.lock:
            rows = self._db.conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [
            DeletionRecord(
                event_id=r[0],
                tenant=r[1],
                doc_id=r[2],
                version=r[3],
                received_at=from_epoch_ms(r[4]),
                removed_at={k: from_epoch_ms(v) for k, v in json.loads(r[5]).items()},
                cache_invalidated_at=from_epoch_ms(r[6]),
                passages_removed=r[7],
            )
            for r in rows
        ]

    def close(self) -> None:
        self._db.conn.close()


class SqliteGenerations(GenerationSource):
    def __init__(self, path: Path) -> None:
        self._db = _Db(path)

    def get(self, tenant: str) -> int:
        with self._db.lock:
            row = self._db.conn.execute("SELECT generation FROM generations WHERE tenant = ?", (tenant,)).fetchone()
        return int(row[0]) if row else 0

    def bump(self, tenant: str) -> int:
        with self._db.lock:
            self._db.conn.execute(
                "INSERT INTO generations(tenant, generation) VALUES (?, 1)"
                " ON CONFLICT(tenant) DO UPDATE SET generation = generation + 1",
                (tenant,),
            )
            row = self._db.conn.execute("SELECT generation FROM generations WHERE tenant = ?", (tenant,)).fetchone()
        return int(row[0])
