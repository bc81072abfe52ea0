"""The deny set: what makes a revocation or deletion effective before every store has converged.

A worker writes an entry the moment it consumes an ACL or delete event, before anything slow
(store writes, refreshes, a document backlog in the same process); the query side drops every
candidate an entry denies, fresh or cached; the worker clears the entry once every store and
cache confirmed the event. So "effective" waits for neither an index refresh nor a backlog.

Semantics, per passage of document d at version pv, for a principal with ACL entries E:
- a DELETED entry at version V denies the passage when pv <= V (a later re-creation is not denied);
- an ACL entry at version V with ACL A denies it unless A grants one of E (the new ACL, applied
  early), and denies it to every question as of an instant before the entry (a reader the change
  adds may read only from then on). An entry can only narrow what the stores return, never widen it.
Clearing is conditional on the version and the event (`clear(..., version, event_id)`: entries
older than the version, and the event's own entry at it), so a newer entry, or one of another event
at the same version, written while an event was being applied survives that event's confirmation.

A query reads the deny set after its store searches, so an entry cleared in between (its event
served: every store holds it) must still count for that query, whose searches may have read the
stores before the event reached them. Every clear therefore logs what it removed, under a rising
mark; a query takes the mark before searching (`mark`) and reads the entries and everything cleared
since (`lookup_since`): the deny set as it stood when the search began, or narrower. A log trimmed
past a query's mark denies that query every candidate (`deny_everything`): it fails closed.

Adapters: `SqliteDenySet` (embedded: an in-process map written first, mirrored to its own SQLite
file for other processes and restarts) and `indexer.redis_deny.RedisDenySet` (cluster).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from schemas._time import from_epoch_ms, to_epoch_ms
from schemas.errors import (
    DenyUnavailable as DenyUnavailable,  # re-export (schemas.errors)
)
from schemas.passages import Passage
from schemas.principal import AccessFilter


class DenyKind(StrEnum):
    ACL = "acl"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class DenyEntry:
    tenant: str
    doc_id: str
    kind: DenyKind
    version: int
    since: datetime
    """When the worker consumed the event: the instant the change became effective for queries."""
    acl: tuple[str, ...] = ()
    """For an ACL entry, the new ACL."""
    event_id: str = ""


class DenySet(Protocol):
    name: str

    def add(self, entry: DenyEntry) -> None:
        """Keep the entry unless one of the same kind with a higher version is already there."""

    def add_many(self, entries: Sequence[DenyEntry]) -> None:
        """`add` for each entry, in one write: the deny path of a worker that fetched several revocations
        together writes them at once rather than paying a round trip (Redis) or a sync (SQLite) each."""

    def lookup(self, tenant: str, doc_ids: Iterable[str]) -> list[DenyEntry]:
        """Entries of these documents. Raises when the set cannot be read (callers decide)."""

    def mark(self) -> int:
        """Where the log of clears stands: taken before a query's searches, given to `lookup_since` after.
        Raises when the set cannot be read."""

    def lookup_since(self, tenant: str, doc_ids: Iterable[str], mark: int) -> list[DenyEntry]:
        """`lookup`, plus every entry of these documents cleared after `mark`, as it was when cleared
        (or `deny_everything` when the log no longer reaches back to `mark`). Raises as `lookup`."""

    def clear(self, tenant: str, doc_id: str, version: int, event_id: str) -> None:
        """Remove the document's entries older than `version`, and at `version` only the entry of event
        `event_id` ("" for none), atomically (`clears`).

        Why not every entry up to `version`: an entry carries no version of its own beyond its event's,
        and two events of one document can carry one version (nothing in the envelope forbids it; `add`
        lets the later overwrite the earlier). Confirming the first must not take away the second's
        entry while the second is consumed and not yet applied, and a clear retried later (a failed
        call, streams.deny_clears) must not either. A confirmation passes its own event's ID; an upsert
        that supersedes its document's entries passes "" (an ACL change or a deletion at the upsert's
        version is not older than it: the sink lets a deletion at v stop an upsert at v)."""

    def entries(self, tenant: str | None = None) -> list[DenyEntry]:
        """Every entry (audits, certificates, tests)."""

    def close(self) -> None: ...


def denies(entry: DenyEntry, passage: Passage, access: AccessFilter) -> bool:
    """Whether the entry removes this passage from what the filter's principal may see. Pure."""
    if entry.tenant != passage.tenant or entry.doc_id != passage.doc_id:
        return False
    if entry.kind is DenyKind.DELETED:
        return passage.version <= entry.version
    # The new ACL, applied early: it may drop the principal, and until the stores hold its grant
    # instants, a question as of an instant before it cannot tell a reader it adds (readable only
    # from now on, indexer.grants) from one it keeps, so the past is closed to all meanwhile.
    return not set(entry.acl) & set(access.entries) or access.as_of < entry.since.replace(microsecond=0)


