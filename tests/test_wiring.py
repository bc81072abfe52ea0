"""Wiring opens adapters on first use, so a command opens only the stores it touches."""

from __future__ import annotations

from pathlib import Path

from ragsync.settings import Settings
from ragsync.wiring import build


def test_a_publisher_opens_only_the_event_log(tmp_path: Path) -> None:
    components = build(Settings(home=tmp_path / "home", embed_model_path=None))
    try:
        components.events.lag("acl", "g")
        assert components.opened() == ["events"]
        assert not (tmp_path / "home" / "lexical.db").exists()
        assert not (tmp_path / "home" / "vectors").exists()
    finally:
        components.close()


def test_close_closes_what_was_opened_and_only_that(tmp_path: Path) -> None:
    components = build(Settings(home=tmp_path / "home", embed_model_path=None))
    lexical = components.lexical
    assert components.opened() == ["lexical"]
    components.close()
    try:
        lexical.count("acme")
    except Exception as exc:  # sqlite3.ProgrammingError: the connection is closed
        assert "closed" in str(exc).lower()
    else:
        raise AssertionError("lexical index still open after close()")
