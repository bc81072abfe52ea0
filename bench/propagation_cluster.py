"""The cluster harness of bench/propagation.py: a Faust worker applies what this process publishes to
Kafka; the probes query Elasticsearch through the real Retriever with the deny set in Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from propagation_events import (  # noqa: E402
    COSTS,
    MODEL,
    STAFF,
    TENANT,
    Probe,
    word,
)

from schemas.events import Event  # noqa: E402
from schemas.principal import AccessFilter  # noqa: E402


class Cluster:
    probers = 16

    def __init__(self, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.tag = tag
        self.env = {
            "RAGSYNC_PROFILE": "cluster",
            "RAGSYNC_HOME": str(tmp / "home"),
            "RAGSYNC_EMBED_MODEL_PATH": str(MODEL),
            "RAGSYNC_QDRANT_URL": "http://127.0.0.1:6333",
            "RAGSYNC_QDRANT_COLLECTION": f"bench{tag}",
            "RAGSYNC_KAFKA_TOPIC_PREFIX": f"bench{tag}.",
            "RAGSYNC_ES_INDEX_PREFIX": f"bench{tag}",
            "RAGSYNC_REDIS_NAMESPACE": f"bench{tag}",
            "RAGSYNC_CONFIG": os.devnull,
            "RAGSYNC_SESSION_SECRET": "bench-secret-0123456789abcdef0123456789",
        }
        from ragsync.settings import Settings
        from ragsync.wiring import build

        self.settings = Settings(
            profile="cluster",
            home=tmp / "home",
            embed_model_path=tmp / "no-model",  # the probes need no model: BM25 with the deny set
            qdrant_url="http://127.0.0.1:6333",
            qdrant_collection=f"bench{tag}",
            kafka_topic_prefix=f"bench{tag}.",
            es_index_prefix=f"bench{tag}",
            redis_namespace=f"bench{tag}",
        )
        self.components = build(self.settings, with_embedder=False)
        self.log_path = tmp / "worker.log"
        self.worker: subprocess.Popen[bytes] | None = None
        self._vector: Any = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        env.update(self.env, PYTHONPATH=str(ROOT))
        with self.log_path.open("wb") as out:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "ragsync.cli", "worker"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def publish(self, events: list[Event]) -> None:
        self.components.events.publish_many(events)

    def publish_one(self, event: Event) -> None:
        self.components.events.publish(event)
        self.components.events.flush()

    def indexed(self, doc_ids: list[str]) -> int:
        docs = self.components.docs
        return sum(1 for d in doc_ids if (s := docs.get(TENANT, d)) is not None and s.content_version)

    def backlog(self) -> int:
        return int(self.components.events.lag("documents", f"{self.settings.kafka_topic_prefix}indexer"))

    def documents_end(self) -> int:
        """Records ever written to the documents topic (its end offsets): with the lag, how many the
        worker consumed (the deletions' erase markers and tombstones land there too)."""
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec

        events: Any = self.components.events
        topic = events.kafka_topic("documents")
        tps = [TopicPartition(topic, p) for p in events._partitions[topic]]
        ends = events._admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        return int(sum(ends[tp].offset for tp in tps))

    @property
    def vector(self) -> Any:
        if self._vector is None:
            from qdrant_client import QdrantClient

            from indexer.qdrant_server import QdrantVectorIndex

            self._vector = QdrantVectorIndex(
                QdrantClient(url="http://127.0.0.1:6333"), 384, collection=f"bench{self.tag}"
            )
        return self._vector

    def probe(self, p: Probe, retriever: Any) -> None:
        now_access = AccessFilter.for_principal(STAFF, datetime.now(UTC))
        if p.effective is None:
            began = time.monotonic()
            if p.first_query_began is None:
                p.first_query_began = began
            hits = retriever.rank(word(p.kind[:3], p.index), now_access).lexical
            if not any(h.passage.doc_id == p.doc_id for h in hits):
                p.effective = time.monotonic()
                p.effective_query_began = began
            else:
                # Not effective yet: query again RETRY_S from now, not after the four store checks
                # below (seconds on a loaded machine): they made the probe's resolution, not the
                # worker, the effective p99 (1.41 s measured while the worker's deny entries were
                # written 0.36 s p99 after publish). The stores are checked once it is effective;
                # a check that starts later can only report a later convergence.
                return
        if p.converged is None:
            c = self.components
            checks: dict[str, Callable[[], bool]] = {
                "lexical": lambda: (
                    c.lexical.count(TENANT, p.doc_id) == 0
                    if p.kind == "deletion"
                    else not c.lexical.passages(now_access, p.ids)
                ),
                "vector": lambda: self._vector_ok(p, now_access),
                "cache": lambda: c.cache.generation(TENANT) > p.generation,
                "deny": lambda: not c.deny.lookup(TENANT, [p.doc_id]),
            }
            for name, check in checks.items():
                if name in p.done:
                    continue  # each holds once true: checked until it is
                began = time.monotonic()
                held = check()
                COSTS.setdefault(name, []).append(time.monotonic() - began)
                if held:
                    p.done[name] = time.monotonic() - p.published
            if len(p.done) == len(checks) and p.effective is not None:
                p.converged = time.monotonic()

    @staticmethod
    def settled(p: Probe) -> bool:
        return p.converged is not None

    def finish(self, probes: list[Probe], deadline: float) -> None:
        """Every probe followed its own event to convergence."""

    def _vector_ok(self, p: Probe, access: AccessFilter) -> bool:
        """The doc's points by ID (cheap lookups, not a filtered count): none left after a deletion,
        none readable by the principal after a revocation."""
        from indexer.payload import point_id

        ids = [point_id(TENANT, pid) for pid in p.ids]
        client = self.vector._client
        points = client.retrieve(self.vector.collection, ids=ids, with_payload=["acl"], with_vectors=False)
        if p.kind == "deletion":
            return not points
        mine = set(access.entries)
        return not any(mine & set((pt.payload or {}).get("acl", [])) for pt in points)

    def worker_records(self) -> dict[str, Any]:
        """The worker's own propagation records (indexer.propagation): where the time went, per copy."""
        from indexer.propagation import summarize

        time.sleep(2)  # the last confirmations' records
        s = summarize(self.components.propagation.records(), self.settings.revocation_bound_s)
        by_copy = {k: {q: round(v, 4) for q, v in d.items()} for k, d in s.by_copy.items()}
        return {"events": s.events, "by_copy": by_copy}

    def versions(self) -> dict[str, str]:
        import httpx

        out: dict[str, str] = {}
        try:
            out["qdrant"] = httpx.get("http://127.0.0.1:6333/", timeout=5).json()["version"]
        except Exception:
            out["qdrant"] = "?"
        try:
            out["elasticsearch"] = self.components.lexical.client.nodes.info()["nodes"].popitem()[1]["version"]  # type: ignore[attr-defined]
        except Exception:
            out["elasticsearch"] = "?"
        try:
            import redis

            out["redis"] = str(redis.Redis.from_url(self.settings.redis_url).info("server")["redis_version"])
        except Exception:
            out["redis"] = "?"
        return out

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(60)
            except subprocess.TimeoutExpired:
                self.worker.kill()
        try:
            from elasticsearch import Elasticsearch

            es = Elasticsearch(self.settings.es_url)
            names = list(es.indices.get(index=f"bench{self.tag}*"))
            if names:
                es.indices.delete(index=",".join(names))
            es.close()
            self.vector.drop_all()
            from indexer.redis_cache import RedisCache

            RedisCache(self.settings.redis_url, namespace=f"bench{self.tag}").drop_all()
            events = self.components.events
            admin = events._admin  # type: ignore[attr-defined]
            admin.delete_topics([t for t in admin.list_topics() if t.startswith(f"bench{self.tag}.")])
        except Exception as exc:
            print(f"cleanup: {exc}", file=sys.stderr)
        self.components.close()
