"""Embedded lexical index with Tantivy as the candidate stage and SQLite as the system of record.

Why: FTS5 walks posting lists and scores through SQLite's virtual-table layer; at a million passages a
search took 360-500 ms of CPU. Tantivy (through `tantivy`) intersects the words' and the principal's
posting lists with skip lists and keeps a top-k heap, in native code (bench/lexical_engines.py:
0.6-1.3 ms for the same candidates at 100k).

What stays in SQLite: passages (the only copy of the text), passage_acl with grant instants, validity
dates, and the exact check every returned row passes (SqliteLexicalIndex._verify, unchanged). Tantivy
holds, per tenant, postings of the whole passage (scored as one BM25 with FTS5's IDF, as FTS5 scores
the row), of title, heading and body (for the field weights) and one token per ACL entry
(indexer.fts_acl's hash), keyed by the SQLite rid; nothing is stored in it. Its answers are
candidates only: a stale side index (another process committed since, a crash between the two
commits) can hold too many or too few candidates, never return a row the exact check refuses, so it
can only ever narrow an answer.

How the two stay in step: writes mark rids dirty; just before SQLite commits (the write's own
transaction, or the batch's at `flush`), the dirty rids are rewritten in Tantivy *from the SQLite rows
inside that transaction* (so a write rolled back to its savepoint re-derives to what SQLite holds)
and Tantivy commits with a stamp that SQLite records in the same transaction (indexer.tantivy_side).
Tantivy's writer is only made under SQLite's write lock, so processes never contend for it. A stamp
that differs under the write lock means a crash fell between the commits: the index is rebuilt.

Deletion: a deleted rid's postings stay in its Tantivy segment, marked deleted, until the segment is
rewritten. `purge` (run by the owner when idle after deletions, at the latest purge_max_delay_s after
one) rebuilds each tenant index that lost documents from SQLite into a new generation and removes the
old directory, so no file of the home keeps a deleted passage's words afterwards.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from indexer.fts_acl import Candidate
from indexer.ports import DEFAULT_FIELD_WEIGHTS, DEFAULT_LEXICAL_ANALYZER, FieldWeights, LexicalAnalyzer
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.sqlite_fts_schema import side_index_dir
from indexer.tantivy_side import SideIndex, document, drop_other_generations, side_dir, tenant_key
from schemas.principal import AccessFilter
from schemas.text import query_terms

log = logging.getLogger(__name__)

TABLE = """CREATE TABLE IF NOT EXISTS tantivy_indexes (
    tenant TEXT PRIMARY KEY, gen INTEGER NOT NULL, stamp INTEGER NOT NULL, analyzer TEXT NOT NULL
)"""
PURGE_PREFIX = "tantivy:"
"""purge_pending rows naming a tenant whose Tantivy index holds deleted documents."""
FTS_DROPPED = "fts-dropped"
"""purge_pending row: FTS5 tables were dropped, so the write-ahead log may hold their pages until a checkpoint."""
CHUNK = 2000


class TantivyLexicalIndex(SqliteLexicalIndex):
    """SqliteLexicalIndex with the FTS5 tables replaced by per-tenant Tantivy indexes (candidates only)."""

    name = "sqlite-tantivy"
    combines_writes = False

    def __init__(
        self,
        path: Path,
        weights: FieldWeights = DEFAULT_FIELD_WEIGHTS,
        *,
        deferred: bool = False,
        analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER,
    ) -> None:
        self._dirty: dict[str, set[int]] = {}
        self._sides: dict[str, SideIndex] = {}
        self._root = side_index_dir(path)
        super().__init__(path, weights, deferred=deferred, analyzer=analyzer)

    # ---- opening: FTS5 tables out, every tenant's side index checked -------------------------

    def _open_text_index(self) -> None:
        """Drop the FTS5 tables (a second copy of the text nothing keeps current now) and rebuild any
        tenant's side index that is missing, of another analyzer, or stamped apart from SQLite."""
        self._conn.execute(TABLE)
        names = [str(r[0]) for r in self._conn.execute("SELECT name FROM fts_tables")]
        if names:
            log.warning(
                "%s: a home indexed with FTS5 opened with lexical_engine = tantivy: its %d FTS5 table(s) are"
                " dropped and the Tantivy index is built from the passages SQLite holds (nothing to re-sync;"
                " lexical_engine = fts5 rebuilds the FTS5 tables the same way)",
                self.path,
                len(names),
            )
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for name in names:
                    self._conn.execute(f"DROP TABLE IF EXISTS {name}")
                self._conn.execute("DELETE FROM fts_tables")
                self._conn.execute("DELETE FROM purge_pending")
                self._conn.execute("INSERT OR IGNORE INTO purge_pending(fts) VALUES (?)", (FTS_DROPPED,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        tenants = {str(r[0]) for r in self._conn.execute("SELECT DISTINCT tenant FROM passages")}
        tenants |= {str(r[0]) for r in self._conn.execute("SELECT tenant FROM tantivy_indexes")}
        for tenant in sorted(tenants):
            if not self._current(tenant):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if not self._current(tenant):
                        self._rebuild(tenant)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            self._drop_stale_generations(tenant)

    def _row(self, tenant: str) -> tuple[int, int, str] | None:
        row = self._conn.execute(
            "SELECT gen, stamp, analyzer FROM tantivy_indexes WHERE tenant = ?", (tenant,)
        ).fetchone()
        return (int(row[0]), int(row[1]), str(row[2])) if row else None

    def _side(self, tenant: str, gen: int, *, create: bool) -> SideIndex | None:
        """The tenant's index of this generation, opened once; None when it is not on disk (a reader
        whose snapshot predates a rebuild that has since removed it: no candidates, never an error)."""
        path = side_dir(self._root, tenant, self.analyzer, gen)
        side = self._sides.get(tenant)
        if side is None or side.path != path:
            if not create and not (path / "meta.json").exists():
                return None
            side = SideIndex(path, self.analyzer)
            self._sides[tenant] = side
        return side

    def _current(self, tenant: str) -> bool:
        """The side index is of this analyzer, on disk, and carries SQLite's stamp (after a reload)."""
        row = self._row(tenant)
        if row is None or row[2] != self.analyzer:
            return False
        side = self._side(tenant, row[0], create=False)
        if side is None:
            return False
        if side.stamp != row[1]:
            side.reload()
        return side.stamp == row[1]

    def _drop_stale_generations(self, tenant: str) -> None:
        """Directories of the tenant SQLite does not name current, removed under SQLite's write lock
        (taken here unless the caller's write transaction holds it): a writer's rebuild in progress
        is a directory SQLite does not name yet, and must not be taken from under it."""
        if len(list(self._root.glob(f"{tenant_key(tenant)}-*"))) <= 1:
            return
        own = not self._conn.in_transaction
        if own:
            self._conn.execute("BEGIN IMMEDIATE")
        try:
            row = self._row(tenant)
            keep = side_dir(self._root, tenant, self.analyzer, row[0]) if row and row[2] == self.analyzer else None
            drop_other_generations(self._root, tenant, keep)
        finally:
            if own:
                self._conn.execute("COMMIT")

    def _rebuild(self, tenant: str) -> None:
        """The tenant's index written anew from SQLite as the next generation, inside the caller's
        write transaction (its rows, its stamp); the old directory goes once that has committed."""
        row = self._row(tenant)
        gen, stamp = (row[0] + 1, row[1] + 1) if row else (1, 1)
        path = side_dir(self._root, tenant, self.analyzer, gen)
        drop_other_generations(self._root, tenant, side_dir(self._root, tenant, self.analyzer, gen - 1))
        side = self._side(tenant, gen, create=True)
        assert side is not None
        writer = side.writer()
        try:
            after = 0
            while rids := [
                int(r[0])
                for r in self._conn.execute(
                    "SELECT rid FROM passages WHERE tenant = ? AND rid > ? ORDER BY rid LIMIT ?", (tenant, after, CHUNK)
                )
            ]:
                for doc in self._documents(tenant, rids):
                    writer.add_document(doc)
                after = rids[-1]
            side.commit(writer, stamp)
        except BaseException:
            writer.rollback()
            raise
        self._conn.execute(
            "INSERT OR REPLACE INTO tantivy_indexes(tenant, gen, stamp, analyzer) VALUES (?, ?, ?, ?)",
            (tenant, gen, stamp, self.analyzer),
        )
        assert side.path == path

    def _documents(self, tenant: str, rids: list[int]) -> Iterator[Any]:
        """Tantivy documents of these rids as SQLite holds them now: tokens from passage_acl (the table
        the exact check reads), so the index filter is never wider than the exact one."""
        for start in range(0, len(rids), 500):
            chunk = rids[start : start + 500]
            marks = ",".join("?" for _ in chunk)
            entries: dict[int, list[str]] = {}
            for rid, entry in self._conn.execute(f"SELECT rid, entry FROM passage_acl WHERE rid IN ({marks})", chunk):
                entries.setdefault(int(rid), []).append(str(entry))
            for rid, title, heading_path, text in self._conn.execute(
                f"SELECT rid, title, heading_path, text FROM passages WHERE tenant = ? AND rid IN ({marks})",
                (tenant, *chunk),
            ):
                heading = " ".join(json.loads(str(heading_path)))
                yield document(int(rid), str(title), heading, str(text), entries.get(int(rid), ()))

    # ---- writing: rids marked, rewritten from SQLite just before it commits --------------------

    def _index_passage(self, rid: int, p: Any) -> None:
        self._dirty.setdefault(p.tenant, set()).add(rid)

    def _unindex(self, tenant: str, rids: list[int]) -> None:
        if rids:
            self._dirty.setdefault(tenant, set()).update(rids)
            self._conn.execute("INSERT OR IGNORE INTO purge_pending(fts) VALUES (?)", (PURGE_PREFIX + tenant,))

    def _index_acl(self, tenant: str, rids: list[int], acl: Any) -> None:
        self._dirty.setdefault(tenant, set()).update(rids)

    def _before_commit(self) -> None:
        """Under SQLite's write lock, inside the transaction about to commit: each tenant's dirty rids
        rewritten from the rows it holds, Tantivy committed with the next stamp, the stamp recorded.
        A side index not at SQLite's stamp here (a crash fell between two commits) is rebuilt instead."""
        dirty, self._dirty = self._dirty, {}
        try:
            for tenant, rids in sorted(dirty.items()):
                self._drop_stale_generations(tenant)
                if not self._current(tenant):
                    self._rebuild(tenant)
                    continue
                row = self._row(tenant)
                assert row is not None
                side = self._side(tenant, row[0], create=True)
                assert side is not None
                writer = side.writer()
                try:
                    ordered = sorted(rids)
                    for rid in ordered:
                        writer.delete_documents_by_term("rid", rid)
                    for doc in self._documents(tenant, ordered):
                        writer.add_document(doc)
                    side.commit(writer, row[1] + 1)
                except BaseException:
                    writer.rollback()
                    raise
                self._conn.execute("UPDATE tantivy_indexes SET stamp = ? WHERE tenant = ?", (row[1] + 1, tenant))
        except BaseException:
            for tenant, rids in dirty.items():  # still to do: the transaction may yet commit
                self._dirty.setdefault(tenant, set()).update(rids)
            raise

    # ---- searching: candidates from Tantivy, the exact check in SQLite (the parent's) -------

    def _fetcher(self, query: str, access: AccessFilter) -> Callable[[int], list[Candidate]] | None:
        if self._dirty:  # writes of an open batch: into Tantivy first (a rollback is caught by the stamp)
            self._before_commit()
        row = self._row(access.tenant)
        if row is None or row[2] != self.analyzer:
            return None
        side = self._side(access.tenant, row[0], create=False)
        if side is None:
            return None
        if side.stamp != row[1]:  # another process committed since: see it (the exact check decides anyway)
            side.reload()
        words = query_terms(query)
        w = self.weights
        weights = {"title": w.title, "heading": w.heading, "text": w.text}

        def fetch(n: int) -> list[Candidate]:
            return [Candidate(rid, score) for score, rid in side.candidates(words, weights, access.entries, n)]

        return fetch

    # ---- upkeep ------------------------------------------------------------------------------

    def merge_step(self, pages: int = 256) -> bool:
        """Nothing to do between batches: each commit waits for the merges it started."""
        return False

    def purge(self) -> dict[str, object]:
        """Make deletions physical: every tenant index that lost documents rebuilt from SQLite as a new
        generation and the old directory removed; then SQLite's log checkpointed and truncated."""
        with self._lock:
            self.flush()
            pending = [str(r[0]) for r in self._conn.execute("SELECT fts FROM purge_pending").fetchall()]
            rebuilt = 0
            for name in pending:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if name.startswith(PURGE_PREFIX):
                        self._rebuild(name[len(PURGE_PREFIX) :])
                        rebuilt += 1
                    self._conn.execute("DELETE FROM purge_pending WHERE fts = ?", (name,))
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                if name.startswith(PURGE_PREFIX):
                    self._drop_stale_generations(name[len(PURGE_PREFIX) :])
            busy, pages, moved = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return {"rebuilt": rebuilt, "checkpoint_complete": busy == 0, "wal_pages": pages, "moved": moved}

    def close(self) -> None:
        with self._lock:
            self._sides.clear()
        super().close()
