"""The sync history behind `ragsync status` and serve's /readyz: a pass that raised is recorded with why,
the latest pass's problems replace the previous pass's, a sync refused for another source's name is
not a pass of that source, and a home from before failures were recorded still opens."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from connectors.base import SourceDocument
from connectors.drive import DriveConnector
from connectors.scan import ScanReport, Skipped
from connectors.state import SourceConflict
from ragsync.pipeline import publish_source
from ragsync.settings import Settings
from ragsync.sync_history import SyncHistory, SyncRun, source_health
from ragsync.wiring import build


class BrokenSource:
    """A source whose listing fails outright (as a network share that drops mid-listing would)."""

    def __init__(self) -> None:
        self.name = "share"
        self.location = "test:share"
        self.errors: list[str] = []
        self.skipped: list[Skipped] = []
        self.locked_folders: tuple[str, ...] = ()

    async def documents(self) -> AsyncIterator[SourceDocument]:
        raise RuntimeError("the share went away")
        yield  # pragma: no cover


def drive(root: Path, text: str = "Staff park on level 3.") -> Path:
    (root / "acme").mkdir(parents=True, exist_ok=True)
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (root / "acme/parking.md").write_text(f"# Parking\n\n{text}\n")
    return root


def test_a_failed_pass_is_recorded_and_named_by_health_without_its_detail(tmp_path: Path) -> None:
    components = build(Settings(home=tmp_path / "home", embed_model_path=None))
    try:
        with pytest.raises(RuntimeError, match="went away"):
            publish_source(components, BrokenSource())
    finally:
        components.close()
    history = SyncHistory(tmp_path / "home/connectors.db")
    try:
        (run,) = history.last_runs()
        assert run["source"] == "share" and run["failed"] == "RuntimeError: the share went away"
        assert history.health(["share"]) == {"share": "last pass failed (see `ragsync status` or the log)"}
        assert history.health(["other"]) == {}
    finally:
        history.close()


def test_the_latest_pass_problems_replace_the_previous_ones(tmp_path: Path) -> None:
    history = SyncHistory(tmp_path / "connectors.db")
    try:
        bad = ScanReport(upserts=1, errors=["a.md: cannot read: x", "b.pdf: not a readable PDF"], deletes_skipped=True)
        history.record(SyncRun("docs", "docs", 1000, 2000, True, bad))
        (run,) = history.last_runs()
        assert run["problems"] == bad.errors and run["errors"] == 2 and run["failed"] is None
        assert history.health(["docs"]) == {
            "docs": "last pass had 2 problem(s); deletions held back (see `ragsync status`)"
        }
        history.record(SyncRun("docs", "docs", 3000, 4000, False, ScanReport(unchanged=2)))
        (run,) = history.last_runs()
        assert run["problems"] == [] and history.health(["docs"]) == {}
        many = ScanReport(errors=[f"doc-{i}.md: bad " + "x" * 900 for i in range(150)])
        history.record(SyncRun("docs", "docs", 5000, 6000, True, many))
        (run,) = history.last_runs()
        assert run["errors"] == 150 and len(run["problems"]) == 100  # bounded, the count says how many
        assert all(len(p) <= 500 for p in run["problems"])
    finally:
        history.close()


def test_a_sync_refused_for_another_sources_name_is_not_a_pass_of_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    components = build(Settings(home=home, embed_model_path=None))
    try:
        publish_source(components, DriveConnector(drive(tmp_path / "a"), "docs", tenants=["acme"], refuse=[home]))
        with pytest.raises(SourceConflict):
            publish_source(components, DriveConnector(drive(tmp_path / "b"), "docs", tenants=["acme"], refuse=[home]))
    finally:
        components.close()
    assert source_health(home, ["docs"]) == {}
    history = SyncHistory(home / "connectors.db")
    try:
        (run,) = history.last_runs()
        assert run["failed"] is None and run["upserts"] == 1
    finally:
        history.close()


def test_a_home_from_before_failures_were_recorded_opens_and_records(tmp_path: Path) -> None:
    path = tmp_path / "connectors.db"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE sync_runs (source TEXT NOT NULL, name TEXT NOT NULL, started_ms INTEGER NOT NULL,"
        " finished_ms INTEGER NOT NULL, full_pass INTEGER NOT NULL, upserts INTEGER NOT NULL,"
        " acl_changes INTEGER NOT NULL, deletes INTEGER NOT NULL, unchanged INTEGER NOT NULL,"
        " errors INTEGER NOT NULL, deletes_skipped INTEGER NOT NULL, PRIMARY KEY (source, started_ms)) WITHOUT ROWID"
    )
    old.execute("INSERT INTO sync_runs VALUES ('docs', 'docs', 1, 2, 1, 3, 0, 0, 0, 0, 0)")
    old.commit()
    old.close()
    history = SyncHistory(path)
    try:
        assert [(r["upserts"], r["failed"], r["problems"]) for r in history.last_runs()] == [(3, None, [])]
        history.record(SyncRun("docs", "docs", 10, 20, True, ScanReport(), failure="OSError: gone"))
        assert history.last_runs()[0]["failed"] == "OSError: gone"
    finally:
        history.close()
