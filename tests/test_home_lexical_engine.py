"""A new embedded home gets NEW_HOME_ENGINE; an existing home keeps the engine it was built with.

Changing the default must never switch a home: opening an FTS5 home with Tantivy drops its FTS5
tables and rebuilds the index (minutes at a million passages). So the home records its engine
(`lexical-engine.json`; a home from before the record is read from its files), and only an explicit
`lexical_engine` switches it, with a warning (ragsync.home_lexical). The tests set the new-home
engine to the other one where that is what they check (a default that changed).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage

import ragsync.home_lexical as home_lexical
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.sqlite_fts_schema import side_index_dir
from ragsync.home_lexical import LEXICAL_ENGINE_STAMP
from ragsync.settings import Settings
from ragsync.wiring import build_embedded
from schemas.errors import StoreUnavailable
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff",), NOW)


@pytest.fixture(autouse=True)
def _no_engine_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSYNC_LEXICAL_ENGINE", raising=False)  # a suite run per engine sets it


def opened(home: Path, **settings: Any) -> tuple[str, list[str]]:
    """The lexical store's name when the home is opened, and the passages a search finds in it."""
    components = build_embedded(
        Settings(home=home, profile="embedded", session_secret="s" * 32, **settings), with_embedder=False
    )
    try:
        hits = components.lexical.search("osprey", STAFF, 10, 0.0)
        return components.lexical.name, [h.passage.passage_id for h in hits]
    finally:
        components.close()


def stamp(home: Path) -> str:
    return str(json.loads((home / LEXICAL_ENGINE_STAMP).read_text())["engine"])


def fts_tables(home: Path) -> int:
    with sqlite3.connect(home / "lexical.db") as conn:
        return int(conn.execute("SELECT count(*) FROM fts_tables").fetchone()[0])


def fts5_home_from_before_stamps(home: Path) -> None:
    home.mkdir(mode=0o700)
    index = SqliteLexicalIndex(home / "lexical.db")
    index.upsert([make_passage("The osprey migration starts in spring.", doc_id="o.md")])
    index.close()


@pytest.mark.parametrize("engine", ["fts5", "tantivy"])
def test_a_new_home_gets_the_new_home_engine_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    monkeypatch.setattr(home_lexical, "NEW_HOME_ENGINE", engine)
    home = tmp_path / "home"
    assert opened(home) == (f"sqlite-{engine}", [])
    assert stamp(home) == engine
    monkeypatch.setattr(home_lexical, "NEW_HOME_ENGINE", "tantivy" if engine == "fts5" else "fts5")
    assert opened(home)[0] == f"sqlite-{engine}", "a default changed since switched the home"


def test_an_fts5_home_from_before_stamps_keeps_fts5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(home_lexical, "NEW_HOME_ENGINE", "tantivy")  # new homes get Tantivy; this one is not new
    home = tmp_path / "home"
    fts5_home_from_before_stamps(home)
    assert opened(home) == ("sqlite-fts5", ["o.md@1#root-1"])
    assert stamp(home) == "fts5"
    assert fts_tables(home) == 1 and not side_index_dir(home / "lexical.db").exists(), "the home was migrated"
    assert opened(home)[0] == "sqlite-fts5"  # and again, now from its stamp


@pytest.mark.parametrize("passages", [True, False], ids=["with passages", "empty"])
def test_a_tantivy_home_from_before_stamps_keeps_tantivy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, passages: bool
) -> None:
    monkeypatch.setattr(home_lexical, "NEW_HOME_ENGINE", "fts5")
    home = tmp_path / "home"
    components = build_embedded(
        Settings(home=home, profile="embedded", session_secret="s" * 32, lexical_engine="tantivy"),
        with_embedder=False,
    )
    lexical = components.lexical
    if passages:
        lexical.upsert([make_passage("The osprey migration starts in spring.", doc_id="o.md")])
    components.close()
    (home / LEXICAL_ENGINE_STAMP).unlink()  # as a home built with lexical_engine = "tantivy" before stamps
    assert side_index_dir(home / "lexical.db").is_dir() == passages  # an empty one has no side index yet
    assert opened(home) == ("sqlite-tantivy", ["o.md@1#root-1"] if passages else [])
    assert stamp(home) == "tantivy"


def test_only_a_configured_engine_switches_a_home_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    fts5_home_from_before_stamps(home)
    assert opened(home, lexical_engine="tantivy") == ("sqlite-tantivy", ["o.md@1#root-1"])
    assert any(
        "indexed with the lexical engine fts5; lexical_engine = tantivy" in r.getMessage() for r in caplog.records
    )
    assert stamp(home) == "tantivy" and fts_tables(home) == 0
    assert opened(home) == ("sqlite-tantivy", ["o.md@1#root-1"]), "unset again, the home keeps its new engine"
    caplog.clear()
    assert opened(home, lexical_engine="fts5") == ("sqlite-fts5", ["o.md@1#root-1"])
    assert stamp(home) == "fts5" and any("lexical_engine = fts5" in r.getMessage() for r in caplog.records)


def test_an_unreadable_record_is_refused_unless_an_engine_is_configured(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fts5_home_from_before_stamps(home)
    (home / LEXICAL_ENGINE_STAMP).write_text("{not json")
    with pytest.raises(StoreUnavailable, match=r"lexical-engine\.json is unreadable"):
        opened(home)
    (home / LEXICAL_ENGINE_STAMP).write_text('{"engine": "lucene"}')
    with pytest.raises(StoreUnavailable, match="names no known lexical engine"):
        opened(home)
    assert opened(home, lexical_engine="fts5") == ("sqlite-fts5", ["o.md@1#root-1"])
    assert stamp(home) == "fts5"
