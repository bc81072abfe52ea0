"""A real Faust worker (Kafka and the stores of tests/test_kafka_pipeline.py) with its documents child on
(`worker_documents_child`, indexer.documents_child): the child is killed with SIGKILL again and again while
the worker embeds a document backlog, and every document is applied once, none dead-lettered, none lost."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import MODEL_PATH, require_service, unique
from test_kafka_pipeline import Deployment, long_doc, stores_profile, upsert, worker_summary
from waiting import wait_until

from streams.ports import TOPIC_DOCUMENTS

KILLS = 3


@dataclass
class ChildDeployment(Deployment):
    """The workers run with the documents child and the real model (vectors in a collection of their own)."""

    collection: str = ""

    def env(self) -> dict[str, str]:
        env = super().env()
        env.update(
            RAGSYNC_WORKER_DOCUMENTS_CHILD="true",
            RAGSYNC_EMBED_MODEL_PATH=str(MODEL_PATH),
            RAGSYNC_QDRANT_COLLECTION=self.collection,
        )
        return env


def child_of(pid: int) -> int | None:
    """The worker's spawned child (multiprocessing's spawn_main), if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            return int(entry.name)
    return None


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no model at {MODEL_PATH}")
def test_a_worker_whose_documents_child_is_killed_applies_every_document(tmp_path: Path) -> None:
    require_service("kafka")
    d = ChildDeployment(tmp_path, stores_profile(), collection=unique("kc"))
    try:
        events = [
            upsert(d.tenant, f"kafka-test:c-{i}.md", 1, long_doc(f"kafka-test:c-{i}.md", 1, sections=12))
            for i in range(12)
        ]
        expected = {e.doc_id: d.expected_passages(e) for e in events}
        for event in events:
            d.log.publish(event)
        d.log.flush()
        worker = d.start_worker()

        def applied() -> int:
            return sum(d.applied_version(doc) == 1 for doc in expected)

        killed: list[int] = []
        for _ in range(KILLS):
            # Progress first (a document applied since the last kill), then a kill while the next one is embedded.
            floor = applied()
            wait_until(lambda f=floor: applied() > f, 120, "a document applied by the child", explain=d.logs)
            if applied() == len(events):
                break
            pid = child_of(worker.pid)
            assert pid is not None and pid not in killed, "a new child for each one killed"
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            time.sleep(0.5)
        wait_until(lambda: applied() == len(events), 240, "every document applied", explain=d.logs)
        wait_until(lambda: d.log.lag(TOPIC_DOCUMENTS, d.app_id) == 0, 30, "the offsets committed", explain=d.logs)
        d.stop_worker(worker)
        log = d.log_paths[-1].read_text(errors="replace")
        deaths = log.count("the event is retried with a new child")
        print(f"\n{len(killed)} children killed, {deaths} calls failed with ChildDied and retried")
        assert killed and deaths >= 1, d.logs()
        applied_n, _, dead = worker_summary(log)["documents"]
        assert dead == 0 and applied_n == len(events), (applied_n, dead)
        for doc, want in expected.items():
            assert d.stores.lexical.count(d.tenant, doc) == want, doc
    finally:
        d.close()
        try:
            import httpx

            httpx.delete(f"http://127.0.0.1:6333/collections/{d.collection}", timeout=10)
        except Exception:
            pass  # cleaning the shared Qdrant is a courtesy
