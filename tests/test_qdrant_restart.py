"""A Qdrant server restart during ingest loses nothing: the worker retries, offsets wait for the write.

The test starts its OWN Qdrant server (the same binary the launcher runs) on free ports with its own
storage, never the shared one, kills it with SIGKILL while a Faust worker is indexing, and starts it
again on the same storage. Every document must end up in Qdrant with as many points as Elasticsearch
holds for it: a write that failed while the server was down was retried, and its Kafka offset was not
committed before that (otherwise the document would be missing after the restart).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH, free_port, require_service

from ragsync.cli import main

REPO = Path(__file__).resolve().parents[1]
DOCS = 60


def launcher() -> Any:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("ragsync_local_services", str(REPO / "compose/local/services"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class PrivateQdrant:
    """A Qdrant server of this test only: its own ports, storage and process."""

    def __init__(self, root: Path) -> None:
        services = launcher()
        self.binary = services.find_qdrant()
        self.http, self.grpc = free_port(), free_port()
        (root / "storage").mkdir(parents=True)
        (root / "snapshots").mkdir()
        self.env = services.qdrant_env(root / "storage", root / "snapshots", self.http, self.grpc)
        self.root = root
        self.url = f"http://127.0.0.1:{self.http}"
        self.proc: subprocess.Popen[bytes] | None = None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def start(self) -> None:
        with (self.root / "qdrant.log").open("ab") as out:
            self.proc = subprocess.Popen([str(self.binary)], cwd=self.root, env=self.env, stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while not self.ready():
            assert self.proc.poll() is None, (self.root / "qdrant.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "private qdrant not ready after 60 s"
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def qdrant(tmp_path: Path) -> Iterator[PrivateQdrant]:
    server = PrivateQdrant(tmp_path / "qdrant")
    server.start()
    try:
        yield server
    finally:
        server.kill()


def write_drive(root: Path) -> None:
    (root / "acme").mkdir(parents=True)
    (root / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(DOCS):
        sections = "\n\n".join(
            f"## Part {j}\n\nDocument {i} part {j} explains procedure {i * 10 + j} in detail. " * 3 for j in range(4)
        )
        (root / "acme" / f"doc{i:03d}.md").write_text(f"# Doc {i}\n\n{sections}\n")


def count(url: str, collection: str, doc_id: str | None = None) -> int:
    from qdrant_client import QdrantClient, models

    must = [models.FieldCondition(key="tenant", match=models.MatchValue(value="acme"))]
    if doc_id:
        must.append(models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id)))
    client = QdrantClient(url=url, check_compatibility=False, timeout=5)
    try:
        if not client.collection_exists(collection):
            return 0
        return int(client.count(collection, count_filter=models.Filter(must=must), exact=True).count)
    except Exception:  # down or starting: nothing countable yet
        return -1
    finally:
        client.close()


@pytest.mark.cluster
@pytest.mark.slow  # about 90 s: a worker, 60 documents embedded, a server crash and restart
@pytest.mark.timeout(420)
def test_qdrant_restart_during_ingest_loses_nothing(tmp_path: Path, qdrant: PrivateQdrant) -> None:
    for service in ("kafka", "elasticsearch", "redis"):
        require_service(service)
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.fail(f"no embedding model at {MODEL_PATH}")
    tag = f"qrestart{uuid.uuid4().hex[:8]}"
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_SESSION_SECRET": "s",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_QDRANT_URL": qdrant.url,
        "RAGSYNC_QDRANT_COLLECTION": tag,
        "RAGSYNC_KAFKA_TOPIC_PREFIX": f"{tag}.",
        "RAGSYNC_ES_INDEX_PREFIX": tag,
        # its own namespace: no embedding cached by another run may spare this worker its work
        "RAGSYNC_REDIS_NAMESPACE": tag,
        "RAGSYNC_CONFIG": os.devnull,
    }
    drive = tmp_path / "drive"
    write_drive(drive)
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", "-v", "worker"],
            cwd=REPO,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        out = CliRunner().invoke(
            main, ["sync", str(drive), "--tenant", "acme", "--json"], env=env, catch_exceptions=False
        )
        assert out.exit_code == 0 and json.loads(out.output)["upserts"] == DOCS, out.output

        deadline = time.monotonic() + 120
        while count(qdrant.url, tag) <= 0:
            assert worker.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker wrote nothing to Qdrant"
            time.sleep(0.1)
        before = count(qdrant.url, tag)
        qdrant.kill()  # hard crash in the middle of the ingest
        time.sleep(3)  # the worker's writes fail meanwhile
        qdrant.start()  # same storage
        assert count(qdrant.url, tag) >= before, "points acknowledged before the crash survive it"

        from indexer.elastic import ElasticLexicalIndex
        from schemas.events import qualify_doc_id, source_name_from

        lexical = ElasticLexicalIndex("http://127.0.0.1:9200", prefix=tag)
        try:
            docs = [qualify_doc_id(source_name_from(drive.name, "drive"), f"acme/doc{i:03d}.md") for i in range(DOCS)]

            def converged() -> bool:
                return all(0 < lexical.count("acme", d) == count(qdrant.url, tag, d) for d in docs)

            deadline = time.monotonic() + 240
            while not converged():
                assert worker.poll() is None, log_path.read_text()[-3000:]
                if time.monotonic() > deadline:
                    counts = {d: (lexical.count("acme", d), count(qdrant.url, tag, d)) for d in docs}
                    wrong = {d: c for d, c in counts.items() if not 0 < c[0] == c[1]}
                    raise AssertionError(f"documents missing after the restart (elasticsearch, qdrant): {wrong}")
                time.sleep(1)
            total = lexical.count("acme")
            assert count(qdrant.url, tag) == total and total >= DOCS * 4
            assert before < total, "the crash happened before the ingest ended"
        finally:
            lexical.drop_all()
            lexical.close()
        assert "store write failed" in log_path.read_text(), "the worker saw the outage and retried"
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        from indexer.redis_cache import RedisCache

        RedisCache("redis://127.0.0.1:6379/0", namespace=tag).drop_all()
