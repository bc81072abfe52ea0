"""`ragsync sync` with no owner takes the home before its scan and opens its stores beside it.

As pipeline.sync_source does: the worker and its stores (the model included) open on a thread while
the scan publishes, since this process will apply what it published. What must hold for the others:
a `ragsync serve` that starts during the scan finds the home busy, says so in one line naming the
sync, and gets the home once the sync has applied; a store that cannot be opened is still one line
and exit status 1, as when the stores were opened after the scan.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH
from test_sync_opens_beside_scan import Spied
from waiting import wait_until

import ragsync.commands.service as service
import ragsync.pipeline as pipeline
from ragsync.cli import main
from ragsync.home_lock import HomeLock, OwnerInfo, current_owner
from ragsync.settings import Settings
from streams.embedded_worker import GROUP
from streams.sqlite_log import SqliteEventLog


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_PROFILE": "embedded",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "cli-test",
        "RAGSYNC_CONFIG": os.devnull,
    }


def test_the_sync_owns_the_home_through_its_scan_and_a_starting_serve_waits_one_line(
    drive: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    worker, real_publish = Spied(), pipeline.publish_source
    lines: list[str] = []
    monkeypatch.setattr(service, "note", lines.append)
    taken: list[HomeLock] = []
    settings = Settings(home=home, profile="embedded", session_secret="s" * 32)
    serve = threading.Thread(target=lambda: taken.append(service._take_home(settings, "serve", None)))
    during_scan: list[OwnerInfo | None] = []

    def publish(*args: Any, **kwargs: Any) -> Any:
        during_scan.append(current_owner(home))
        assert worker.opened.wait(60), "the stores were not opened while the scan ran"
        serve.start()  # a `ragsync serve` starting now
        wait_until(lambda: bool(lines), 20, "the starting serve to find the home busy")
        assert not taken, "the serve took the home while the sync scanned"
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(pipeline, "embedded_worker", worker)
    monkeypatch.setattr(pipeline, "publish_source", publish)
    result = CliRunner().invoke(main, ["sync", str(drive), "--tenant", "acme", "--json"], env=env)
    if serve.ident is not None:  # started during the scan
        serve.join(30)
    try:
        assert result.exit_code == 0, result.output
        assert len(during_scan) == 1, "the scan did not publish through the applying process's stores"
        owner = during_scan[0]
        assert owner is not None and (owner.command, owner.pid) == ("sync", os.getpid())
        report = json.loads(result.stdout)
        assert (report["upserts"], report["applied"], report["dense"]) == (3, 3, True)
        assert worker.closed == [True]
        assert lines == [f"waiting for `ragsync sync` (pid {os.getpid()}) to finish with the stores"]
        assert len(taken) == 1 and taken[0].info is not None and taken[0].info.command == "serve"
    finally:
        for lock in taken:
            lock.release()
    assert current_owner(home) is None


def test_stores_that_cannot_be_opened_are_one_line_and_the_scan_stays_published(
    drive: Path, env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "embedding-model.json").write_text('{"model": "another/model"}\n')  # vectors of another model
    result = CliRunner().invoke(main, ["sync", str(drive), "--tenant", "acme", "--json"], env=env)
    assert result.exit_code == 1, result.output
    problem = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(problem) == 1 and "another/model" in problem[0], result.stderr
    assert current_owner(home) is None, "the home was left owned"
    log = SqliteEventLog(home / "events.db")
    try:
        assert log.lag("documents", GROUP) == 3  # published, applied by the next owner once it can open
    finally:
        log.close()
