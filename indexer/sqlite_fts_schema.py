"""The on-disk layout of the embedded lexical index (indexer.sqlite_fts): tables, FTS table names,
rows to and from passages, and the migrations that bring an older home up to this layout.

Kept apart from the store so the store reads as what it does (write, delete, search, purge) and
every question of "what is in the file, and how did an older file become it" has one place.
Tables made before the title had a column (`heading, text`) are rebuilt from the `passages` table
on open, and so are tables made with another analyzer (`LexicalAnalyzer`: the tokenizer is part of
the table's name). Homes written before grants had instants get them, failing closed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from indexer.fts_acl import acl_token, acl_tokens
from indexer.ports import Hit, LexicalAnalyzer
from schemas._memo import TextMemo
from schemas._time import from_epoch_ms, to_epoch_ms
from schemas.passages import Passage

SCHEMA = """
CREATE TABLE IF NOT EXISTS passages (
    rid INTEGER PRIMARY KEY,
    passage_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    anchor TEXT NOT NULL,
    acl TEXT NOT NULL,
    effective_ms INTEGER NOT NULL,
    superseded_ms INTEGER,
    heading_path TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    source_url TEXT NOT NULL,
    chunker_version TEXT NOT NULL,
    UNIQUE (tenant, passage_id)
);
CREATE INDEX IF NOT EXISTS passages_doc ON passages(tenant, doc_id, version);
CREATE TABLE IF NOT EXISTS passage_acl (
    rid INTEGER NOT NULL,
    entry TEXT NOT NULL,
    since_ms INTEGER NOT NULL DEFAULT -4611686018427387904,
    PRIMARY KEY (rid, entry)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fts_tables (tenant TEXT PRIMARY KEY, name TEXT NOT NULL);
"""

FTS_COLUMNS = "title, heading, text, principals"
"""Column layout of every FTS table; a table with another layout is rebuilt (see `migrate_layout`).
`principals` holds the ACL tokens the query filters on inside the index (indexer.fts_acl)."""


ALWAYS_MS = -(2**62)
"""`since_ms` of an entry granted from the beginning (no instant recorded)."""


TOKENIZERS: dict[LexicalAnalyzer, tuple[str, str]] = {
    "english": ("fts4p_", "porter unicode61"),
    "standard": ("fts4s_", "unicode61"),
}
"""Table name prefix and FTS5 tokenizer of each analyzer. The prefix names the layout (with the
principals column) and the analyzer: a table of an older layout or another analyzer is rebuilt."""


def connect(path: Path, *, deferred: bool) -> sqlite3.Connection:
    """The index's connection with its tables made: WAL, FULL sync on the batched path (a batch is one
    commit, so it can afford it), and freed pages overwritten so a deleted passage's text does not
    linger in free space."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.create_function("acl_token", 1, acl_token, deterministic=True)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL" if deferred else "PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA secure_delete=ON")
    conn.executescript(SCHEMA)
    conn.execute("CREATE TABLE IF NOT EXISTS purge_pending (fts TEXT PRIMARY KEY) WITHOUT ROWID")
    return conn


def fts_name(tenant: str, analyzer: LexicalAnalyzer) -> str:
    return TOKENIZERS[analyzer][0] + hashlib.sha1(tenant.encode()).hexdigest()[:16]


def create_fts(conn: sqlite3.Connection, tenant: str, analyzer: LexicalAnalyzer) -> str:
    """Create the tenant's FTS table (this layout, this analyzer) and record it in `fts_tables`."""
    name = fts_name(tenant, analyzer)
    tokenizer = TOKENIZERS[analyzer][1]
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5({FTS_COLUMNS}, tokenize='{tokenizer}')")
    conn.execute("INSERT OR IGNORE INTO fts_tables(tenant, name) VALUES (?, ?)", (tenant, name))
    return name


def acl_rows(rid: int | None, acl: Sequence[str], since: Mapping[str, datetime]) -> list[tuple[object, ...]]:
    return [(rid, e, to_epoch_ms(since[e]) if e in since else ALWAYS_MS) for e in sorted(set(acl))]


def since_json(since: Mapping[str, datetime]) -> str:
    return json.dumps({e: to_epoch_ms(t) for e, t in sorted(since.items())}, separators=(",", ":"))


def fts_row(p: Passage) -> tuple[str, str, str, str]:
    return (p.title, " ".join(p.heading_path), p.text, acl_tokens(p.acl))


def row_hit(row: dict[str, object]) -> Hit:
    """A `passages` row (with a `score` column) back as the passage it stores. Built without validation
    (`model_construct`): the row was written from a validated Passage, field by field as read here, and
    validating it again cost 0.2 ms a row, 10-20 ms of a fused search's 100 rows."""
    superseded = row["superseded_ms"]
    passage = Passage.model_construct(
        passage_id=str(row["passage_id"]),
        doc_id=str(row["doc_id"]),
        version=int(str(row["version"])),
        anchor=str(row["anchor"]),
        tenant=str(row["tenant"]),
        acl=tuple(json.loads(str(row["acl"]))),
        acl_since={e: from_epoch_ms(int(ms)) for e, ms in json.loads(str(row.get("acl_since") or "{}")).items()},
        effective_from=from_epoch_ms(int(str(row["effective_ms"]))),
        superseded_on=from_epoch_ms(int(str(superseded))) if superseded is not None else None,
        heading_path=tuple(json.loads(str(row["heading_path"]))),
        title=str(row["title"]),
        text=str(row["text"]),
        source_url=str(row["source_url"]),
        chunker_version=str(row["chunker_version"]),
    )
    return Hit(passage=passage, score=float(str(row["score"])))


