"""Embedded lexical index: SQLite FTS5 with bm25(), one FTS table per tenant.

One FTS table per tenant keeps BM25's collection statistics (document frequencies, average
length) from mixing tenants, the same reason the Elasticsearch adapter keeps one index per
tenant. The permission filter runs inside the FTS5 index (principal tokens, indexer.fts_acl) and
then exactly on the few best rows, so a denied row is never returned or cached; it only
contributes to its own tenant's statistics, as in any index.

Title, heading path and body are three FTS columns weighted apart (`FieldWeights`): a section
heading names the topic of its passages, and the page title does too, but a title is shared by
every passage of the page (and often ends in a site-wide suffix), so it gets its own column, its
own length normalisation and a weight of its own instead of inflating the heading's. The file's
layout (tables, rows, and the migrations of older homes) is indexer.sqlite_fts_schema.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from indexer.fts_acl import (
    DENSE_SHARE,
    Candidate,
    ShareSampler,
    Verified,
    acl_tokens,
    filtered_match,
    top_verified,
    words_only,
)
from indexer.ports import (
    DEFAULT_FIELD_WEIGHTS,
    DEFAULT_LEXICAL_ANALYZER,
    Durability,
    FieldWeights,
    Hit,
    LexicalAnalyzer,
)
from indexer.sqlite_fts_reads import StoreReads
from indexer.sqlite_fts_schema import (
    TOKENIZERS,
    acl_rows,
    connect,
    create_fts,
    drop_side_index,
    fts_row,
    migrate_grants,
    migrate_layout,
    read_hit,
    restore_fts,
    row_hit,
    side_index_dir,
    since_json,
)
from schemas._time import to_epoch_ms
from schemas.passages import Passage
from schemas.principal import AccessFilter
from schemas.text import query_terms


def _match_expression(query: str) -> str | None:
    """Each word quoted and OR-ed: user text can never become FTS5 syntax (NEAR, column:, *)."""
    terms = query_terms(query)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


class SqliteLexicalIndex(StoreReads):
    """`deferred=True` is the batched write path (the embedded worker): every write joins one
    transaction that `flush` commits, so a batch is one commit and FTS5 writes one segment per
    batch instead of one per document. Automatic merging is then off and `merge_step`, called
    when the worker is idle, merges segments in the background. A failed write rolls back to its
    own savepoint, never the batch; closing without flush drops unflushed writes (redelivery
    re-applies them). Without `deferred`, every call commits on its own, as before.
    """

    name = "sqlite-fts5"
    combines_writes = False
    durability: Durability = "flush"

    def __init__(
        self,
        path: Path,
        weights: FieldWeights = DEFAULT_FIELD_WEIGHTS,
        *,
        deferred: bool = False,
        analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER,
    ) -> None:
        if analyzer not in TOKENIZERS:
            raise ValueError(f"unknown lexical analyzer {analyzer!r} (one of {', '.join(TOKENIZERS)})")
        self.weights = weights
        self.analyzer: LexicalAnalyzer = analyzer
        self.path = path
        self._conn = connect(path, deferred=deferred)
        self._lock = threading.RLock()
        self.deferred = deferred
        self._merge_pending: set[str] = set()
        self._known_fts: set[str] = set()
        self.shares = ShareSampler()
        with self._lock:
            migrate_layout(self._conn, self.analyzer, lambda tenant: self._fts(tenant, create=True))
            migrate_grants(self._conn)
        self._open_text_index()

    def _open_text_index(self) -> None:
        """The FTS5 tables are the text index: automatic merging set, and a side index another engine
        left beside the file (indexer.tantivy_lexical) removed, since nothing keeps it current now."""
        if side_index_dir(self.path).exists():  # tables first, then the side index: a crash between redoes both
            restore_fts(self._conn, lambda tenant: self._fts(tenant, create=True))
            drop_side_index(self.path)
        for (name,) in self._conn.execute("SELECT name FROM fts_tables").fetchall():
            self._known_fts.add(str(name))
            self._set_automerge(str(name))

    def _set_automerge(self, fts: str) -> None:
        """Automatic merging off on the batched path (merge_step merges instead); written only when it
        differs, so opening an index (a `status` beside a running owner) writes nothing."""
        wanted = 0 if self.deferred else 4
        row = self._conn.execute(f"SELECT v FROM {fts}_config WHERE k = 'automerge'").fetchone()
        if (int(row[0]) if row else 4) != wanted:
            self._conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('automerge', ?)", (wanted,))
        if self.deferred:
            self._merge_pending.add(fts)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write: its own transaction, or (deferred) a savepoint inside the batch's transaction."""
        with self._lock:
            if not self.deferred:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                    self._before_commit()
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                return
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute("SAVEPOINT write")
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK TO write")
                    self._conn.execute("RELEASE write")
                raise
            self._conn.execute("RELEASE write")

    def flush(self) -> None:
        with self._lock:
            if self._conn.in_transaction:
                self._before_commit()
                self._conn.execute("COMMIT")
                if self.deferred:
                    self._merge_pending.update(self._known_fts)

    def _before_commit(self) -> None:
        """Inside the write transaction, just before it commits: FTS5 needs nothing (it is in it)."""

    def merge_step(self, pages: int = 256) -> bool:
        """Merge some FTS5 segments (about `pages` pages of work); False once nothing is left to merge.

        Only between batches: it commits on its own, so it never runs inside a batch's transaction.
        """
        with self._lock:
            if self._conn.in_transaction:
                return True
            for fts in sorted(self._merge_pending):
                before = self._conn.total_changes
                try:
                    self._conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', ?)", (pages,))
                except sqlite3.OperationalError:  # a table whose creating batch was rolled back
                    self._merge_pending.discard(fts)
                    self._known_fts.discard(fts)
                    continue
                if self._conn.total_changes - before >= 2:
                    return True
                self._merge_pending.discard(fts)
            return False

    def _fts(self, tenant: str, create: bool) -> str | None:
        row = self._conn.execute("SELECT name FROM fts_tables WHERE tenant = ?", (tenant,)).fetchone()
        if row:
            return str(row[0])
        if not create:
            return None
        name = create_fts(self._conn, tenant, self.analyzer)
        self._set_automerge(name)
        self._known_fts.add(name)
        return name

    def upsert(self, passages: Sequence[Passage]) -> None:
        if not passages:
            return
        with self._writing():
            for p in passages:
                self._delete_rows(p.tenant, "passage_id = ?", (p.passage_id,))
                cur = self._conn.execute(
                    "INSERT INTO passages(passage_id, tenant, doc_id, version, anchor, acl, acl_since, effective_ms,"
                    " superseded_ms, heading_path, title, text, source_url, chunker_version)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        p.passage_id,
                        p.tenant,
                        p.doc_id,
                        p.version,
                        p.anchor,
                        json.dumps(list(p.acl)),
                        since_json(p.acl_since),
                        to_epoch_ms(p.effective_from),
                        to_epoch_ms(p.superseded_on) if p.superseded_on else None,
                        json.dumps(list(p.heading_path)),
                        p.title,
                        p.text,
                        p.source_url,
                        p.chunker_version,
                    ),
                )
                rid = int(cur.lastrowid or 0)
                self._conn.executemany(
                    "INSERT INTO passage_acl(rid, entry, since_ms) VALUES (?, ?, ?)", acl_rows(rid, p.acl, p.acl_since)
                )
                self._index_passage(rid, p)

    def _index_passage(self, rid: int, p: Passage) -> None:
        """A row just written to passages and passage_acl, into the text index (same transaction)."""
        fts = self._fts(p.tenant, create=True)
        self._conn.execute(
            f"INSERT INTO {fts}(rowid, title, heading, text, principals) VALUES (?, ?, ?, ?, ?)", (rid, *fts_row(p))
        )

    def _unindex(self, tenant: str, rids: list[int]) -> None:
        """Rows about to be deleted, out of the text index; the FTS5 index keeps their terms until its
        segments are merged (this SQLite, 3.40, predates FTS5's secure-delete): `purge` merges, from a
        durable queue."""
        fts = self._fts(tenant, create=False)
        if fts and rids:
            for rid in rids:
                self._conn.execute(f"DELETE FROM {fts} WHERE rowid = ?", (rid,))
            self._conn.execute("INSERT OR IGNORE INTO purge_pending(fts) VALUES (?)", (fts,))

    def _index_acl(self, tenant: str, rids: list[int], acl: Sequence[str]) -> None:
        """New principal tokens, in the transaction that rewrote passage_acl: no reader sees tokens
        wider than the exact table."""
        fts = self._fts(tenant, create=False)
        if fts:
            tokens = acl_tokens(acl)
            for rid in rids:
                self._conn.execute(f"UPDATE {fts} SET principals = ? WHERE rowid = ?", (tokens, rid))

    def _delete_rows(self, tenant: str, where: str, args: tuple[object, ...]) -> int:
        rids = [
            int(r[0])
            for r in self._conn.execute(f"SELECT rid FROM passages WHERE tenant = ? AND {where}", (tenant, *args))
        ]
        self._unindex(tenant, rids)
        for rid in rids:
            self._conn.execute("DELETE FROM passage_acl WHERE rid = ?", (rid,))
            self._conn.execute("DELETE FROM passages WHERE rid = ?", (rid,))
        return len(rids)

    def _delete_where(self, tenant: str, where: str, args_list: Sequence[tuple[object, ...]]) -> None:
        with self._writing():
            for args in args_list:
                self._delete_rows(tenant, where, args)

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None:
        self._delete_where(tenant, "passage_id = ?", [(pid,) for pid in passage_ids])

    def delete_doc(self, tenant: str, doc_id: str, listed: Sequence[str] | None = None) -> None:
        """One statement by doc_id, whatever `listed` says (no listing to save here)."""
        self._delete_where(tenant, "doc_id = ?", [(doc_id,)])

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None:
        ms = to_epoch_ms(superseded_on)
        with self._writing():
            self._conn.execute(
                "UPDATE passages SET superseded_ms = ? WHERE tenant = ? AND doc_id = ? AND version < ?"
                " AND (superseded_ms IS NULL OR superseded_ms > ?)",
                (ms, tenant, doc_id, before_version, ms),
            )

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None:
        with self._writing():
            rids = [
                int(r[0])
                for r in self._conn.execute(
                    "SELECT rid FROM passages WHERE tenant = ? AND doc_id = ?", (tenant, doc_id)
                )
            ]
            self._conn.execute(
                "UPDATE passages SET acl = ?, acl_since = ? WHERE tenant = ? AND doc_id = ?",
                (json.dumps(list(acl)), since_json(since), tenant, doc_id),
            )
            for rid in rids:
                self._conn.execute("DELETE FROM passage_acl WHERE rid = ?", (rid,))
                self._conn.executemany(
                    "INSERT INTO passage_acl(rid, entry, since_ms) VALUES (?, ?, ?)", acl_rows(rid, acl, since)
                )
            self._index_acl(tenant, rids, acl)

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        """The ACL filters inside FTS5 (principal tokens), so only rows the principal may be named on are
        scored; the best are then verified by the exact check (indexer.fts_acl.top_verified)."""
        if not query_terms(query) or not access.entries or limit <= 0:
            return []
        with self._lock:
            own = not self._conn.in_transaction
            if own:  # one snapshot for every round, its verification and the rows read
                self._conn.execute("BEGIN")
            try:
                fetch = self._fetcher(query, access)
                if fetch is None:
                    return []
                found = top_verified(fetch, lambda c: self._verify(access, c), limit, floor)
                rows = self._rows([v.rid for v in found])
            finally:
                if own:
                    self._conn.execute("COMMIT")
            return [read_hit(rows[v.rid] | {"score": v.score}) for v in found]

    def _fetcher(self, query: str, access: AccessFilter) -> Callable[[int], list[Candidate]] | None:
        """The candidate stage: `fetch(n)`, the n best rows the index holds for the words and the
        principal's tokens, by descending score; None when the tenant has no index."""
        expression = _match_expression(query)
        fts = self._fts(access.tenant, create=False)
        if fts is None or expression is None:
            return None
        if self.shares.share(self._conn, fts, access.entries) >= DENSE_SHARE:
            match = words_only(expression)
        else:
            match = filtered_match(expression, access.entries)
        w = self.weights
        rank = f"-bm25({fts}, {w.title:g}, {w.heading:g}, {w.text:g}, 0)"

        def fetch(n: int) -> list[Candidate]:
            rows = self._conn.execute(
                f"SELECT rowid, {rank} AS score FROM {fts} WHERE {fts} MATCH ? ORDER BY score DESC LIMIT ?",
                (match, n),
            ).fetchall()
            return [Candidate(int(rid), float(score)) for rid, score in rows]

        return fetch

    def _verify(self, access: AccessFilter, candidates: list[Candidate]) -> list[Verified]:
        """The exact check (tenant, validity dates, an entry granted no later than as_of) on candidates:
        reads only ids, so rows the loop never returns cost no text. `+p.tenant` keeps the planner on
        the rowid lookups: on the (tenant, ...) index it walked every row of the tenant (360 ms at 1M)."""
        as_of = to_epoch_ms(access.as_of)
        acl_marks = ",".join("?" for _ in access.entries)
        scores = {c.rid: c.score for c in candidates}
        out: list[Verified] = []
        for start in range(0, len(candidates), 500):
            chunk = [c.rid for c in candidates[start : start + 500]]
            cur = self._conn.execute(
                "SELECT p.rid, p.passage_id FROM passages p"
                f" WHERE p.rid IN ({','.join('?' for _ in chunk)}) AND +p.tenant = ?"
                " AND p.effective_ms <= ? AND (p.superseded_ms IS NULL OR p.superseded_ms > ?)"
                f" AND EXISTS (SELECT 1 FROM passage_acl a WHERE a.rid = p.rid AND a.entry IN ({acl_marks})"
                " AND a.since_ms <= ?)",
                (*chunk, access.tenant, as_of, as_of, *access.entries, as_of),
            )
            out.extend(Verified(int(rid), scores[int(rid)], str(pid)) for rid, pid in cur.fetchall())
        return out

    def _rows(self, rids: list[int]) -> dict[int, dict[str, object]]:
        if not rids:
            return {}
        cur = self._conn.execute(f"SELECT p.* FROM passages p WHERE p.rid IN ({','.join('?' for _ in rids)})", rids)
        cols = [d[0] for d in cur.description]
        return {int(str(r["rid"])): r for r in (dict(zip(cols, row, strict=True)) for row in cur.fetchall())}

    def delete_superseded(self, before: datetime) -> list[Passage]:
        """Delete every passage superseded before the instant (retention); returns what was deleted."""
        ms = to_epoch_ms(before)
        with self._lock:
            cur = self._conn.execute(
                "SELECT p.*, 0.0 AS score FROM passages p WHERE p.superseded_ms IS NOT NULL AND p.superseded_ms < ?",
                (ms,),
            )
            cols = [d[0] for d in cur.description]
            doomed = [row_hit(dict(zip(cols, row, strict=True))).passage for row in cur.fetchall()]
        by_tenant: dict[str, list[str]] = {}
        for p in doomed:
            by_tenant.setdefault(p.tenant, []).append(p.passage_id)
        for tenant, ids in by_tenant.items():
            self.delete_passages(tenant, ids)
        return doomed

    def purge(self) -> dict[str, object]:
        """Make deletions physical: merge every FTS5 index that lost rows into one segment (which drops
        the deleted rows' terms), then checkpoint and truncate the write-ahead log. With secure_delete
        on, no page of the file keeps a deleted passage's text or terms afterwards. Between batches
        only: a batch still open is flushed first."""
        with self._lock:
            self.flush()
            tables = [str(r[0]) for r in self._conn.execute("SELECT fts FROM purge_pending").fetchall()]
            for fts in tables:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
                    self._conn.execute("DELETE FROM purge_pending WHERE fts = ?", (fts,))
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            busy, pages, moved = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return {"fts_merged": len(tables), "checkpoint_complete": busy == 0, "wal_pages": pages, "moved": moved}

    def purge_pending(self) -> int:
        """FTS5 indexes with deleted rows not merged away yet (certificates: 0 after a purge)."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM purge_pending").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
