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
rewritten. Each tenant's index is split into shards of at most about SHARD_DOCS passages by rid range
(indexer.tantivy_shards), and `purge` (run by the owner when idle after deletions, at the latest
purge_max_delay_s after one) rebuilds from SQLite only the shards that lost documents, each into a new
generation, and removes the old directories: no file of the home keeps a deleted passage's words
afterwards, and a purge costs at most SHARD_DOCS passages per shard touched, whatever the tenant's size.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from indexer.fts_acl import Candidate
from indexer.ports import DEFAULT_FIELD_WEIGHTS, DEFAULT_LEXICAL_ANALYZER, FieldWeights, LexicalAnalyzer
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.sqlite_fts_schema import side_index_dir
from indexer.tantivy_shards import (
    SHARD_DOCS,
    TABLE,
    Shard,
    assign,
    bounds,
    merge_target,
    parse_purge_key,
    purge_key,
    shard_of,
)
from indexer.tantivy_side import SideIndex, candidates, document, drop_other_generations, side_dir, tenant_key
from schemas.principal import AccessFilter
from schemas.text import query_terms

log = logging.getLogger(__name__)

FORMER_TABLE = "tantivy_indexes"
"""One index per tenant, before shards: a home that has it is rebuilt into shards at open."""
FTS_DROPPED = "fts-dropped"
"""purge_pending row: FTS5 tables were dropped, so the write-ahead log may hold their pages until a checkpoint."""
CHUNK = 2000


