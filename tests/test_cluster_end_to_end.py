"""The whole job on the cluster profile through the real CLI, as the README runs it: Kafka, a Faust
worker, Elasticsearch, the Qdrant server and Redis, with the embedding model loaded (dense retrieval on).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH, QDRANT_URL, free_port, require_service
from waiting import wait_until

from ragsync.cli import main
from ragsync.demo import build_drive

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cluster_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    for service in ("kafka", "elasticsearch", "redis", "qdrant"):
        require_service(service)
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.fail(
            f"no embedding model at {MODEL_PATH}: the cluster runs with dense retrieval (RAGSYNC_EMBED_MODEL_PATH)"
        )
    tag = uuid.uuid4().hex[:8]
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_SESSION_SECRET": "cluster-secret",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_QDRANT_URL": QDRANT_URL,
        "RAGSYNC_QDRANT_COLLECTION": f"e2e{tag}",
        "RAGSYNC_KAFKA_TOPIC_PREFIX": f"e2e{tag}.",
        "RAGSYNC_ES_INDEX_PREFIX": f"e2e{tag}",
        "RAGSYNC_REDIS_NAMESPACE": f"e2e{tag}",
        "RAGSYNC_CONFIG": os.devnull,  # no settings file
    }
    yield env
    from elasticsearch import Elasticsearch
    from qdrant_client import QdrantClient

    es = Elasticsearch("http://127.0.0.1:9200")
    try:
        names = list(es.indices.get(index=f"e2e{tag}*"))
        if names:
            es.indices.delete(index=",".join(names))
    finally:
        es.close()
    qdrant = QdrantClient(url=QDRANT_URL, check_compatibility=False)
    try:
        qdrant.delete_collection(f"e2e{tag}")
    finally:
        qdrant.close()
    from indexer.redis_cache import RedisCache

    RedisCache("redis://127.0.0.1:6379/0", namespace=f"e2e{tag}").drop_all()


def shared_embeddings(env: dict[str, str]) -> int:
    """Vectors the workers left in the shared (Redis) embedding cache."""
    import redis

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        return sum(1 for _ in client.scan_iter(match=f"{env['RAGSYNC_REDIS_NAMESPACE']}:emb:*", count=500))
    finally:
        client.close()


def points(env: dict[str, str], tenant: str, doc_id: str | None = None) -> int:
    """What the Qdrant server itself holds, counted exactly (not through the adapter)."""
    from qdrant_client import QdrantClient, models

    must = [models.FieldCondition(key="tenant", match=models.MatchValue(value=tenant))]
    if doc_id is not None:
        must.append(models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id)))
    client = QdrantClient(url=env["RAGSYNC_QDRANT_URL"], check_compatibility=False)
    try:
        flt = models.Filter(must=must)
        return int(client.count(env["RAGSYNC_QDRANT_COLLECTION"], count_filter=flt, exact=True).count)
    finally:
        client.close()


def cli(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def ask(env: dict[str, str], token: str, question: str) -> dict[str, Any]:
    return json.loads(cli(env, "ask", question, "--token", token, "--json", "--show-trace"))


def dense_ids(answer: dict[str, Any]) -> list[str]:
    return [pid for search in answer["trace"]["searches"] for pid in search["dense_ids"]]


def lexical_ids(answer: dict[str, Any]) -> list[str]:
    return [pid for search in answer["trace"]["searches"] for pid in search["lexical_ids"]]


def start_ragsync(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`python -m ragsync.cli ARGS` of this checkout, its output in `log` (the child keeps the file open)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a worker finishes the batch in hand and commits), then kill whatever is still up after 30 s."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_cluster_profile_sync_worker_ask_revoke_delete(tmp_path: Path, cluster_env: dict[str, str]) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    env = {**os.environ, **cluster_env, "PYTHONPATH": str(REPO)}
    worker = start_ragsync(["worker"], env, tmp_path / "worker.log")
    try:
        report = json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme,globex", "--json"))
        assert report["upserts"] == 4 and "applied" not in report, "the cluster sync only publishes"
        hal = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "hal", "--groups", "staff,hr").strip()
        ann = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff").strip()
        gil = cli(cluster_env, "token", "issue", "--tenant", "globex", "--user", "gil", "--groups", "staff").strip()
        question = "What is the salary band for a senior engineer?"
        wait_until(
            lambda: ask(cluster_env, hal, question)["answered"], 90, "the worker to index the drive", every_s=0.5
        )
        wait_until(lambda: points(cluster_env, "globex") > 0, 60, "the worker to index globex", every_s=0.5)
        answer = ask(cluster_env, hal, question)
        assert "90,000" in answer["answer"] and answer["claims"][0]["passage_id"].startswith(
            "drive:acme/hr/salaries.md@1#"
        )
        salaries_dense = [p for p in dense_ids(answer) if p.startswith("drive:acme/hr/salaries.md@1#")]
        assert salaries_dense, f"the dense ranker found no salaries passage: {answer['trace']['searches']}"
        held = points(cluster_env, "acme", "drive:acme/hr/salaries.md")
        assert held >= len(set(salaries_dense)) > 0
        assert points(cluster_env, "acme") >= 3 and points(cluster_env, "globex") >= 1
        assert shared_embeddings(cluster_env) >= points(cluster_env, "acme"), "the worker's vectors are shared"

        # Other principals: staff without hr, and another tenant, never get a salaries passage from either ranker.
        for token, tenant in ((ann, "acme"), (gil, "globex")):
            seen = ask(cluster_env, token, question)
            ranked = dense_ids(seen) + lexical_ids(seen)
            assert not any(p.startswith("drive:acme/hr/") for p in ranked), ranked
            assert all(p.startswith(f"drive:{tenant}/") for p in ranked), ranked
            assert "90,000" not in (seen["answer"] or "")
        refunds = ask(cluster_env, gil, "What is the refund window?")
        assert dense_ids(refunds) and all(p.startswith("drive:globex/") for p in dense_ids(refunds))

        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        assert json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme,globex", "--json"))["acl_changes"] == 1
        wait_until(lambda: not ask(cluster_env, hal, question)["answered"], 60, "the revocation", every_s=0.5)
        revoked = ask(cluster_env, hal, question)
        assert not any(p.startswith("drive:acme/hr/") for p in dense_ids(revoked) + lexical_ids(revoked))
        assert points(cluster_env, "acme", "drive:acme/hr/salaries.md") == held, "an ACL change keeps the points"

        (drive / "acme/hr/salaries.md").unlink()
        assert json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme,globex", "--json"))["deletes"] == 1

        def audited() -> bool:
            rows = json.loads(cli(cluster_env, "audit", "deletions", "--json"))
            return [r["doc_id"] for r in rows] == ["drive:acme/hr/salaries.md"]

        wait_until(audited, 60, "the deletion audit record", every_s=0.5)
        rows = json.loads(cli(cluster_env, "audit", "deletions", "--json"))
        assert {"elasticsearch", "qdrant"} <= set(rows[0]["removed_at"]), rows[0]
        assert points(cluster_env, "acme", "drive:acme/hr/salaries.md") == 0, "the server still holds deleted points"
        assert points(cluster_env, "acme") > 0
    finally:
        stop(worker)


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_cluster_serve_syncs_declared_sources_on_their_schedule(tmp_path: Path, cluster_env: dict[str, str]) -> None:
    """[[sources]] on the cluster profile: serve scans and publishes them to Kafka on their interval,
    the Faust worker applies them, and a manifest edit is a revocation without anyone running sync."""
    import httpx

    drive = tmp_path / "drive"
    build_drive(drive)
    config = tmp_path / "ragsync.toml"
    config.write_text(
        f'[[sources]]\nname = "handbook"\npath = "{drive}"\ntenants = ["acme", "globex"]\ninterval_s = 1\n'
    )
    env = {
        **os.environ,
        **cluster_env,
        "PYTHONPATH": str(REPO),
        "RAGSYNC_CONFIG": str(config),
        "RAGSYNC_METRICS_PORT": str(free_port()),
        "RAGSYNC_WORKER_METRICS_PORT": str(free_port()),
    }
    port = free_port()
    worker = start_ragsync(["worker"], env, tmp_path / "worker.log")
    serve = start_ragsync(["serve", "--port", str(port)], env, tmp_path / "serve.log")
    hal = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "hal", "--groups", "staff,hr").strip()
    question = "What is the salary band for a senior engineer?"

    def answered() -> bool:
        assert serve.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            response = httpx.post(
                f"http://127.0.0.1:{port}/v1/ask",
                json={"question": question},
                headers={"Authorization": f"Bearer {hal}"},
                timeout=30,
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and bool(response.json()["answered"])

    try:
        wait_until(answered, 150, "serve to publish the declared source and the worker to apply it", every_s=0.5)
        assert "publishing handbook to Kafka" in (tmp_path / "serve.log").read_text()
        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        wait_until(lambda: not answered(), 60, "the scheduled pass to publish the revocation", every_s=0.5)
    finally:
        stop(serve, worker)