def apply_deny(passages: Sequence[Passage], entries: Sequence[DenyEntry], access: AccessFilter) -> list[Passage]:
    """The passages no entry denies, in their order."""
    if not entries:
        return list(passages)
    by_doc: dict[str, list[DenyEntry]] = {}
    for entry in entries:
        by_doc.setdefault(entry.doc_id, []).append(entry)
    return [p for p in passages if not any(denies(e, p, access) for e in by_doc.get(p.doc_id, ()))]


FORGOTTEN = 2**62
"""The version of `deny_everything`'s entries: above any a document can carry."""

CLEAR_LOG_KEEP_S = 600.0
"""How long a clear stays in the log: far beyond any query's searches (which are bounded in seconds)."""


def deny_everything(tenant: str, doc_ids: Iterable[str]) -> list[DenyEntry]:
    """Entries that deny every version of these documents to everyone: what a query gets when the log
    of clears was trimmed past its mark (it cannot tell what was cleared while it searched)."""
    return [DenyEntry(tenant, d, DenyKind.DELETED, FORGOTTEN, from_epoch_ms(0)) for d in sorted(set(doc_ids))]


def clears(entry: DenyEntry, version: int, event_id: str) -> bool:
    """Whether `DenySet.clear(..., version, event_id)` removes this entry of its document. Pure."""
    return entry.version < version or (entry.version == version and event_id != "" and entry.event_id == event_id)


def merge(current: DenyEntry | None, new: DenyEntry) -> DenyEntry:
    """The entry to keep for one (tenant, doc, kind): the highest version wins."""
    if current is None or new.version >= current.version:
        return new
    return current


