"""`ragsync serve` with `[[sources]]`: the declared folder is synced on start, watched, reconciled (a
removal deleted), and passages a model-less sync left without vectors are embedded once the model is
loaded, with `status` showing the gap until then. Through the CLI and HTTP, model loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MODEL_PATH
from serving import Serve, cites, cli, environment, token
from waiting import wait_until

from ragsync.demo import REFUNDS_V2, build_drive

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

REFUND_Q = "How many days do customers have to request a refund?"


def test_declared_source_is_watched_reconciled_and_backfilled(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    home = tmp_path / "home"
    # A sync while no model can be loaded: BM25 only, and status says dense is off and incomplete.
    no_model = environment(home, RAGSYNC_EMBED_MODEL_PATH=str(tmp_path / "no-model"), RAGSYNC_EMBED_DOWNLOAD="false")
    first = json.loads(cli(no_model, "sync", str(drive), "--tenant", "acme,globex", "--json").stdout)
    assert first["upserts"] == 4 and first["passages_embedded"] == 0
    before = json.loads(cli(no_model, "status").stdout)
    assert before["owner"] is None and before["dense"]["enabled"] is False and before["dense"]["complete"] is False

    config = tmp_path / "ragsync.toml"
    config.write_text(
        f'[[sources]]\nname = "drive"\npath = "{drive}"\ntenants = ["acme", "globex"]\nwatch = true\ninterval_s = 600\n'
    )
    env = environment(home, RAGSYNC_CONFIG=str(config))
    ann = token("acme", "ann", "staff")
    with Serve(env) as serve:
        status = wait_until(
            lambda: (s := json.loads(cli(env, "status").stdout))["dense"].get("complete") and s, 60, "dense backfill"
        )
        assert status["dense"]["vectors"] == status["dense"]["passages"] > 0
        assert [(s["name"], s["full_pass"]) for s in status["sources"]] == [("drive", True)]

        (drive / "acme/policies/refunds.md").write_text(REFUNDS_V2.replace("2026-09-01", "2026-01-02"))
        wait_until(lambda: "45 days" in str(serve.ask(ann, REFUND_Q)["answer"]), 30, "the watched edit")

        (drive / "acme/handbook/onboarding.html").unlink()  # a removal brings the full pass forward
        onboarding_q = "When do new staff receive their laptop?"
        wait_until(lambda: not cites(serve.ask(ann, onboarding_q), "acme/handbook/onboarding.html"), 30, "the deletion")
        audit = json.loads(cli(env, "audit", "deletions", "--json").stdout)
        assert [r["doc_id"] for r in audit] == ["drive:acme/handbook/onboarding.html"]
