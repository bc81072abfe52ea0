"""The Tantivy candidate stage (indexer.tantivy_lexical): against filtering and sorting everything, seen
from a second reader at once, only ever narrowing when stale, rebuilt on a stamp that does not match,
deleted words gone after a purge, and a home moved between FTS5 and Tantivy both ways."""

from __future__ import annotations

import logging
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.tantivy_lexical import TantivyLexicalIndex
from indexer.tantivy_shards import TABLE
from indexer.tantivy_side import LAYOUT, STAMP_RID, tenant_key
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff",), NOW)
WORDS = ["alpha", "bravo", "charlie", "delta", "echo"]
ENTRIES = ["group:staff", "group:hr", "user:ann", "user:bob"]


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.passage_id for h in hits]


docs_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),  # body words
        st.lists(st.sampled_from(ENTRIES), max_size=2, unique=True),  # acl
        st.sampled_from(["acme", "globex"]),  # tenant
        st.booleans(),  # superseded before now
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=docs_strategy,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    principal=st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=2, unique=True),
    revoke=st.sets(st.integers(0, 24), max_size=5),
    delete=st.sets(st.integers(0, 24), max_size=5),
    limit=st.integers(1, 30),
)
def test_search_equals_filtering_then_sorting_everything(
    tmp_path_factory: Any,
    docs: list[tuple[list[str], list[str], str, bool]],
    query: list[str],
    principal: list[str],
    revoke: set[int],
    delete: set[int],
    limit: int,
) -> None:
    """Every admitted passage holding a query word and none other, best first, after revocations and deletions."""
    index = TantivyLexicalIndex(tmp_path_factory.mktemp("tv") / "lexical.db")
    try:
        passages = [
            make_passage(
                " ".join(words),
                doc_id=f"d{i}.md",
                acl=tuple(acl),
                tenant=tenant,
                superseded_on=NOW - timedelta(days=1) if old else None,
            )
            for i, (words, acl, tenant, old) in enumerate(docs)
        ]
        index.upsert(passages)
        live = dict(enumerate(passages))
        for i in sorted(revoke & set(live)):
            index.set_acl(live[i].tenant, live[i].doc_id, ["user:nobody"], {})
            live[i] = live[i].model_copy(update={"acl": ("user:nobody",)})
        for i in sorted(delete & set(live)):
            index.delete_doc(live[i].tenant, live[i].doc_id)
            del live[i]
        access = AccessFilter("acme", tuple(principal), NOW)
        expected = {
            p.passage_id
            for p in live.values()
            if p.tenant == "acme"
            and set(p.acl) & set(principal)
            and p.superseded_on is None
            and set(p.text.split()) & set(query)
        }
        hits = index.search(" ".join(query), access, limit, 0.0)
        assert len(hits) == min(limit, len(expected))
        assert set(ids(hits)) <= expected
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert set(ids(index.search(" ".join(query), access, 100, 0.0))) == expected
    finally:
        index.close()


def test_a_second_reader_sees_revocation_grant_and_deletion_at_once(tmp_path: Path) -> None:
    """The owner writes in batches (deferred, as the embedded worker does); a reader opened beside it
    sees each flushed change at its next search, without reopening."""
    path = tmp_path / "lexical.db"
    owner = TantivyLexicalIndex(path, deferred=True)
    reader = TantivyLexicalIndex(path)
    try:
        owner.upsert([make_passage("quarterly salary review", doc_id="pay.md", acl=("group:staff",))])
        owner.flush()
        assert len(reader.search("salary", STAFF, 10, 0.0)) == 1
        owner.set_acl("acme", "pay.md", ["group:hr"], {})
        owner.flush()
        assert reader.search("salary", STAFF, 10, 0.0) == []
        hr = AccessFilter("acme", ("group:hr",), NOW)
        assert len(reader.search("salary", hr, 10, 0.0)) == 1  # a grant, through the side index's reload
        owner.delete_doc("acme", "pay.md")
        owner.flush()
        assert reader.search("salary", hr, 10, 0.0) == []
        owner.purge()  # a new generation; the reader follows SQLite's pointer to it
        owner.upsert([make_passage("salary bands", doc_id="bands.md", acl=("group:hr",))])
        owner.flush()
        assert ids(reader.search("salary", hr, 10, 0.0)) == ["bands.md@1#root-1"]
    finally:
        reader.close()
        owner.close()


class _SqliteOnly(TantivyLexicalIndex):
    """A writer whose Tantivy commits are lost while SQLite's go through (with their stamps)."""

    def _before_commit(self) -> None:
        for tenant in self._dirty:
            self._conn.execute("UPDATE tantivy_shards SET stamp = stamp + 1 WHERE tenant = ?", (tenant,))
        self._dirty.clear()
        self._deleted.clear()


class _NoCheckOnOpen(TantivyLexicalIndex):
    """A reader that searches the side index as it finds it (no rebuild on open)."""

    def _open_text_index(self) -> None:
        self._conn.execute(TABLE)


