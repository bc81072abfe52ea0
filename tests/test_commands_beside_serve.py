"""Every command works beside `ragsync serve` (issue 20 item 3), with the output it gives without serve:
`verify` (serve runs the check on the stores it holds), `status --json`, `audit deletions | deletion
| propagation | verify` and `dlq list`. Real processes, model loaded: the model is what locks the
vector shard, so a BM25-only run would hide a command that opens it beside its owner.

Also: `audit deletion` of a document that was never deleted is an answer (one line, exit 1), not a
usage error (2), with serve and without.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EMBEDDED_LEXICAL, MODEL_PATH
from serving import Serve, cli, environment

from ragsync.demo import build_drive

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

DELETED = "acme/handbook/onboarding.html"

COMMANDS: list[tuple[str, ...]] = [
    ("verify", "--json"),
    ("audit", "deletions", "--json"),
    ("audit", "propagation", "--json"),
    ("dlq", "list", "--json"),
]


def run_all(env: dict[str, str]) -> dict[tuple[str, ...], tuple[int, str]]:
    return {args: ((done := cli(env, *args, check=False)).returncode, done.stdout) for args in COMMANDS}


def certificate(env: dict[str, str]) -> dict[str, Any]:
    done = cli(env, "audit", "deletion", DELETED, "--json", check=False)
    assert done.returncode in (0, 1) and "error" not in done.stderr, done.stderr
    cert: dict[str, Any] = json.loads(done.stdout)
    return cert


def test_every_command_gives_the_same_answer_beside_serve_as_without(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    env = environment(tmp_path / "home")
    with Serve(env) as serve:
        cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        (drive / DELETED).unlink()
        cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        serve.wait_drained()
        beside = run_all(env)
        cert_beside = certificate(env)
        status = cli(env, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["owner"]["pid"] == serve.pid
        never = cli(env, "audit", "deletion", "acme/policies/refunds.md", check=False)
        trail = json.loads(cli(env, "audit", "verify", "--json").stdout)
    assert "Traceback" not in serve.output()

    alone = run_all(env)  # the same commands, owning the home themselves
    assert beside == alone
    # The trail may have grown since (serve's purges): what serve's neighbour saw is in it, unchanged.
    assert trail["ok"] and trail["head"], trail
    anchored = json.loads(cli(env, "audit", "verify", "--anchor", trail["head"], "--json").stdout)
    assert anchored["ok"] and anchored["anchors_checked"] == 1 and anchored["records"] >= trail["records"]
    report = json.loads(beside[("verify", "--json")][1])
    assert beside[("verify", "--json")][0] == 0 and report["ok"] and report["documents"] == 3, report
    assert report["tombstones"] == 1 and set(report["passages"]) == {EMBEDDED_LEXICAL, "qdrant-edge"}, report
    assert [r["doc_id"] for r in json.loads(beside[("audit", "deletions", "--json")][1])] == [f"drive:{DELETED}"]

    cert_alone = certificate(env)
    assert cert_beside["doc_id"] == cert_alone["doc_id"] == f"drive:{DELETED}"
    assert [c["copy"] for c in cert_beside["copies"]] == [c["copy"] for c in cert_alone["copies"]]
    assert cert_beside["remnants"] == cert_alone["remnants"] == 0

    # Never deleted: one line saying so and exit 1 (an answer), not 2 (bad usage); the same either way.
    never_alone = cli(env, "audit", "deletion", "acme/policies/refunds.md", check=False)
    for done in (never, never_alone):
        assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stderr)
        assert done.stderr.splitlines() == [
            "error: no deletion of 'acme/policies/refunds.md' is recorded (see `ragsync audit deletions`)"
        ]
