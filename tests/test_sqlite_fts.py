"""SQLite FTS5 adapter specifics beyond the lexical contract: rebuilding tables of an older layout."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

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
