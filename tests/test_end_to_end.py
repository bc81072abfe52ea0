"""End to end on the embedded profile, through the real CLI: sync, ask, revoke, delete, as-of."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EMBEDDED_LEXICAL, MODEL_PATH

from ragsync.cli import main
from ragsync.demo import REFUNDS_V1, REFUNDS_V2, build_drive
from schemas.decisions import GENERIC_ABSTENTION


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "e2e-secret",
    }


def run(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def token(env: dict[str, str], tenant: str, user: str, groups: str) -> str:
    return run(env, "token", "issue", "--tenant", tenant, "--user", user, "--groups", groups).output.strip()


def ask(env: dict[str, str], tok: str, question: str, *extra: str) -> dict[str, Any]:
    return json.loads(run(env, "ask", question, "--token", tok, "--json", *extra).output)


def test_sync_ask_revoke_delete_and_as_of(tmp_path: Path, env: dict[str, str]) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    first = json.loads(run(env, "sync", str(drive), "--tenant", "acme,globex", "--json").output)
    assert first["upserts"] == 4 and first["errors"] == [] and first["dense"] is True
    assert json.loads(run(env, "sync", str(drive), "--tenant", "acme,globex", "--json").output)["upserts"] == 0, (
        "a re-run emits nothing"
    )

    ann = token(env, "acme", "ann", "staff")
    hal = token(env, "acme", "hal", "staff,hr")
    salary_q = "What is the salary band for a senior engineer?"

    # Answered, every quote verbatim from the permitted document.
    answer = ask(env, hal, salary_q)
    assert answer["answered"] is True and answer["message"] is None
    salaries = (drive / "acme/hr/salaries.md").read_text()
    flat = " ".join(salaries.split()).lower()
    for claim in answer["claims"]:
        assert claim["passage_id"].startswith("drive:acme/hr/salaries.md@1#")
        assert " ".join(claim["quote"].split()).lower() in flat or claim["quote"].replace(" ", "") in salaries
        assert claim["source_url"] == "acme/hr/salaries.md", "relative to the drive, never the server path"
    assert "90,000" in answer["answer"]

    # A principal without access: the generic abstention, nothing else.
    denied = ask(env, ann, salary_q)
    assert denied == {"answered": False, "answer": None, "claims": [], "message": GENERIC_ABSTENTION}
    traced = ask(env, ann, salary_q, "--show-trace")
    assert traced["trace"]["reason"] in {"no_visible_evidence", "model_abstained"}
    assert "salaries" not in json.dumps(traced["trace"]), "no denied passage ID reaches the trace"

    # Another tenant never sees acme's text.
    gus = token(env, "globex", "gus", "staff,hr")
    other = ask(env, gus, salary_q)
    assert other["answered"] is False

    # Revoke through the manifest.
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
    report = json.loads(run(env, "sync", str(drive), "--tenant", "acme,globex", "--json").output)
    assert report["acl_changes"] == 1 and report["upserts"] == 0
    assert ask(env, hal, salary_q)["answered"] is False

    # Delete the file: gone from every store, and audited.
    (drive / "acme/hr/salaries.md").unlink()
    assert json.loads(run(env, "sync", str(drive), "--tenant", "acme,globex", "--json").output)["deletes"] == 1
    leads = token(env, "acme", "lee", "hr-leads")
    assert ask(env, leads, salary_q)["answered"] is False
    audit = json.loads(run(env, "audit", "deletions", "--json").output)
    assert [(r["tenant"], r["doc_id"]) for r in audit] == [("acme", "drive:acme/hr/salaries.md")]
    assert set(audit[0]["removed_at"]) == {EMBEDDED_LEXICAL, "qdrant-edge", "embedding-cache"}
    assert audit[0]["passages_removed"] >= 1

    # A new version; as of a date before it the old version answers.
    refund_q = "How many days do customers have to request a refund?"
    assert "30 days" in ask(env, ann, refund_q)["answer"]
    (drive / "acme/policies/refunds.md").write_text(REFUNDS_V2)
    run(env, "sync", str(drive), "--tenant", "acme,globex")
    now = ask(env, ann, refund_q)
    assert "45 days" in now["answer"] and now["claims"][0]["passage_id"].startswith("drive:acme/policies/refunds.md@2#")
    before = ask(env, ann, refund_q, "--as-of", "2026-03-01")
    assert "30 days" in before["answer"] and before["claims"][0]["passage_id"].startswith(
        "drive:acme/policies/refunds.md@1#"
    )
    assert REFUNDS_V1  # the fixture text the old version came from


def test_bm25_only_when_no_model(tmp_path: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    env = {**env, "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "missing-model")}
    drive = tmp_path / "drive"
    build_drive(drive)
    with caplog.at_level("WARNING"):
        report = json.loads(run(env, "sync", str(drive), "--tenant", "acme,globex", "--json").output)
    assert report["dense"] is False
    assert any("dense retrieval is disabled" in r.message for r in caplog.records)
    answer = ask(env, token(env, "acme", "ann", "staff"), "How many days do customers have to request a refund?")
    assert answer["answered"] and "30 days" in answer["answer"]


def test_invalid_token_is_an_error_not_an_answer(tmp_path: Path, env: dict[str, str]) -> None:
    build_drive(tmp_path / "drive")
    run(
        env, "sync", str(tmp_path / "drive"), "--tenant", "acme,globex"
    )  # a home with documents: an empty one is refused first
    result = CliRunner().invoke(main, ["ask", "anything", "--token", "forged.token"], env=env)
    assert result.exit_code == 2 and "invalid session token" in result.output


def test_demo_runs_and_checks_itself(tmp_path: Path, env: dict[str, str]) -> None:
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path / "demo")], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "every step behaved as described" in result.output
    assert "✗" not in result.output