ROW_FIELDS = (
    "passage_id", "doc_id", "version", "anchor", "tenant", "acl", "acl_since", "effective_ms", "superseded_ms",
    "heading_path", "title", "text", "source_url", "chunker_version",
)  # fmt: skip
"""Every column row_hit reads: together, a memo key that determines the passage."""

_READ: TextMemo[tuple[object, ...], Passage] = TextMemo(ttl_s=30.0, max_entries=16_384)


def read_hit(row: dict[str, object]) -> Hit:
    """row_hit for the query paths (search, passages by id), with the passage memoised by the row itself.

    Why: a search turned ~100 rows into passages (three JSON documents and a model each), mostly the same
    rows question after question (issue 22, answers under load). Why it cannot widen access: the key is
    every column the passage is built from (its tenant, ACL, grant instants and validity included), so
    a hit is exactly the passage this row would give, and the row was read under the asker's own
    permission filter before the memo was looked at; a changed row (new ACL, superseded) is another key.
    Entries live at most 30 s (schemas._memo), within the purge bound, like the process's other memos."""
    key = tuple(row.get(name) for name in ROW_FIELDS)
    passage = _READ.get(key, lambda: row_hit(row).passage)
    return Hit(passage=passage, score=float(str(row["score"])))


def migrate_layout(conn: sqlite3.Connection, analyzer: LexicalAnalyzer, create: Callable[[str], object]) -> None:
    """Rebuild FTS tables of an older layout or analyzer from the passages table, in one transaction.
    `create(tenant)` makes the tenant's new table the way the store makes any (its bookkeeping too)."""
    rows = conn.execute("SELECT tenant, name FROM fts_tables").fetchall()
    stale = [(str(t), str(n)) for t, n in rows if str(n) != fts_name(str(t), analyzer)]
    if not stale:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for tenant, old in stale:
            new = fts_name(tenant, analyzer)
            conn.execute(f"DROP TABLE IF EXISTS {old}")
            conn.execute("DELETE FROM fts_tables WHERE tenant = ?", (tenant,))
            create(tenant)
            fill_fts(conn, tenant, new)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def fill_fts(conn: sqlite3.Connection, tenant: str, name: str) -> None:
    """The tenant's FTS table filled from the passages table. The tokens come from passage_acl, the
    table the exact check reads, never from the JSON copy: the index filter can then only be as wide
    as the exact one."""
    conn.execute(
        f"INSERT INTO {name}(rowid, title, heading, text, principals)"
        " SELECT rid, title, (SELECT group_concat(value, ' ') FROM json_each(heading_path)), text,"
        " (SELECT coalesce(group_concat(acl_token(a.entry), ' '), '') FROM passage_acl a"
        "  WHERE a.rid = passages.rid)"
        " FROM passages WHERE tenant = ?",
        (tenant,),
    )


def restore_fts(conn: sqlite3.Connection, create: Callable[[str], str | None]) -> None:
    """Tenants with passages and no FTS table (a home another text index engine served, which dropped
    them): their tables made and filled again from the passages table, in one transaction."""
    tenants = [str(r[0]) for r in conn.execute("SELECT DISTINCT tenant FROM passages")]
    missing = [t for t in tenants if conn.execute("SELECT 1 FROM fts_tables WHERE tenant = ?", (t,)).fetchone() is None]
    if not missing:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for tenant in missing:
            name = create(tenant)
            if name is not None:
                fill_fts(conn, tenant, name)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def side_index_dir(path: Path) -> Path:
    """Where a side text index (indexer.tantivy_lexical) of the lexical file at `path` lives."""
    return path.with_name(path.name + ".tantivy")


def text_index_in(path: Path) -> Literal["fts5", "tantivy"] | None:
    """Which text index the lexical file at `path` was last opened with, from the files alone (read
    only): None without a file; Tantivy when its side index is there, or when the file records Tantivy
    shards and no FTS5 table (a Tantivy home without passages has no side index yet); else FTS5."""
    if not path.exists():
        return None
    if side_index_dir(path).is_dir():
        return "tantivy"
    conn = sqlite3.connect(path, timeout=30)
    try:
        tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        fts = int(conn.execute("SELECT count(*) FROM fts_tables").fetchone()[0]) if "fts_tables" in tables else 0
    finally:
        conn.close()
    return "tantivy" if "tantivy_shards" in tables and fts == 0 else "fts5"


def drop_side_index(path: Path) -> None:
    """Remove a side index nothing keeps current any more (the home went back to FTS5): it holds no
    text, but its postings name the words of passages deleted since."""
    side = side_index_dir(path)
    if side.exists():
        shutil.rmtree(side)


def migrate_grants(conn: sqlite3.Connection) -> None:
    """Homes written before grants had instants: every entry of a document is taken as granted from
    its newest version's effective date, so no older version is readable as of an earlier instant
    by anyone until the document's next event records the true instants (fails closed)."""
    columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(passages)")}
    if "acl_since" in columns:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE passages ADD COLUMN acl_since TEXT")
        acl_columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(passage_acl)")}
        if "since_ms" not in acl_columns:
            conn.execute(f"ALTER TABLE passage_acl ADD COLUMN since_ms INTEGER NOT NULL DEFAULT {ALWAYS_MS}")
        conn.execute(
            "UPDATE passage_acl SET since_ms = (SELECT MAX(q.effective_ms) FROM passages p"
            " JOIN passages q ON q.tenant = p.tenant AND q.doc_id = p.doc_id WHERE p.rid = passage_acl.rid)"
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
