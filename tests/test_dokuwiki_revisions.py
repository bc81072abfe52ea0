"""A DokuWiki page's revisions are versions (issue 19.3): `--as-of` answers from the page as it stood.

Against a private real wiki (tests/dokuwiki_world.py) through the real connector, pipeline and stores
(embedded profile). Revision times are whole seconds, so edits are a second apart.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dokuwiki_world import ADMIN, Wiki

from connectors.dokuwiki import DokuWikiConnector
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.sources import SourceSettings, connector_for
from ragsync.wiring import Components, build
from schemas.principal import AccessFilter

SOURCE, TENANT, DOC = "wiki", "acme", "wiki:ops/runbook"


def _connector(wiki: Wiki, tmp_path: Path, **extra: int) -> DokuWikiConnector:
    settings = SourceSettings(
        name=SOURCE,
        kind="dokuwiki",
        url=wiki.url,
        username=ADMIN,
        password=wiki.client._password,  # type: ignore[arg-type]
        tenants=(TENANT,),
        **extra,  # type: ignore[arg-type]
    )
    connector = connector_for(settings, tmp_path)
    assert isinstance(connector, DokuWikiConnector)
    return connector


def _edit(wiki: Wiki, fact: str) -> datetime:
    """One revision of ops:runbook stating `fact`; its time (a second later than the one before)."""
    time.sleep(1.1)
    wiki.put("ops:runbook", f"====== Runbook ======\n\nRestart the service with {fact}.\n")
    return datetime.fromtimestamp(int(wiki.client.call("wiki.getPageInfo", "ops:runbook")["version"]), UTC)


def _text_as_of(components: Components, as_of: datetime) -> str:
    """What the stores' own query lets the wiki's admin read of the page as of `as_of`."""
    ids = [p.passage_id for p in components.lexical.inventory(TENANT, DOC)]
    entries = (f"user:{ADMIN}", "group:admin", "group:user")
    return " ".join(p.text for p in components.lexical.passages(AccessFilter(TENANT, entries, as_of), ids))


def test_each_revision_is_a_version_and_as_of_answers_from_the_page_as_it_stood(wiki: Wiki, tmp_path: Path) -> None:
    first = _edit(wiki, "walrus-1")
    second = _edit(wiki, "walrus-2")
    components = build(Settings(home=tmp_path / "home", embed_model_path=None, session_secret="s"))
    connector = _connector(wiki, tmp_path)
    try:
        report = sync_source(components, connector).scan
        assert not report.errors and report.upserts == 2 and not report.bounded, report
        assert "walrus-1" in _text_as_of(components, first) and "walrus-2" not in _text_as_of(components, first)
        between = second - timedelta(milliseconds=500)
        assert "walrus-1" in _text_as_of(components, between) and "walrus-2" not in _text_as_of(components, between)
        now = datetime.now(UTC)
        assert "walrus-2" in _text_as_of(components, now) and "walrus-1" not in _text_as_of(components, now)
        assert _text_as_of(components, first - timedelta(seconds=1)) == "", "nothing before the page existed"

        report = sync_source(components, connector).scan
        assert report.upserts == 0 and report.unchanged == 1, "an unchanged page reads no history"
        third = _edit(wiki, "walrus-3")
        fourth = _edit(wiki, "walrus-4")
        report = sync_source(components, connector).scan
        assert not report.errors and report.upserts == 2, "only the revisions newer than the one indexed"
        assert "walrus-2" in _text_as_of(components, third - timedelta(milliseconds=500))
        assert "walrus-3" in _text_as_of(components, third) and "walrus-4" not in _text_as_of(components, third)
        assert "walrus-4" in _text_as_of(components, fourth)
        versions = sorted({p.version for p in components.lexical.inventory(TENANT, DOC)})
        assert len(versions) == 4, versions
        report = sync_source(components, connector, force=True).scan  # a re-chunk: history never comes back as newest
        assert report.upserts == 1 and "walrus-4" in _text_as_of(components, datetime.now(UTC))
        assert "walrus-3" in _text_as_of(components, third)
    finally:
        components.close()


def test_revisions_bound_how_much_history_a_page_brings_and_the_report_says_so(wiki: Wiki, tmp_path: Path) -> None:
    times = [_edit(wiki, f"narwhal-{n}") for n in range(5)]
    components = build(Settings(home=tmp_path / "home", embed_model_path=None, session_secret="s"))
    connector = _connector(wiki, tmp_path, revisions=3)
    try:
        report = sync_source(components, connector).scan
        assert not report.errors and report.upserts == 3, report
        (line,) = report.bounded
        assert line.startswith("ops/runbook: ") and "revisions = 3" in line
        assert _text_as_of(components, times[1]) == "", "revisions older than the bound are not indexed"
        assert "narwhal-2" in _text_as_of(components, times[2])
        assert "narwhal-4" in _text_as_of(components, datetime.now(UTC))
    finally:
        components.close()
    with pytest.raises(ValueError, match="revisions"):
        SourceSettings(name="d", path=tmp_path, tenants=("acme",), revisions=3)


def test_a_revision_that_cannot_be_read_is_its_own_error(wiki: Wiki, tmp_path: Path) -> None:
    _edit(wiki, "puffin-1")
    second = _edit(wiki, "puffin-2")
    _edit(wiki, "puffin-3")
    attic = wiki.home / "run" / "dokuwiki" / "data" / "attic" / "ops"
    (gone,) = attic.glob(f"runbook.{int(second.timestamp())}.txt*")
    gone.write_bytes(b"")  # the wiki lost that revision's text (its attic copy is empty)
    components = build(Settings(home=tmp_path / "home", embed_model_path=None, session_secret="s"))
    connector = _connector(wiki, tmp_path)
    try:
        report = sync_source(components, connector).scan
        (error,) = report.errors or [str(report)]
        assert error.startswith("ops/runbook at ") and "no text" in error, error
        assert report.upserts == 2
        assert "puffin-1" in _text_as_of(components, second), "the one before it stands in its time"
        assert "puffin-3" in _text_as_of(components, datetime.now(UTC))
    finally:
        components.close()
