"""SQLite FTS5 adapter specifics beyond the lexical contract: rebuilding tables of an older layout or analyzer."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import NOW, make_passage

from indexer.sqlite_fts import SqliteLexicalIndex
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff",), NOW)


def test_a_home_with_the_two_column_layout_is_rebuilt_on_open(tmp_path: Path) -> None:
    path = tmp_path / "lexical.db"
    index = SqliteLexicalIndex(path)
    passage = make_passage("Backups run every night.", heading_path=("Operations",)).model_copy(
        update={"title": "Runbook"}
    )
    index.upsert([passage])
    index.close()
    # Make it look like a home written before the title had its own column.
    old = "fts_" + hashlib.sha1(b"acme").hexdigest()[:16]
    conn = sqlite3.connect(path)
    (new,) = conn.execute("SELECT name FROM fts_tables WHERE tenant = 'acme'").fetchone()
    conn.execute(f"DROP TABLE {new}")
    conn.execute(f"CREATE VIRTUAL TABLE {old} USING fts5(heading, text, tokenize='porter unicode61')")
    conn.execute(f"INSERT INTO {old}(rowid, heading, text) SELECT rid, 'Runbook Operations', text FROM passages")
    conn.execute("UPDATE fts_tables SET name = ? WHERE tenant = 'acme'", (old,))
    conn.commit()
    conn.close()

    reopened = SqliteLexicalIndex(path)
    try:
        assert [h.passage.passage_id for h in reopened.search("runbook", STAFF, 10, 0.0)] == [passage.passage_id]
        assert [h.passage.passage_id for h in reopened.search("operations", STAFF, 10, 0.0)] == [passage.passage_id]
        assert [h.passage.passage_id for h in reopened.search("nightly backups", STAFF, 10, 0.0)] == [
            passage.passage_id
        ]
        names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert old not in names
    finally:
        reopened.close()


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {str(r[0]) for r in conn.execute("SELECT name FROM fts_tables")}
    finally:
        conn.close()


def test_changing_the_analyzer_rebuilds_the_tables_and_stems_only_for_english(tmp_path: Path) -> None:
    """A home written with one analyzer and opened with the other is rebuilt from `passages`, so a query
    is never analysed one way against terms indexed another."""
    path = tmp_path / "lexical.db"
    passage = make_passage("Refunds are paid within 14 days.", heading_path=("Payments",))
    english = SqliteLexicalIndex(path, analyzer="english")
    english.upsert([passage])
    assert [h.passage.passage_id for h in english.search("refund", STAFF, 10, 0.0)] == [passage.passage_id]
    english.close()
    assert {n[:6] for n in _tables(path)} == {"fts4p_"}

    standard = SqliteLexicalIndex(path, analyzer="standard")
    try:
        assert {n[:6] for n in _tables(path)} == {"fts4s_"}
        assert standard.search("refund", STAFF, 10, 0.0) == []
        assert [h.passage.passage_id for h in standard.search("refunds payments", STAFF, 10, 0.0)] == [
            passage.passage_id
        ]
        assert standard.count("acme") == 1
    finally:
        standard.close()

    again = SqliteLexicalIndex(path, analyzer="english")
    try:
        assert [h.passage.passage_id for h in again.search("refund", STAFF, 10, 0.0)] == [passage.passage_id]
    finally:
        again.close()


def test_an_unknown_analyzer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown lexical analyzer"):
        SqliteLexicalIndex(tmp_path / "lexical.db", analyzer="snowball")  # type: ignore[arg-type]
    assert not (tmp_path / "lexical.db").exists()