class TantivyLexicalIndex(SqliteLexicalIndex):
    """SqliteLexicalIndex with the FTS5 tables replaced by per-tenant Tantivy shards (candidates only)."""

    name = "sqlite-tantivy"
    combines_writes = False

    def __init__(
        self,
        path: Path,
        weights: FieldWeights = DEFAULT_FIELD_WEIGHTS,
        *,
        deferred: bool = False,
        analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER,
        shard_docs: int = SHARD_DOCS,
    ) -> None:
        self.shard_docs = shard_docs
        """Passages per shard before a new one starts (indexer.tantivy_shards.SHARD_DOCS; small in tests)."""
        self._dirty: dict[str, set[int]] = {}
        self._deleted: dict[str, set[int]] = {}
        self._sides: dict[tuple[str, int], SideIndex] = {}
        self._root = side_index_dir(path)
        super().__init__(path, weights, deferred=deferred, analyzer=analyzer)

    # ---- opening: FTS5 tables out, every tenant's shards checked -----------------------------

    def _open_text_index(self) -> None:
        """Drop the FTS5 tables (a second copy of the text nothing keeps current now) and the former
        one-index-per-tenant table, and rebuild any shard that is missing, of another analyzer, or
        stamped apart from SQLite."""
        self._conn.execute(TABLE)
        names = [str(r[0]) for r in self._conn.execute("SELECT name FROM fts_tables")]
        former = self._conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FORMER_TABLE,)).fetchone()
        if names:
            log.warning(
                "%s: a home indexed with FTS5 opened with lexical_engine = tantivy: its %d FTS5 table(s) are"
                " dropped and the Tantivy index is built from the passages SQLite holds (nothing to re-sync;"
                " lexical_engine = fts5 rebuilds the FTS5 tables the same way)",
                self.path,
                len(names),
            )
        if names or former:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for name in names:
                    self._conn.execute(f"DROP TABLE IF EXISTS {name}")
                self._conn.execute("DELETE FROM fts_tables")
                self._conn.execute(f"DROP TABLE IF EXISTS {FORMER_TABLE}")
                self._conn.execute("DELETE FROM purge_pending WHERE fts LIKE 'tantivy:%'")  # whole tenants rebuilt
                if names:
                    self._conn.execute("DELETE FROM purge_pending")
                    self._conn.execute("INSERT OR IGNORE INTO purge_pending(fts) VALUES (?)", (FTS_DROPPED,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        tenants = {str(r[0]) for r in self._conn.execute("SELECT DISTINCT tenant FROM passages")}
        tenants |= {str(r[0]) for r in self._conn.execute("SELECT DISTINCT tenant FROM tantivy_shards")}
        for tenant in sorted(tenants):
            if not self._all_current(tenant):
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._repair(tenant)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            self._drop_stale_generations(tenant)

    def _shards(self, tenant: str) -> list[Shard]:
        return [
            Shard(int(lo), int(gen), int(stamp), str(analyzer), int(hi))
            for lo, gen, stamp, analyzer, hi in self._conn.execute(
                "SELECT lo, gen, stamp, analyzer, hi FROM tantivy_shards WHERE tenant = ? ORDER BY lo", (tenant,)
            )
        ]

    def _side(self, tenant: str, shard: Shard, *, create: bool) -> SideIndex | None:
        """The shard's index of its generation, opened once; None when it is not on disk (a reader
        whose snapshot predates a rebuild that has since removed it: no candidates, never an error)."""
        path = side_dir(self._root, tenant, self.analyzer, shard.lo, shard.gen)
        side = self._sides.get((tenant, shard.lo))
        if side is None or side.path != path:
            if not create and not (path / "meta.json").exists():
                return None
            side = SideIndex(path, self.analyzer)
            self._sides[(tenant, shard.lo)] = side
        return side

    def _current(self, tenant: str, shard: Shard) -> bool:
        """The shard's index is of this analyzer, on disk, and carries SQLite's stamp (after a reload)."""
        if shard.analyzer != self.analyzer:
            return False
        side = self._side(tenant, shard, create=False)
        if side is None:
            return False
        if side.stamp != shard.stamp:
            side.reload()
        return side.stamp == shard.stamp

    def _all_current(self, tenant: str) -> bool:
        shards = self._shards(tenant)
        if not shards:  # passages and no shard: built below; neither: nothing to do
            return self._conn.execute("SELECT 1 FROM passages WHERE tenant = ? LIMIT 1", (tenant,)).fetchone() is None
        return all(self._current(tenant, s) for s in shards)

    def _repair(self, tenant: str) -> None:
        """Under the write lock: a tenant without shards (or of another analyzer) built whole, else each
        shard not at SQLite's stamp (a crash fell between the two commits) rebuilt alone."""
        shards = self._shards(tenant)
        if not shards or any(s.analyzer != self.analyzer for s in shards):
            self._build_all(tenant, shards)
            return
        for i, shard in enumerate(shards):
            if not self._current(tenant, shard):
                self._rebuild(tenant, shards, i, i)

    def _drop_stale_generations(self, tenant: str) -> None:
        """Directories of the tenant SQLite does not name current, removed under SQLite's write lock
        (taken here unless the caller's write transaction holds it): a writer's rebuild in progress
        is a directory SQLite does not name yet, and must not be taken from under it."""
        if len(list(self._root.glob(f"{tenant_key(tenant)}-*"))) <= len(self._shards(tenant)):
            return
        own = not self._conn.in_transaction
        if own:
            self._conn.execute("BEGIN IMMEDIATE")
        try:
            keep = {
                side_dir(self._root, tenant, self.analyzer, s.lo, s.gen)
                for s in self._shards(tenant)
                if s.analyzer == self.analyzer
            }
            drop_other_generations(self._root, tenant, keep)
        finally:
            if own:
                self._conn.execute("COMMIT")

    def _new_side(self, tenant: str, lo: int, gen: int) -> SideIndex:
        """An empty directory for a shard's new generation (a crash may have left one of that name)."""
        path = side_dir(self._root, tenant, self.analyzer, lo, gen)
        shutil.rmtree(path, ignore_errors=True)
        side = SideIndex(path, self.analyzer)
        self._sides[(tenant, lo)] = side
        return side

    def _write_range(self, tenant: str, side: SideIndex, start: int, end: int | None, stamp: int) -> int:
        """Every passage of the tenant with start <= rid < end written into a fresh side index and
        committed with the stamp; the highest rid written (start - 1 when none). `+tenant` keeps SQLite
        on the rid range: on the (tenant, ...) index it walked and sorted the tenant's every row for each
        chunk, which made a one-shard purge at 1M cost the tenant's size after all (32.7 s)."""
        writer = side.writer()
        after, top = start - 1, start - 1
        try:
            while rids := [
                int(r[0])
                for r in self._conn.execute(
                    "SELECT rid FROM passages WHERE rid > ? AND rid < ? AND +tenant = ? ORDER BY rid LIMIT ?",
                    (after, end if end is not None else 2**62, tenant, CHUNK),
                )
            ]:
                for doc in self._documents(tenant, rids):
                    writer.add_document(doc)
                after = top = rids[-1]
            side.commit(writer, stamp)
        except BaseException:
            writer.rollback()
            raise
        return top

    def _rebuild(self, tenant: str, shards: list[Shard], first: int, last: int) -> None:
        """Shards first..last rebuilt from SQLite as one shard (first's `lo`, a generation above every
        one of the tenant's), inside the caller's write transaction; the old directories go once that
        has committed. Costs the passages of those shards only."""
        start, _ = bounds(shards, first)
        _, end = bounds(shards, last)
        gen = max(s.gen for s in shards) + 1
        lo = shards[first].lo
        side = self._new_side(tenant, lo, gen)
        top = self._write_range(tenant, side, start, end, 1)
        hi = max([top, *(s.hi for s in shards[first : last + 1])])
        self._conn.execute(
            "DELETE FROM tantivy_shards WHERE tenant = ? AND lo >= ? AND lo <= ?", (tenant, lo, shards[last].lo)
        )
        for merged in shards[first + 1 : last + 1]:  # their directories go with the old generations: let go
            self._sides.pop((tenant, merged.lo), None)
        self._conn.execute(
            "INSERT INTO tantivy_shards(tenant, lo, gen, stamp, analyzer, hi) VALUES (?, ?, ?, 1, ?, ?)",
            (tenant, lo, gen, self.analyzer, hi),
        )

    def _build_all(self, tenant: str, former: list[Shard]) -> None:
        """The tenant's shards written anew from SQLite, a new shard every `shard_docs` passages."""
        gen = max((s.gen for s in former), default=0) + 1
        self._conn.execute("DELETE FROM tantivy_shards WHERE tenant = ?", (tenant,))
        rids = [
            int(r[0]) for r in self._conn.execute("SELECT rid FROM passages WHERE tenant = ? ORDER BY rid", (tenant,))
        ]
        starts = rids[:: self.shard_docs] or [0]
        for k, lo in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else None
            side = self._new_side(tenant, lo, gen)
            hi = self._write_range(tenant, side, 0 if k == 0 else lo, end, 1)
            self._conn.execute(
                "INSERT INTO tantivy_shards(tenant, lo, gen, stamp, analyzer, hi) VALUES (?, ?, ?, 1, ?, ?)",
                (tenant, lo, gen, self.analyzer, hi),
            )

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
            self._deleted.setdefault(tenant, set()).update(rids)

    def _index_acl(self, tenant: str, rids: list[int], acl: Any) -> None:
        self._dirty.setdefault(tenant, set()).update(rids)

    def _before_commit(self) -> None:
        """Under SQLite's write lock, inside the transaction about to commit: each tenant's dirty rids
        rewritten from the rows it holds into the shards their ranges fall in (new passages fill the
        last shard, then start new ones), each shard touched committed with its next stamp and the
        stamps recorded; every shard that lost a document is marked for the purge. A tenant whose
        shards are not at SQLite's stamps (a crash fell between two commits) is repaired first."""
        dirty, self._dirty = self._dirty, {}
        deleted, self._deleted = self._deleted, {}
        try:
            for tenant, rids in sorted(dirty.items()):
                self._drop_stale_generations(tenant)
                if not self._all_current(tenant):
                    self._repair(tenant)
                shards = self._shards(tenant)
                if not shards:
                    self._build_all(tenant, [])
                    continue
                last = self._side(tenant, shards[-1], create=True)
                assert last is not None
                by_lo = {s.lo: s for s in shards}
                for lo, group in sorted(
                    assign(shards, max(int(last.searcher().num_docs) - 1, 0), rids, self.shard_docs).items()
                ):
                    self._write_shard(tenant, by_lo.get(lo), lo, group, max(s.gen for s in shards))
                shards = self._shards(tenant)
                for lo in sorted({shards[shard_of(shards, rid)].lo for rid in deleted.get(tenant, ())}):
                    self._conn.execute("INSERT OR IGNORE INTO purge_pending(fts) VALUES (?)", (purge_key(tenant, lo),))
        except BaseException:
            for tenant, rids in dirty.items():  # still to do: the transaction may yet commit
                self._dirty.setdefault(tenant, set()).update(rids)
            for tenant, rids in deleted.items():
                self._deleted.setdefault(tenant, set()).update(rids)
            raise

    def _write_shard(self, tenant: str, shard: Shard | None, lo: int, rids: list[int], gen: int) -> None:
        """These rids (all in one shard's range) rewritten from SQLite into the shard, or into a new
        shard starting at `lo` (`shard` None), and its stamp and highest rid recorded."""
        if shard is None:
            side = self._new_side(tenant, lo, gen)
            stamp, top = 1, -1
        else:
            found = self._side(tenant, shard, create=True)
            assert found is not None
            side, stamp, top = found, shard.stamp + 1, shard.hi
        writer = side.writer()
        try:
            for rid in rids:
                writer.delete_documents_by_term("rid", rid)
            for doc in self._documents(tenant, rids):
                writer.add_document(doc)
            side.commit(writer, stamp)
        except BaseException:
            writer.rollback()
            raise
        self._conn.execute(
            "INSERT OR REPLACE INTO tantivy_shards(tenant, lo, gen, stamp, analyzer, hi) VALUES (?, ?, ?, ?, ?, ?)",
            (tenant, lo, shard.gen if shard else gen, stamp, self.analyzer, max(top, *rids)),
        )

    # ---- searching: candidates from Tantivy, the exact check in SQLite (the parent's) -------

    def _fetcher(self, query: str, access: AccessFilter) -> Callable[[int], list[Candidate]] | None:
        if self._dirty:  # writes of an open batch: into Tantivy first (a rollback is caught by the stamp)
            self._before_commit()
        sides: list[SideIndex] = []
        for shard in self._shards(access.tenant):
            if shard.analyzer != self.analyzer:
                return None
            side = self._side(access.tenant, shard, create=False)
            if side is None:  # removed by a rebuild since this snapshot: fewer candidates, never more
                continue
            if side.stamp != shard.stamp:  # another process committed since: see it (the exact check decides)
                side.reload()
            sides.append(side)
        if not sides:
            return None
        words = query_terms(query)
        w = self.weights
        weights = {"title": w.title, "heading": w.heading, "text": w.text}

        best = candidates(sides, words, weights, access.entries)

        def fetch(n: int) -> list[Candidate]:
            return [Candidate(rid, score) for score, rid in best(n)]

        return fetch

    # ---- upkeep ------------------------------------------------------------------------------

    def merge_step(self, pages: int = 256) -> bool:
        """Nothing to do between batches: each commit waits for the merges it started."""
        return False

    def purge(self) -> dict[str, object]:
        """Make deletions physical: every shard that lost documents rebuilt from SQLite as a new
        generation (merged into the shard before it when both together are small) and the old
        directories removed; then SQLite's log checkpointed and truncated."""
        with self._lock:
            self.flush()
            pending = [str(r[0]) for r in self._conn.execute("SELECT fts FROM purge_pending").fetchall()]
            rebuilt = 0
            for name in pending:
                key = parse_purge_key(name)
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    if key is not None:
                        rebuilt += self._purge_shard(*key)
                    self._conn.execute("DELETE FROM purge_pending WHERE fts = ?", (name,))
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                if key is not None:
                    self._drop_stale_generations(key[0])
            busy, pages, moved = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return {"rebuilt": rebuilt, "checkpoint_complete": busy == 0, "wal_pages": pages, "moved": moved}

    def _purge_shard(self, tenant: str, lo: int) -> int:
        """Rebuild the shard starting at `lo` (1), or nothing when it is gone (merged, rebuilt whole: 0)."""
        shards = self._shards(tenant)
        i = next((k for k, s in enumerate(shards) if s.lo == lo), None)
        if i is None:
            return 0
        if not all(self._current(tenant, s) for s in shards[max(i - 1, 0) : i + 1]):
            self._repair(tenant)
            return 1
        live = [self.shard_docs] * len(shards)  # only this shard's and the one before's counts matter
        for k in range(max(i - 1, 0), i + 1):
            side = self._side(tenant, shards[k], create=False)
            live[k] = max(int(side.searcher().num_docs) - 1, 0) if side else self.shard_docs
        first = merge_target(shards, i, live, self.shard_docs)
        self._rebuild(tenant, shards, first, i)
        if first < i:  # the shard before took this one's range: its own purge, if pending, is done too
            self._conn.execute("DELETE FROM purge_pending WHERE fts = ?", (purge_key(tenant, shards[first].lo),))
        return 1

    def close(self) -> None:
        with self._lock:
            self._sides.clear()
        super().close()
