"""`ragsync serve` owns the home while other processes sync, ask, watch and push: end to end, through
the CLI and HTTP, with the embedding model loaded (never BM25-only: the model is what locks the
vector shard, so a BM25-only run would hide every ownership problem)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import MODEL_PATH
from serving import ROOT, Serve, cites, cli, environment, token
from waiting import wait_until

from connectors.webhook import signed_headers
from ragsync.demo import REFUNDS_V2, build_drive
from streams.embedded_worker import GROUP
from streams.ports import TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

HOOK = "hook-secret-of-the-crm"
SALARY_Q = "What is the salary band for a senior engineer?"


def test_serve_owns_the_home_while_other_processes_sync_ask_and_revoke(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    env = environment(tmp_path / "home")
    with Serve(env) as serve:
        second = cli(env, "serve", "--port", "0", check=False)
        assert second.returncode == 1 and "Traceback" not in second.stderr
        assert f"is already owned by `ragsync serve` (pid {serve.pid}" in second.stderr

        report = json.loads(cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json").stdout)
        assert report["upserts"] == 4 and report["applied"] == 4, report
        assert report["dense"] is True and report["passages_embedded"] == report["passages_written"] > 0

        hal = token("acme", "hal", "staff", "hr")
        answer = serve.ask(hal, SALARY_Q)
        assert answer["answered"] and cites(answer, "acme/hr/salaries.md") and "90,000" in answer["answer"]

        # `ask` and `status` from other processes go through the owner instead of failing on its lock.
        asked = json.loads(cli(env, "ask", SALARY_Q, "--token", hal, "--json").stdout)
        assert asked["answered"] and cites(asked, "acme/hr/salaries.md")
        traced = json.loads(cli(env, "ask", SALARY_Q, "--token", hal, "--json", "--show-trace").stdout)
        assert traced["trace"]["searches"] and "salaries" in json.dumps(traced["trace"]["searches"])
        status = json.loads(cli(env, "status").stdout)
        assert status["owner"]["pid"] == serve.pid and status["owner"]["command"] == "serve"
        assert status["backlog"] == {"acl": 0, "deletions": 0, "documents": 0} and status["dead_letters"] == 0
        assert status["tenants"]["acme"]["documents"] == 3
        assert status["tenants"]["acme"]["passages"] == status["tenants"]["acme"]["vectors"] > 0
        assert status["dense"]["enabled"] and status["dense"]["complete"]
        assert [s["upserts"] for s in status["sources"]] == [4]

        # A revocation synced from another process: the very next served answer no longer shows it.
        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        revoked = json.loads(cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json").stdout)
        assert revoked["acl_changes"] == 1 and revoked["applied"] == 1, revoked
        after = serve.ask(hal, SALARY_Q)
        assert not cites(after, "acme/hr/salaries.md") and "90,000" not in json.dumps(after)

        # A new document synced from another process is answered.
        (drive / "acme/policies/parking.md").write_text(
            "# Parking\n\nStaff park on level 3 of the north garage; visitors use level 1.\n"
        )
        added = json.loads(cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json").stdout)
        assert added["upserts"] == 1 and added["applied"] == 1
        parking = serve.ask(token("acme", "ann", "staff"), "Where do staff park?")
        assert parking["answered"] and cites(parking, "acme/policies/parking.md")
    assert "Traceback" not in serve.output()


def test_watch_and_webhook_pushes_are_applied_while_serving(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    env = environment(tmp_path / "home", RAGSYNC_WEBHOOKS=json.dumps({"crm": {"secret": HOOK, "tenants": ["acme"]}}))
    ann = token("acme", "ann", "staff")
    refund_q = "How many days do customers have to request a refund?"
    with Serve(env) as serve:
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ragsync.cli",
                "sync",
                str(drive),
                "--tenant",
                "acme,globex",
                "--watch",
                "--json",
                "--debounce",
                "0.2",
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert watch.stdout is not None
            first = json.loads(_first_json(watch))  # the initial full sync, applied by serve
            assert first["upserts"] == 4 and first["applied"] == 4
            assert "30 days" in serve.ask(ann, refund_q)["answer"]
            (drive / "acme/policies/refunds.md").write_text(REFUNDS_V2.replace("2026-09-01", "2026-01-02"))
            answer = wait_until(lambda: _answer_with(serve, ann, refund_q, "45 days"), 30, "the watched edit")
            assert cites(answer, "acme/policies/refunds.md")
        finally:
            watch.send_signal(signal.SIGTERM)
            _, err = watch.communicate(timeout=30)
        assert watch.returncode == 0 and "Traceback" not in err, err

        body = json.dumps(
            {
                "action": "upsert",
                "tenant": "acme",
                "doc_id": "crm/kb-17",
                "title": "VPN",
                "content": "# VPN\n\nThe VPN gateway for remote staff is vpn.acme.example on port 443.",
                "acl": ["group:staff"],
                "source_url": "https://crm.example/kb/17",
                "sequence": 1,
            }
        ).encode()
        pushed = serve.http.post("/v1/webhooks/crm", content=body, headers=signed_headers(HOOK, body, int(time.time())))
        assert pushed.status_code == 202, pushed.text
        vpn = wait_until(
            lambda: _answer_with(serve, ann, "Which port does the VPN gateway use?", "443"), 20, "the push"
        )
        assert vpn["claims"][0]["source_url"] == "https://crm.example/kb/17"


def test_killing_serve_mid_batch_and_restarting_loses_nothing(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    team = drive / "team"
    team.mkdir(parents=True)
    (team / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    n = 64
    for i in range(n):
        (team / f"room-{i:03d}.md").write_text(f"# Room {i}\n\nThe locker code for room {i} is {7000 + i}.\n")
    env = environment(tmp_path / "home", RAGSYNC_INDEX_BATCH_SIZE="8")
    serve = Serve(env)
    try:
        published = json.loads(cli(env, "sync", str(drive), "--tenant", "acme,globex", "--json", "--no-wait").stdout)
        assert published["upserts"] == n and "applied" not in published
        log = SqliteEventLog(tmp_path / "home" / "events.db")
        committed = wait_until(
            lambda: (c := log.committed_offsets(GROUP).get(TOPIC_DOCUMENTS, 0)) >= 8 and c,
            60,
            "the first committed batch",
        )
        serve.stop(signal.SIGKILL)
        assert committed < n, "killed while batches were still being applied"
        log.close()
    finally:
        serve.stop(signal.SIGKILL)

    with Serve(env) as restarted:  # takes over the dead owner's lock and the qdrant shard
        restarted.wait_drained()
        status = json.loads(cli(env, "status").stdout)
        assert status["owner"]["pid"] == restarted.pid
        acme = status["tenants"]["acme"]
        assert acme == {"documents": n, "passages": n, "vectors": n}, acme
        ann = token("acme", "ann", "staff")
        for i in (0, committed - 1, committed, n - 1):
            answer = restarted.ask(ann, f"What is the locker code for room {i}?")
            assert answer["answered"] and str(7000 + i) in answer["answer"], (i, answer)


def _first_json(proc: subprocess.Popen[str], timeout_s: float = 120) -> str:
    assert proc.stdout is not None
    started = time.monotonic()
    buffer = ""
    while time.monotonic() - started < timeout_s:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"watch exited: {proc.stderr.read() if proc.stderr else ''}")
        buffer += line
        if line.startswith("}"):
            return buffer
    raise AssertionError("no report from sync --watch")


def _answer_with(serve: Serve, tok: str, question: str, text: str) -> dict[str, object] | None:
    try:
        answer = serve.ask(tok, question)
    except httpx.HTTPError:
        return None
    return answer if answer["answered"] and text in str(answer["answer"]) else None