_ENTRY_COLUMNS = """
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    version INTEGER NOT NULL,
    since_ms INTEGER NOT NULL,
    acl TEXT NOT NULL,
    event_id TEXT NOT NULL"""

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS deny ({_ENTRY_COLUMNS},
    PRIMARY KEY (tenant, doc_id, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deny_cleared (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cleared_ms INTEGER NOT NULL,{_ENTRY_COLUMNS}
);
CREATE INDEX IF NOT EXISTS deny_cleared_doc ON deny_cleared(tenant, doc_id, seq);
CREATE INDEX IF NOT EXISTS deny_cleared_at ON deny_cleared(cleared_ms);
CREATE TABLE IF NOT EXISTS deny_cleared_floor (one INTEGER PRIMARY KEY CHECK (one = 1), seq INTEGER NOT NULL);
"""


class SqliteDenySet:
    """In-process map first (effective for this process at once), then its own SQLite file.

    Its own file, not state.db: the owner's worker keeps state.db's write transaction open for a
    whole batch, and a deny write must never wait for a batch. Reads consult the file as well, so
    a query answered by another process (or after a restart) sees entries this process wrote.
    """

    name = "sqlite"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, str, DenyKind], DenyEntry] = {}

    def add(self, entry: DenyEntry) -> None:
        with self._lock:
            self._add(entry)

    def add_many(self, entries: Sequence[DenyEntry]) -> None:
        """In one transaction. The in-process map takes each entry first, so a failed commit leaves this
        process denying more than the file says (fail closed), never less."""
        if not entries:
            return
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for entry in entries:
                    self._add(entry)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _add(self, entry: DenyEntry) -> None:
        """Under the lock: the map, then the row (kept unless a higher version is there)."""
        key = (entry.tenant, entry.doc_id, entry.kind)
        self._memory[key] = merge(self._memory.get(key), entry)
        self._conn.execute(
            "INSERT INTO deny(tenant, doc_id, kind, version, since_ms, acl, event_id) VALUES (?,?,?,?,?,?,?)"
            " ON CONFLICT(tenant, doc_id, kind) DO UPDATE SET version = excluded.version,"
            " since_ms = excluded.since_ms, acl = excluded.acl, event_id = excluded.event_id"
            " WHERE excluded.version >= deny.version",
            _values(entry),
        )

    def _select(self, table: str, tenant: str, wanted: list[str], where: str = "", *args: int) -> list[DenyEntry]:
        """Under the lock: `table`'s entries of these documents (500 IDs a statement), `where` narrowing."""
        found: list[DenyEntry] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ",".join("?" for _ in chunk)
            rows = self._conn.execute(
                f"SELECT tenant, doc_id, kind, version, since_ms, acl, event_id FROM {table}"
                f" WHERE tenant = ?{where} AND doc_id IN ({marks})",
                (tenant, *args, *chunk),
            ).fetchall()
            found.extend(_row(r) for r in rows)
        return found

    def lookup(self, tenant: str, doc_ids: Iterable[str]) -> list[DenyEntry]:
        wanted = sorted(set(doc_ids))
        if not wanted:
            return []
        found: dict[tuple[str, str, DenyKind], DenyEntry] = {}
        with self._lock:
            for entry in self._select("deny", tenant, wanted):
                found[(entry.tenant, entry.doc_id, entry.kind)] = entry
            for doc_id in wanted:
                for kind in DenyKind:
                    mine = self._memory.get((tenant, doc_id, kind))
                    if mine is not None:
                        key = (tenant, doc_id, kind)
                        found[key] = merge(found.get(key), mine)
        return list(found.values())

    def mark(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'deny_cleared'").fetchone()
        return int(row[0]) if row else 0

    def lookup_since(self, tenant: str, doc_ids: Iterable[str], mark: int) -> list[DenyEntry]:
        wanted = sorted(set(doc_ids))
        if not wanted:
            return []
        found = self.lookup(tenant, wanted)
        with self._lock:
            floor = self._conn.execute("SELECT seq FROM deny_cleared_floor").fetchone()
            if floor is not None and int(floor[0]) > mark:
                return deny_everything(tenant, wanted)
            found.extend(self._select("deny_cleared", tenant, wanted, " AND seq > ?", mark))
        return list(dict.fromkeys(found))  # a clear logs this process's copy of an entry and the file's

    def clear(self, tenant: str, doc_id: str, version: int, event_id: str) -> None:
        """One transaction: what the rule of `clears` removes is logged (`lookup_since`), then removed."""
        rule = " AND (version < ? OR (version = ? AND event_id = ? AND event_id != ''))"
        args = (tenant, doc_id, version, version, event_id)
        with self._lock:
            gone = [
                m
                for kind in DenyKind
                if (m := self._memory.get((tenant, doc_id, kind))) is not None and clears(m, version, event_id)
            ]
            now_ms = to_epoch_ms(datetime.now(UTC))
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # This process's own entries first (one its file may lack: a commit that failed), then the file's.
                for m in gone:
                    self._conn.execute(
                        "INSERT INTO deny_cleared(cleared_ms, tenant, doc_id, kind, version, since_ms, acl, event_id)"
                        " VALUES (?,?,?,?,?,?,?,?)",
                        (now_ms, *_values(m)),
                    )
                self._conn.execute(
                    "INSERT INTO deny_cleared(cleared_ms, tenant, doc_id, kind, version, since_ms, acl, event_id)"
                    " SELECT ?, tenant, doc_id, kind, version, since_ms, acl, event_id FROM deny"
                    " WHERE tenant = ? AND doc_id = ?" + rule,
                    (now_ms, *args),
                )
                self._conn.execute("DELETE FROM deny WHERE tenant = ? AND doc_id = ?" + rule, args)
                self._trim(now_ms)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            for m in gone:
                del self._memory[(m.tenant, m.doc_id, m.kind)]

    def _trim(self, now_ms: int) -> None:
        """Under the lock, in the clear's transaction: clears older than CLEAR_LOG_KEEP_S leave the log,
        and the floor records the highest one gone (a query whose mark is below it fails closed)."""
        cutoff = now_ms - int(CLEAR_LOG_KEEP_S * 1000)
        row = self._conn.execute("SELECT MAX(seq) FROM deny_cleared WHERE cleared_ms < ?", (cutoff,)).fetchone()
        if row is None or row[0] is None:
            return
        self._conn.execute("DELETE FROM deny_cleared WHERE seq <= ?", (int(row[0]),))
        self._conn.execute(
            "INSERT INTO deny_cleared_floor(one, seq) VALUES (1, ?) ON CONFLICT(one) DO UPDATE SET seq = excluded.seq",
            (int(row[0]),),
        )

    def entries(self, tenant: str | None = None) -> list[DenyEntry]:
        sql = "SELECT tenant, doc_id, kind, version, since_ms, acl, event_id FROM deny"
        args: tuple[str, ...] = ()
        if tenant is not None:
            sql += " WHERE tenant = ?"
            args = (tenant,)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY tenant, doc_id, kind", args).fetchall()
        return [_row(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _values(entry: DenyEntry) -> tuple[str, str, str, int, int, str, str]:
    """An entry as its table's row (the inverse of `_row`)."""
    return (
        entry.tenant,
        entry.doc_id,
        entry.kind.value,
        entry.version,
        to_epoch_ms(entry.since),
        json.dumps(list(entry.acl)),
        entry.event_id,
    )


def _row(row: tuple[str, str, str, int, int, str, str]) -> DenyEntry:
    tenant, doc_id, kind, version, since_ms, acl, event_id = row
    return DenyEntry(
        tenant=tenant,
        doc_id=doc_id,
        kind=DenyKind(kind),
        version=int(version),
        since=from_epoch_ms(int(since_ms)),
        acl=tuple(json.loads(acl)),
        event_id=event_id,
    )
