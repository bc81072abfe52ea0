"""The whole job on the cluster profile through the real CLI: Kafka, a Faust worker, Elasticsearch, Redis.

Dense retrieval is off here: without a Qdrant server, qdrant-client's local mode holds a file lock
that a worker process and an asking process cannot share (the Qdrant adapter has its own suite).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import require_service

from ragsync.cli import main
from ragsync.demo import build_drive

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    for service in ("kafka", "elasticsearch", "redis"):
        require_service(service)
    tag = uuid.uuid4().hex[:8]
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_SESSION_SECRET": "cluster-secret",
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "no-model"),
        "RAGSYNC_KAFKA_TOPIC_PREFIX": f"e2e{tag}.",
        "RAGSYNC_ES_INDEX_PREFIX": f"e2e{tag}",
        "RAGSYNC_REDIS_NAMESPACE": f"e2e{tag}",
        "RAGSYNC_CONFIG": os.devnull,  # no settings file
    }
    yield env
    from elasticsearch import Elasticsearch

    es = Elasticsearch("http://127.0.0.1:9200")
    try:
        names = list(es.indices.get(index=f"e2e{tag}*"))
        if names:
            es.indices.delete(index=",".join(names))
    finally:
        es.close()


def cli(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def ask(env: dict[str, str], token: str, question: str) -> dict[str, Any]:
    return json.loads(cli(env, "ask", question, "--token", token, "--json"))


def eventually(check: Any, timeout_s: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_cluster_profile_sync_worker_ask_revoke_delete(tmp_path: Path, cluster_env: dict[str, str]) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    env = {**os.environ, **cluster_env, "PYTHONPATH": str(REPO)}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ragsync.cli", "worker"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        report = json.loads(cli(cluster_env, "sync", str(drive), "--json"))
        assert report["upserts"] == 4 and "applied" not in report, "the cluster sync only publishes"
        hal = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "hal", "--groups", "staff,hr").strip()
        question = "What is the salary band for a senior engineer?"
        eventually(lambda: ask(cluster_env, hal, question)["answered"], what="the worker to index the drive")
        answer = ask(cluster_env, hal, question)
        assert "90,000" in answer["answer"] and answer["claims"][0]["passage_id"].startswith("acme/hr/salaries.md@1#")

        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        assert json.loads(cli(cluster_env, "sync", str(drive), "--json"))["acl_changes"] == 1
        eventually(lambda: not ask(cluster_env, hal, question)["answered"], 60, "the revocation")

        (drive / "acme/hr/salaries.md").unlink()
        assert json.loads(cli(cluster_env, "sync", str(drive), "--json"))["deletes"] == 1

        def audited() -> bool:
            rows = json.loads(cli(cluster_env, "audit", "deletions", "--json"))
            return [r["doc_id"] for r in rows] == ["acme/hr/salaries.md"]

        eventually(audited, 60, "the deletion audit record")
        rows = json.loads(cli(cluster_env, "audit", "deletions", "--json"))
        assert "elasticsearch" in rows[0]["removed_at"]
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        log.close()