def test_a_stale_side_index_only_narrows(tmp_path: Path) -> None:
    """SQLite revokes, deletes and supersedes while Tantivy still holds the old postings and tokens: the
    exact check in SQLite drops every such row; a new passage Tantivy never saw is simply not found."""
    path = tmp_path / "lexical.db"
    first = TantivyLexicalIndex(path)
    first.upsert(
        [
            make_passage("falcon revoked", doc_id="a.md"),
            make_passage("falcon deleted", doc_id="b.md"),
            make_passage("falcon superseded", doc_id="c.md"),
            make_passage("falcon kept", doc_id="d.md"),
        ]
    )
    first.close()
    stale = _SqliteOnly(path)
    stale.set_acl("acme", "a.md", ["group:board"], {})
    stale.delete_doc("acme", "b.md")
    stale.supersede("acme", "c.md", 2, NOW - timedelta(days=1))
    stale.upsert([make_passage("falcon unseen", doc_id="e.md")])
    stale.close()
    reader = _NoCheckOnOpen(path)
    try:
        assert ids(reader.search("falcon", STAFF, 10, 0.0)) == ["d.md@1#root-1"]
    finally:
        reader.close()
    rebuilt = TantivyLexicalIndex(path)  # the stamps differ: rebuilt from SQLite on open
    try:
        assert sorted(ids(rebuilt.search("falcon", STAFF, 10, 0.0))) == ["d.md@1#root-1", "e.md@1#root-1"]
    finally:
        rebuilt.close()


def test_a_side_index_ahead_of_sqlite_is_rebuilt_on_open(tmp_path: Path) -> None:
    """Tantivy committed and the process died before SQLite did: the stamps differ and the next open
    rebuilds from SQLite, so a passage the lost commit removed from Tantivy is found again."""
    path = tmp_path / "lexical.db"
    index = TantivyLexicalIndex(path)
    index.upsert([make_passage("heron nesting", doc_id="h.md")])
    (lo, gen, stamp) = index._conn.execute("SELECT lo, gen, stamp FROM tantivy_shards").fetchone()
    side = index._sides[("acme", lo)]
    writer = side.writer()
    writer.delete_documents_by_term("rid", 1)  # the half of a write that reached Tantivy only
    side.commit(writer, stamp + 1)
    assert index.search("heron", STAFF, 10, 0.0) == []  # narrowed, not widened
    index.close()
    reopened = TantivyLexicalIndex(path)
    try:
        assert ids(reopened.search("heron", STAFF, 10, 0.0)) == ["h.md@1#root-1"]
        assert reopened._conn.execute("SELECT gen FROM tantivy_shards").fetchone()[0] == gen + 1
        assert [d.name for d in (tmp_path / "lexical.db.tantivy").iterdir()] == [
            f"{tenant_key('acme')}-standard-{LAYOUT}-s{lo}-g{gen + 1}"
        ]
    finally:
        reopened.close()


def test_purge_removes_a_deleted_passages_words_from_the_side_index(tmp_path: Path) -> None:
    """Until the purge, Tantivy's term dictionary still counts the deleted document (its segment only
    marks it deleted); after it, no directory of the home holds the word."""
    index = TantivyLexicalIndex(tmp_path / "lexical.db")
    try:
        index.upsert([make_passage("xylophonist rehearsal", doc_id="gone.md"), make_passage("rehearsal kept")])
        index.delete_doc("acme", "gone.md")
        ((lo,),) = index._conn.execute("SELECT lo FROM tantivy_shards").fetchall()
        searcher = index._sides[("acme", lo)].index.searcher()
        assert searcher.doc_freq("text", "xylophonist") == 1
        assert index.purge_pending() == 1
        details = index.purge()
        assert details["rebuilt"] == 1 and details["checkpoint_complete"]
        assert index.purge_pending() == 0
        side = index._sides[("acme", lo)]
        assert side.index.searcher().doc_freq("text", "xylophonist") == 0
        assert side.index.searcher().doc_freq("text", "rehearsal") == 1
        assert [d for d in (tmp_path / "lexical.db.tantivy").iterdir()] == [side.path]
        assert side.read_stamp() == index._conn.execute("SELECT stamp FROM tantivy_shards").fetchone()[0]
        assert STAMP_RID < 0
    finally:
        index.close()


def test_a_home_moves_between_engines_both_ways(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """FTS5 to Tantivy drops the FTS tables (a second copy of the text) and builds the side index, saying
    so in one line; back to FTS5 rebuilds the tables from SQLite and removes the side index."""
    path = tmp_path / "lexical.db"
    fts = SqliteLexicalIndex(path)
    fts.upsert([make_passage("osprey migration", doc_id="o.md")])
    fts.close()
    with caplog.at_level(logging.WARNING, logger="indexer.tantivy_lexical"):
        tv = TantivyLexicalIndex(path)
    assert any("indexed with FTS5 opened with lexical_engine = tantivy" in r.getMessage() for r in caplog.records)
    try:
        assert ids(tv.search("osprey", STAFF, 10, 0.0)) == ["o.md@1#root-1"]
        tables = {r[0] for r in tv._conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'fts4%'")}
        assert tables == set()
        tv.delete_doc("acme", "o.md")
        tv.upsert([make_passage("osprey return", doc_id="r.md")])
    finally:
        tv.close()
    back = SqliteLexicalIndex(path)
    try:
        assert ids(back.search("osprey", STAFF, 10, 0.0)) == ["r.md@1#root-1"]
        assert not (tmp_path / "lexical.db.tantivy").exists()
    finally:
        back.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM passages").fetchone()[0] == 1
    finally:
        conn.close()


def test_idf_when_deleted_passages_still_count_in_a_words_frequency() -> None:
    """Tantivy counts a deleted passage in doc_freq until its segment merges, so a word can be found in
    more passages than the index holds: the IDFs stay defined (a search raised ValueError)."""
    from indexer.tantivy_side import fts5_idf, tantivy_idf

    assert fts5_idf(25, 30) == 1e-6
    assert tantivy_idf(25, 30) > 0
    assert fts5_idf(100, 1) > fts5_idf(100, 50)
