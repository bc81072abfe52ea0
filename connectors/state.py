"""What a connector has published, per (source, tenant, document): the memory behind "emit only changes".

A row is written only after the event describing it was published, so a crash between the two
re-emits the same event (same version, hence the same deterministic event ID) on the next run,
and downstream deduplicates it. Deleted documents keep their row (deleted = 1) so a document that
comes back continues its version sequence instead of restarting at 1.

Rows are keyed by the source's short name and the document's path within the source; events
carry the namespaced doc ID `<source>:<path>` (schemas.events). The `sources` table binds each
short name to the one location that may use it (a drive's folder, a repository and subdir, the
webhook), so two drives that would both default to the name "docs", or a pusher configured with
a drive's name, are refused instead of sharing, and overwriting, one namespace.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS connector_docs (
    source TEXT NOT NULL,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    acl TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, tenant, doc_id)
);
CREATE INDEX IF NOT EXISTS connector_docs_by_doc ON connector_docs (source, doc_id);
CREATE TABLE IF NOT EXISTS connector_meta (
    source TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (source, key)
);
CREATE TABLE IF NOT EXISTS sources (
    name TEXT PRIMARY KEY,
    location TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS connector_issued (
    source TEXT NOT NULL,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (source, tenant, doc_id)
);
"""
# connector_issued: the highest version ever handed to the event log per document, written before
# the publish. A publish that fails may still have reached the log (the broker wrote the records,
# the acknowledgement was lost in a restart), so its versions are spent even though connector_docs
# did not advance: see ConnectorState.next_version.


class SourceConflict(ValueError):
    """A source name already bound to another location: using it would mix two sources' documents."""


class HomeFormatError(RuntimeError):
    """The home was written before doc IDs were namespaced by source and must be rebuilt."""


@dataclass(frozen=True, slots=True)
class DocRecord:
    tenant: str
    doc_id: str
    version: int
    content_hash: str
    acl: tuple[str, ...]
    fingerprint: str
    deleted: bool = False


class ConnectorState:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Shared across threads (the webhook publishes from a worker thread); every statement
        # runs and is fetched under one lock, so uses never interleave.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL may lose the last commits on power loss; that only re-emits events with the same IDs.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        # Sources were once named by location ("drive:/abs/root", "webhook:kb"); short names have no ':'.
        if self._db.execute("SELECT 1 FROM connector_docs WHERE source LIKE '%:%' LIMIT 1").fetchone():
            raise HomeFormatError(
                f"{path.parent}: this home was indexed before doc IDs were namespaced by source;"
                " remove it and sync again"
            )

    @staticmethod
    def _record(row: tuple[str, str, int, str, str, str, int]) -> DocRecord:
        tenant, doc_id, version, content_hash, acl, fingerprint, deleted = row
        return DocRecord(tenant, doc_id, version, content_hash, tuple(json.loads(acl)), fingerprint, bool(deleted))

    _COLUMNS = "tenant, doc_id, version, content_hash, acl, fingerprint, deleted"

    def _all(self, sql: str, args: tuple[object, ...]) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def get(self, source: str, tenant: str, doc_id: str) -> DocRecord | None:
        rows = self._all(
            f"SELECT {self._COLUMNS} FROM connector_docs WHERE source = ? AND tenant = ? AND doc_id = ?",
            (source, tenant, doc_id),
        )
        return self._record(rows[0]) if rows else None

    def live_elsewhere(self, source: str, doc_id: str, tenant: str) -> list[DocRecord]:
        """Live rows of the document under other tenants: left behind when a manifest moved it."""
        rows = self._all(
            f"SELECT {self._COLUMNS} FROM connector_docs"
            " WHERE source = ? AND doc_id = ? AND tenant <> ? AND deleted = 0 ORDER BY tenant",
            (source, doc_id, tenant),
        )
        return [self._record(r) for r in rows]

    def records(self, source: str) -> list[DocRecord]:
        """Every row of the source, deleted ones included (what `ragsync verify` reconciles)."""
        rows = self._all(
            f"SELECT {self._COLUMNS} FROM connector_docs WHERE source = ? ORDER BY tenant, doc_id", (source,)
        )
        return [self._record(r) for r in rows]

    def live(self, source: str) -> list[DocRecord]:
        rows = self._all(
            f"SELECT {self._COLUMNS} FROM connector_docs WHERE source = ? AND deleted = 0 ORDER BY tenant, doc_id",
            (source,),
        )
        return [self._record(r) for r in rows]

    def put(self, source: str, record: DocRecord) -> None:
        self._all(
            "INSERT INTO connector_docs (source, tenant, doc_id, version, content_hash, acl, fingerprint, deleted)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (source, tenant, doc_id) DO UPDATE SET version = excluded.version,"
            " content_hash = excluded.content_hash, acl = excluded.acl, fingerprint = excluded.fingerprint,"
            " deleted = excluded.deleted",
            (
                source,
                record.tenant,
                record.doc_id,
                record.version,
                record.content_hash,
                json.dumps(list(record.acl)),
                record.fingerprint,
                int(record.deleted),
            ),
        )

    def next_version(self, source: str, tenant: str, doc_id: str, recorded: int) -> int:
        """The version of the document's next event: above the recorded one and above any ever issued.

        Reusing a version whose publish failed would be fail-open: if the failed event did reach the
        log, two different events would carry one version. An upsert v5 with the old ACL and a
        revoking ACL event v5 then freeze the old readers whichever is applied first (the later one
        is stale against the version, or the upsert's ACL overwrites an equal-version ACL); an
        edited text re-emitted as v5 would be dropped against the unacknowledged v5.
        """
        rows = self._all(
            "SELECT version FROM connector_issued WHERE source = ? AND tenant = ? AND doc_id = ?",
            (source, tenant, doc_id),
        )
        issued = int(rows[0][0]) if rows else 0
        return max(recorded, issued) + 1

    def issue(self, source: str, versions: Sequence[tuple[str, str, int]]) -> None:
        """Record (tenant, doc_id, version) as handed to the log, in one transaction, before publishing."""
        if not versions:
            return
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO connector_issued (source, tenant, doc_id, version) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (source, tenant, doc_id) DO UPDATE SET"
                " version = max(version, excluded.version)",
                [(source, tenant, doc_id, version) for tenant, doc_id, version in versions],
            )

    def meta(self, source: str, key: str) -> str | None:
        """A per-source fact recorded by the last complete sync, e.g. the chunker its events were emitted for."""
        rows = self._all("SELECT value FROM connector_meta WHERE source = ? AND key = ?", (source, key))
        return str(rows[0][0]) if rows else None

    def set_meta(self, source: str, key: str, value: str) -> None:
        self._all(
            "INSERT INTO connector_meta (source, key, value) VALUES (?, ?, ?)"
            " ON CONFLICT (source, key) DO UPDATE SET value = excluded.value",
            (source, key, value),
        )

    def claim(self, name: str, location: str) -> None:
        """Bind `name` to `location` on first use; SourceConflict when another location holds it."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO sources (name, location) VALUES (?, ?)", (name, location))
            row = self._db.execute("SELECT location FROM sources WHERE name = ?", (name,)).fetchone()
        if row[0] != location:
            raise SourceConflict(
                f"source name {name!r} already belongs to {row[0]}; give {location} another name (--source NAME)"
            )

    def sources(self) -> dict[str, str]:
        return dict(self._all("SELECT name, location FROM sources ORDER BY name", ()))

    def close(self) -> None:
        with self._lock:
            self._db.close()
