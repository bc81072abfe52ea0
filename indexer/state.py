"""Durable bookkeeping of the embedded profile: applied versions and tombstones, the deletion
audit log, and per-tenant cache generations, all in one SQLite file beside the indexes.

Generations live here (not only in memory) so they survive restarts; the embedded worker writes
all three through one shared, batched connection (StateDb).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from indexer.audit_chain import GENESIS, ChainRecord, canonical, make_record
from indexer.audit_records import (
    KIND_DELETION,
    KIND_PURGE,
    DeletionRecord,
    PurgeRecord,
    deletion_body,
    deletion_of,
    purge_body,
    purge_of,
)
from indexer.cache import GenerationSource
from indexer.doc_state import DocState, grants_json, with_grants_json

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
CREATE TABLE IF NOT EXISTS audit_chain (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    event_id TEXT UNIQUE,
    tenant TEXT,
    doc_id TEXT,
    store TEXT,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_chain_doc ON audit_chain(tenant, doc_id);
CREATE INDEX IF NOT EXISTS audit_chain_kind ON audit_chain(kind, seq);
CREATE TRIGGER IF NOT EXISTS audit_chain_no_update BEFORE UPDATE ON audit_chain
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_chain_no_delete BEFORE DELETE ON audit_chain
BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
CREATE TABLE IF NOT EXISTS generations (tenant TEXT PRIMARY KEY, generation INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""


class StateDb:
    """One connection to state.db, shared by the doc states, the audit and the generations of a home.

    `deferred=True` is the write path of a worker that commits per batch: writes accumulate in one
    transaction that `flush` commits after the stores flushed, so a document's state is never
    durable before its passages are, and one fsync covers a whole batch. Readers on this connection
    (the owner's cache reading a generation) see the batch's writes at once; other processes see
    them at the commit. The three stores must share the connection: separate connections would
    each want the write lock for the length of a batch. Opening it chains an older home's unchained
    audit rows first, before any batch can be open.

    `committed()` reads through a second connection, which sees only what is committed: what every
    other process reads from the file.
    """

    def __init__(self, path: Path, *, deferred: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(_SCHEMA)
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(doc_state)")}
        if "acl_version" not in columns:  # homes written before content and ACL versions were split
            self.conn.execute("ALTER TABLE doc_state ADD COLUMN acl_version INTEGER")
        if "tombstone_version" not in columns:  # homes written before deletes kept a floor
            self.conn.execute("ALTER TABLE doc_state ADD COLUMN tombstone_version INTEGER")
        if "grants" not in columns:  # homes written before access had instants (indexer.grants)
            self.conn.execute("ALTER TABLE doc_state ADD COLUMN grants TEXT")
        _migrate_unchained(self.conn)
        self.lock = threading.RLock()
        self.deferred = deferred
        self._users = 0
        self._closed = False
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()

    @contextmanager
    def committed(self) -> Iterator[sqlite3.Connection]:
        """One read transaction over what is committed, on a connection of its own.

        The owner's connection also sees its open batch; reading the audit trail here instead means
        the owner (a certificate it computes) and another process (`ragsync audit verify`) count and
        hash the same records, and a read of several tables sees one snapshot of them.
        """
        with self._read_lock:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
                self._reader.execute("PRAGMA query_only = ON")
            self._reader.execute("BEGIN")
            try:
                yield self._reader
            finally:
                self._reader.execute("COMMIT")

    def write(self, sql: str, args: tuple[object, ...]) -> None:
        """Run one write; deferred, it joins the open batch transaction (opened here if needed)."""
        with self.lock:
            if self.deferred and not self.conn.in_transaction:
                self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(sql, args)

    def flush(self) -> None:
        with self.lock:
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def discard(self) -> None:
        """Drop writes not flushed yet: after a failed store flush, state must not get ahead of the stores."""
        with self.lock:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")

    def share(self) -> StateDb:
        with self.lock:
            self._users += 1
        return self

    def release(self) -> None:
        """Closing rolls back unflushed writes, which redelivery re-applies: never commit a partial batch."""
        with self.lock:
            self._users -= 1
            if self._users <= 0 and not self._closed:
                self._closed = True
                self.conn.close()
                with self._read_lock:
                    if self._reader is not None:
                        self._reader.close()


def _db(where: Path | StateDb) -> StateDb:
    return (where if isinstance(where, StateDb) else StateDb(where)).share()


class SqliteDocStates:
    def __init__(self, where: Path | StateDb) -> None:
        self._db = _db(where)

    def states(self) -> list[DocState]:
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT tenant, doc_id FROM doc_state ORDER BY tenant, doc_id",
            ).fetchall()
        return [s for s in (self.get(t, d) for t, d in rows) if s is not None]

    def get(self, tenant: str, doc_id: str) -> DocState | None:
        with self._db.lock:
            row = self._db.conn.execute(
                "SELECT applied_version, deleted, acl, content_version, acl_version, content_hash, chunker_version,"
                " passage_ids, tombstone_version, grants FROM doc_state WHERE tenant = ? AND doc_id = ?",
                (tenant, doc_id),
            ).fetchone()
        if row is None:
            return None
        state = DocState(
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
            tombstone_version=row[8],
        )
        return with_grants_json(state, row[9])

    def put(self, state: DocState) -> None:
        with self._db.lock:
            self._db.write(
                "INSERT OR REPLACE INTO doc_state(tenant, doc_id, applied_version, deleted, acl, content_version,"
                " acl_version, content_hash, chunker_version, passage_ids, tombstone_version, grants)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    state.tombstone_version,
                    grants_json(state),
                ),
            )

    def chunker_versions(self) -> set[str]:
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT DISTINCT chunker_version FROM doc_state WHERE deleted = 0 AND chunker_version IS NOT NULL"
            ).fetchall()
        return {str(r[0]) for r in rows}

    def flush(self) -> None:
        self._db.flush()

    def discard(self) -> None:
        self._db.discard()

    def counts_by_tenant(self) -> dict[str, int]:
        """Live (not deleted) documents per tenant, for status."""
        with self._db.lock:
            rows = self._db.conn.execute(
                "SELECT tenant, COUNT(*) FROM doc_state WHERE deleted = 0 GROUP BY tenant"
            ).fetchall()
        return {str(tenant): int(n) for tenant, n in rows}

    def close(self) -> None:
        self._db.release()


class SqliteDeletionAudit:
    """Append-only and hash-chained: triggers refuse UPDATE and DELETE, each record carries the hash
    of the one before it (indexer.audit_chain), the head is kept in `meta`, and a redelivered
    deletion adds nothing (event_id is unique)."""

    def __init__(self, where: Path | StateDb) -> None:
        self._db = _db(where)

    def _append(
        self,
        kind: str,
        body: dict[str, Any],
        event_id: str | None,
        tenant: str | None,
        doc_id: str | None,
        store: str | None,
        *,
        batched: bool,
    ) -> int | None:
        """Link one record after the head. `batched` (a deletion, written by the sink while it applies a
        batch): on a deferred StateDb it joins the batch's transaction, opening it if need be, and is
        committed with the batch's doc states at its flush. Otherwise (a purge, which runs between
        batches) it is committed here, in a transaction of its own: a record left in a transaction
        nobody commits is invisible to every other process and holds state.db's write lock. (Were a
        batch open on the connection then, the record would join it: committing would commit half a
        batch.)"""
        with self._db.lock:
            conn = self._db.conn
            if batched and self._db.deferred and not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE")  # the batch's transaction, as StateDb.write opens it
            # Inside a transaction (the batch's), a savepoint keeps a failed append from leaving half a
            # link behind in it.
            outer = conn.in_transaction
            conn.execute("SAVEPOINT audit_append" if outer else "BEGIN IMMEDIATE")
            try:
                seen = (
                    event_id is not None
                    and conn.execute("SELECT 1 FROM audit_chain WHERE event_id = ?", (event_id,)).fetchone()
                )
                seq = None if seen else _link(conn, kind, body, (event_id, tenant, doc_id, store))
                conn.execute("RELEASE audit_append" if outer else "COMMIT")
            except BaseException:
                if outer:
                    conn.execute("ROLLBACK TO audit_append")
                    conn.execute("RELEASE audit_append")
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return seq

    def append(self, record: DeletionRecord) -> None:
        self._append(
            KIND_DELETION, deletion_body(record), record.event_id, record.tenant, record.doc_id, None, batched=True
        )

    def append_purge(self, record: PurgeRecord) -> None:
        self._append(KIND_PURGE, purge_body(record), None, None, None, record.store, batched=False)

    # Every read below is of what is committed (StateDb.committed): the trail as every process sees it.

    def _links(self, where: str = "", args: tuple[object, ...] = ()) -> list[ChainRecord]:
        with self._db.committed() as conn:
            rows = conn.execute(f"SELECT seq, kind, body, prev_hash, hash FROM audit_chain {where} ORDER BY seq", args)
            return [ChainRecord(int(r[0]), str(r[1]), json.loads(r[2]), str(r[3]), str(r[4])) for r in rows]

    def records(self, tenant: str | None = None) -> list[DeletionRecord]:
        if tenant is None:
            links = self._links("WHERE kind = ?", (KIND_DELETION,))
        else:
            links = self._links("WHERE kind = ? AND tenant = ?", (KIND_DELETION, tenant))
        return [deletion_of(link) for link in links]

    def purges(self, store: str | None = None) -> list[PurgeRecord]:
        if store is None:
            links = self._links("WHERE kind = ?", (KIND_PURGE,))
        else:
            links = self._links("WHERE kind = ? AND store = ?", (KIND_PURGE, store))
        return [purge_of(link) for link in links]

    def tip(self) -> int:
        with self._db.committed() as conn:
            return _head(conn)[0]

    def latest(self, kind: str) -> int:
        with self._db.committed() as conn:
            row = conn.execute("SELECT MAX(seq) FROM audit_chain WHERE kind = ?", (kind,)).fetchone()
        return int(row[0] or 0)

    def chain(self) -> tuple[list[ChainRecord], tuple[int, str] | None]:
        with self._db.committed() as conn:  # the records and the head of one snapshot
            rows = conn.execute("SELECT seq, kind, body, prev_hash, hash FROM audit_chain ORDER BY seq").fetchall()
            row = conn.execute("SELECT value FROM meta WHERE key = 'audit_head'").fetchone()
        links = [ChainRecord(int(r[0]), str(r[1]), json.loads(r[2]), str(r[3]), str(r[4])) for r in rows]
        head = None
        if row is not None:
            seq, _, digest = str(row[0]).partition(":")
            head = (int(seq), digest)
        return links, head

    def close(self) -> None:
        self._db.release()


def _link(conn: sqlite3.Connection, kind: str, body: dict[str, Any], keys: tuple[str | None, ...]) -> int:
    """Insert one record after the head, and move the head to it; its seq."""
    head, prev = _head(conn)
    link = make_record(head + 1, kind, body, prev)
    conn.execute(
        "INSERT INTO audit_chain(seq, kind, event_id, tenant, doc_id, store, body, prev_hash, hash)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        (link.seq, kind, *keys, canonical(link.body), link.prev_hash, link.hash),
    )
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('audit_head', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (f"{link.seq}:{link.hash}",),
    )
    return link.seq


def _head(conn: sqlite3.Connection) -> tuple[int, str]:
    """The last record's (seq, hash), read from the records themselves (the head in meta is for verify)."""
    row = conn.execute("SELECT seq, hash FROM audit_chain ORDER BY seq DESC LIMIT 1").fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def _migrate_unchained(conn: sqlite3.Connection) -> None:
    """Homes written before the chain kept `deletion_audit` rows without hashes: chain them once, in order."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deletion_audit'").fetchone()
    if not exists:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = conn.execute(
            "SELECT event_id, tenant, doc_id, version, received_ms, removed, cache_invalidated_ms, passages_removed"
            " FROM deletion_audit ORDER BY seq"
        ).fetchall()
        seq, prev = _head(conn)
        for r in rows:
            body = {
                "event_id": r[0],
                "tenant": r[1],
                "doc_id": r[2],
                "version": r[3],
                "received_ms": r[4],
                "removed_ms": json.loads(r[5]),
                "cache_invalidated_ms": r[6],
                "passages_removed": r[7],
                "erase": False,
                "details": {"chained_later": True},
            }
            if conn.execute("SELECT 1 FROM audit_chain WHERE event_id = ?", (r[0],)).fetchone():
                continue
            seq += 1
            link = make_record(seq, KIND_DELETION, body, prev)
            conn.execute(
                "INSERT INTO audit_chain(seq, kind, event_id, tenant, doc_id, store, body, prev_hash, hash)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (seq, KIND_DELETION, r[0], r[1], r[2], None, canonical(link.body), link.prev_hash, link.hash),
            )
            prev = link.hash
        if rows:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('audit_head', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (f"{seq}:{prev}",),
            )
        conn.execute("DROP TRIGGER IF EXISTS deletion_audit_no_update")
        conn.execute("DROP TRIGGER IF EXISTS deletion_audit_no_delete")
        conn.execute("DROP TABLE deletion_audit")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SqliteGenerations(GenerationSource):
    def __init__(self, where: Path | StateDb) -> None:
        self._db = _db(where)

    def get(self, tenant: str) -> int:
        with self._db.lock:
            row = self._db.conn.execute("SELECT generation FROM generations WHERE tenant = ?", (tenant,)).fetchone()
        return int(row[0]) if row else 0

    def bump(self, tenant: str) -> int:
        with self._db.lock:
            self._db.write(
                "INSERT INTO generations(tenant, generation) VALUES (?, 1)"
                " ON CONFLICT(tenant) DO UPDATE SET generation = generation + 1",
                (tenant,),
            )
            row = self._db.conn.execute("SELECT generation FROM generations WHERE tenant = ?", (tenant,)).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._db.release()
