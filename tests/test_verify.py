"""`ragsync verify` finds every kind of drift between stores, doc state and connector state, and none in sync."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EMBEDDED_LEXICAL, MODEL_PATH

from ragsync.cli import main
from ragsync.demo import REFUNDS_V2, build_drive
from ragsync.settings import Settings
from ragsync.verify import verify
from ragsync.wiring import build

SALARIES = "drive:acme/hr/salaries.md"


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "s" * 32,
        "RAGSYNC_CONFIG": os.devnull,
    }


def _cli(tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=_env(tmp_path), catch_exceptions=False)


def _verify(tmp_path: Path) -> tuple[int, dict[str, Any]]:
    result = _cli(tmp_path, "verify", "--json")
    return result.exit_code, json.loads(result.output)


@pytest.fixture
def synced(tmp_path: Path) -> Path:
    drive = tmp_path / "drive"
    build_drive(drive)
    assert _cli(tmp_path, "sync", str(drive), "--tenant", "acme,globex").exit_code == 0
    return drive


def _components(tmp_path: Path) -> Any:
    return build(Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="s" * 32))


def test_in_sync_through_edit_revocation_and_deletion(tmp_path: Path, synced: Path) -> None:
    code, report = _verify(tmp_path)
    assert code == 0 and report["ok"], report
    assert (
        report["documents"] == 4
        and report["tombstones"] == 0
        and report["sources"] == {"drive": "drive:" + str(synced.resolve())}
    )
    assert set(report["passages"]) == {EMBEDDED_LEXICAL, "qdrant-edge"}, "both stores are reconciled (model loaded)"
    assert report["passages"][EMBEDDED_LEXICAL] == report["passages"]["qdrant-edge"] > 4

    (synced / "acme/policies/refunds.md").write_text(REFUNDS_V2)
    (synced / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
    (synced / "globex/refunds.md").unlink()
    assert _cli(tmp_path, "sync", str(synced), "--tenant", "acme,globex").exit_code == 0
    code, report = _verify(tmp_path)
    assert code == 0 and report["ok"], report
    assert report["tombstones"] == 1 and report["documents"] == 3
    human = _cli(tmp_path, "verify")
    assert human.exit_code == 0 and "drift=0 pending=0" in human.output


def test_an_acl_left_behind_in_one_store_is_drift(tmp_path: Path, synced: Path) -> None:
    components = _components(tmp_path)
    try:
        components.vector.set_acl("acme", SALARIES, ["group:staff"], {})  # a revocation lost by one store
    finally:
        components.close()
    code, report = _verify(tmp_path)
    assert code == 1 and not report["ok"]
    [finding] = report["drift"]
    assert (finding["doc_id"], finding["kind"], finding["store"]) == (SALARIES, "acl", "qdrant-edge")
    assert "group:hr" in finding["detail"]


def test_passages_left_after_a_deletion_and_missing_vectors_are_drift(tmp_path: Path, synced: Path) -> None:
    (synced / "acme/hr/salaries.md").unlink()
    assert _cli(tmp_path, "sync", str(synced), "--tenant", "acme,globex").exit_code == 0
    components = _components(tmp_path)
    try:
        from conftest import make_passage

        components.lexical.upsert([make_passage("left behind", tenant="acme", doc_id=SALARIES, anchor="x-1")])
        components.vector.delete_doc("acme", "drive:acme/policies/refunds.md")
    finally:
        components.close()
    code, report = _verify(tmp_path)
    assert code == 1
    kinds = {(f["doc_id"], f["kind"], f["store"]) for f in report["drift"]}
    assert (SALARIES, "tombstone", EMBEDDED_LEXICAL) in kinds
    assert ("drive:acme/policies/refunds.md", "vectors", "qdrant-edge") in kinds
    assert ("drive:acme/policies/refunds.md", "passages", "qdrant-edge") in kinds


def test_an_event_published_but_never_applied_is_pending_then_drift_once_lost(tmp_path: Path, synced: Path) -> None:
    (synced / "acme/hr/.ragsync-acl.toml").write_text("read = []\n")
    assert _cli(tmp_path, "sync", str(synced), "--tenant", "acme,globex", "--no-apply").exit_code == 0
    code, report = _verify(tmp_path)
    assert code == 3, report
    assert {(f["doc_id"], f["kind"]) for f in report["pending"]} == {(SALARIES, "behind")}
    assert report["backlog"]["acl"] == 1 and report["drift"] == []

    components = _components(tmp_path)
    try:  # the event is lost: consumed without being applied
        records = components.events.poll("acl", "ragsync-indexer", 10)
        components.events.commit("ragsync-indexer", records)
    finally:
        components.close()
    code, report = _verify(tmp_path)
    assert code == 1 and [(f["doc_id"], f["kind"]) for f in report["drift"]] == [(SALARIES, "behind")]


def test_reconcile_reports_orphans_and_state_ahead_of_its_source(tmp_path: Path, synced: Path) -> None:
    from indexer.ports import DocState

    components = _components(tmp_path)
    try:
        components.docs.put(DocState("acme", "drive:acme/ghost.md", applied_version=1, acl=("group:staff",)))
        state = components.docs.get("acme", "drive:acme/board.md") or components.docs.get(
            "acme", "drive:acme/policies/refunds.md"
        )
        assert state is not None
        state.applied_version += 5
        components.docs.put(state)
        report = verify(components)
    finally:
        components.close()
    kinds = {(f.doc_id, f.kind) for f in report.drift}
    assert ("drive:acme/ghost.md", "orphan") in kinds
    assert (state.doc_id, "ahead") in kinds
