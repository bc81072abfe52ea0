#!/usr/bin/env python3
"""Propagation of revocations and deletions behind a document backlog: effective and converged times.

    python3 bench/propagation.py --profile cluster     # Kafka, a Faust worker, Elasticsearch, Qdrant, Redis
    python3 bench/propagation.py --profile embedded    # `ragsync serve` owning a fresh home

Phases (one fresh namespace per run: topics, indexes, collection, Redis keys, home):
  0. index the targets: 200 documents to revoke and 200 to delete, each with a word of its own,
     readable by the probing principal (group:staff); wait until every store has them
  1. publish the backlog: 5,000 document upserts (with the embedding model loaded, minutes of work)
  2. while the backlog drains, publish the 200 revocations and 200 deletions interleaved, one every
     --pace-ms, and for each one measure, from its publish:
       effective: until a query by the affected principal (the real Retriever: the store's BM25 with the
                  permission filter, then the deny set) no longer returns the document;
       converged: until every store and cache holds the new state: the lexical store (no passage
                  readable by the principal / none left), the vector store (likewise, by its own filter),
                  the cache generation bumped, the deny entry cleared (cluster: probed directly; embedded:
                  the worker's own propagation record, since the vector shard is locked by `serve`).
Writes bench/results/propagation-<profile>.json and prints a table. Goals (cluster): effective p99
<= 1 s while the backlog still drains, converged p99 <= 2 s.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.propagation import percentile  # noqa: E402
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id  # noqa: E402
from schemas.principal import AccessFilter, Principal  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SERVED_EVERY = 5
RETRY_S = 0.05
"""A probe's first query RETRY_S after its event's publish, and again RETRY_S after each query that
still returned the document: the resolution of `effective` (plus the query's own time)."""
COSTS: dict[str, list[float]] = {}
"""Seconds each probe check took (the probe's own cost, reported beside the figures)."""
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH", ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx"))
if not (MODEL / "model.onnx").is_file():
    MODEL = Path("/work/shared/models/all-MiniLM-L6-v2-onnx")
TENANT = "bench"
SOURCE = "bench"
STAFF = Principal(tenant=TENANT, user="probe", groups=("staff",))
OPEN_ACL = ("group:staff",)
CLOSED_ACL = ("group:board",)


def word(kind: str, i: int) -> str:
    return f"probe{kind}{i:04d}qxq"


def upsert(doc_id: str, version: int, content: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, version, EventKind.UPSERT),
        kind=EventKind.UPSERT,
        tenant=TENANT,
        doc_id=doc_id,
        version=version,
        source=SOURCE,
        payload=UpsertPayload(
            title="",
            content=content,
            content_type="markdown",
            content_hash=f"{abs(hash(content)):016x}",
            acl=OPEN_ACL,
            source_url=doc_id,
        ),
    )


def revocation(doc_id: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, 2, EventKind.ACL),
        kind=EventKind.ACL,
        tenant=TENANT,
        doc_id=doc_id,
        version=2,
        source=SOURCE,
        payload=AclPayload(acl=CLOSED_ACL),
    )


def deletion(doc_id: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, 2, EventKind.DELETE),
        kind=EventKind.DELETE,
        tenant=TENANT,
        doc_id=doc_id,
        version=2,
        source=SOURCE,
        payload=DeletePayload(reason="bench"),
    )


def target_doc(kind: str, i: int) -> str:
    return f"{SOURCE}:{kind}/target-{i:04d}.md"


def target_content(kind: str, i: int) -> str:
    return f"# Target {kind} {i}\n\nThis page names {word(kind, i)} once, for the probe to find it.\n"


def backlog_content(i: int) -> str:
    body = " ".join(f"Backlog page {i} line {n} talks about shipping, invoices and the night shift." for n in range(6))
    return f"# Backlog {i}\n\n{body}\n"


@dataclass
class Probe:
    kind: str  # "revocation" | "deletion"
    index: int
    doc_id: str
    event: Event
    published: float = 0.0  # monotonic
    seq: int = 0
    served: float | None = None
    """Embedded, every SERVED_EVERY-th probe: when serve's own answer (a traced ask) stopped citing it."""
    effective: float | None = None
    converged: float | None = None
    generation: int = 0
    ids: list[str] = field(default_factory=list)
    done: dict[str, float] = field(default_factory=dict)
    """Seconds from publish until each store or cache check first held."""


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 4),
        "p99": round(percentile(values, 99), 4),
        "max": round(max(values), 4) if values else 0.0,
    }


# ---------------------------------------------------------------------------- cluster


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
            hits = retriever.rank(word(p.kind[:3], p.index), now_access).lexical
            if not any(h.passage.doc_id == p.doc_id for h in hits):
                p.effective = time.monotonic()
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


def run(runner: Any, args: argparse.Namespace) -> dict[str, Any]:
    from query.retrieval import RetrievalSettings, Retriever

    c = runner.components
    retriever = None  # opened once the stores exist (embedded: serve creates them)
    targets = [(k, i) for k in ("rev", "del") for i in range(args.revocations if k == "rev" else args.deletions)]
    docs = [target_doc(k, i) for k, i in targets]
    print(f"phase 0: {len(docs)} targets", flush=True)
    runner.start()
    started = time.monotonic()
    runner.publish([upsert(target_doc(k, i), 1, target_content(k, i)) for k, i in targets])
    while runner.indexed(docs) < len(docs):
        if time.monotonic() - started > args.timeout_s:
            raise SystemExit(f"targets not indexed after {args.timeout_s:.0f}s; see {runner.log_path}")
        time.sleep(1)
    ids = {d: list(c.docs.get(TENANT, d).passage_ids) for d in docs}
    # The affected principal's query: BM25 with the store's permission filter, then the deny set (the
    # real Retriever over the stores serve or the worker writes; no model needed to find one word).
    retriever = Retriever(c.lexical, None, None, None, RetrievalSettings(candidates=10), deny=c.deny)
    print(f"  indexed in {time.monotonic() - started:.0f}s", flush=True)
    if args.profile == "cluster":
        runner.vector  # noqa: B018  (open the probe's client before the clock runs)

    print(f"phase 1: backlog of {args.backlog} upserts", flush=True)
    runner.publish([upsert(f"{SOURCE}:backlog/doc-{i:05d}.md", 1, backlog_content(i)) for i in range(args.backlog)])

    print(
        f"phase 2: {args.revocations} revocations and {args.deletions} deletions, one every {args.pace_ms} ms",
        flush=True,
    )
    probes: list[Probe] = []
    order = [("revocation", i) for i in range(args.revocations)] + [("deletion", i) for i in range(args.deletions)]
    order.sort(key=lambda kv: (kv[1], kv[0]))  # interleaved
    deadline = [time.monotonic() + args.timeout_s]

    # A fixed set of probing threads takes the pending probes in order of when each is due (published,
    # or RETRY_S after its last query), so the probes' own query load stays bounded and no probe
    # starves: one thread per probe, or a pool following each probe to its end while later ones
    # queued, measured the probes' own queue (30 s "effective" while the deny entry took 0.05 s).
    due: list[tuple[float, int, Probe]] = []
    lock = threading.Lock()
    publishing = [True]
    probe_errors: list[str] = []

    def prober() -> None:
        while time.monotonic() < deadline[0]:
            with lock:
                p = heapq.heappop(due)[2] if due and due[0][0] <= time.monotonic() else None
            if p is None:
                if not publishing[0] and not due:
                    return
                time.sleep(0.002)
                continue
            try:
                runner.probe(p, retriever)
            except Exception as exc:  # a store timing out under load: that probe is retried, not lost
                with lock:
                    probe_errors.append(f"{type(exc).__name__}: {exc}")
            if not runner.settled(p):
                with lock:
                    heapq.heappush(due, (time.monotonic() + RETRY_S, p.seq, p))

    backlog_at_start = runner.backlog()
    threads = [threading.Thread(target=prober, daemon=True) for _ in range(args.probers or runner.probers)]
    for t in threads:
        t.start()
    for kind, i in order:
        doc = target_doc(kind[:3], i)
        event = revocation(doc) if kind == "revocation" else deletion(doc)
        probe = Probe(kind, i, doc, event, generation=c.cache.generation(TENANT) if args.profile == "cluster" else 0)
        probe.ids = ids[doc]
        probe.published = time.monotonic()
        runner.publish_one(event)
        probe.seq = len(probes)
        probes.append(probe)
        with lock:
            heapq.heappush(due, (probe.published + RETRY_S, probe.seq, probe))
        time.sleep(args.pace_ms / 1000)
    deadline[0] = time.monotonic() + args.timeout_s
    publishing[0] = False
    for t in threads:
        t.join()
    runner.finish(probes, deadline[0])
    backlog_at_end = runner.backlog()
    result = report(args, probes, backlog_at_start, backlog_at_end, runner.versions())
    result["worker_records"] = runner.worker_records()
    result["probe_cost_s"] = {name: summary(values) for name, values in COSTS.items()}
    result["probe_errors"] = {"count": len(probe_errors), "first": probe_errors[:3]}
    return result


def report(
    args: argparse.Namespace, probes: list[Probe], backlog_start: int, backlog_end: int, versions: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "profile": args.profile,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "counts": {
            "backlog_upserts": args.backlog,
            "revocations": args.revocations,
            "deletions": args.deletions,
            "pace_ms": args.pace_ms,
            "documents_backlog_when_events_started": backlog_start,
            "documents_backlog_when_all_converged": backlog_end,
        },
    }
    for kind in ("revocation", "deletion"):
        mine = [p for p in probes if p.kind == kind]
        eff = [p.effective - p.published for p in mine if p.effective is not None]
        conv = [p.converged - p.published for p in mine if p.converged is not None]
        out[kind] = {
            "effective_s": summary(eff),
            "converged_s": summary(conv),
            "per_copy_s": {
                name: summary([p.done[name] for p in mine if name in p.done])
                for name in sorted({n for p in mine for n in p.done})
            },
            "measured": len(mine),
            **(
                {
                    "served_effective_s": summary([p.served - p.published for p in mine if p.served is not None]),
                    "served_measured": sum(1 for p in mine if p.served is not None),
                }
                if args.profile == "embedded"
                else {}
            ),
            "never_effective": sum(1 for p in mine if p.effective is None),
            "never_converged": sum(1 for p in mine if p.converged is None),
        }
    rev, dele = out["revocation"], out["deletion"]
    out["goals"] = {
        "effective_p99_le_1s": max(rev["effective_s"]["p99"], dele["effective_s"]["p99"]) <= 1.0,
        "converged_p99_le_2s": max(rev["converged_s"]["p99"], dele["converged_s"]["p99"]) <= 2.0,
        "backlog_still_draining": backlog_end > 0,
    }
    import faust

    out["versions"] = {
        "python": platform.python_version(),
        "ragsync": "0.1.0",
        "faust-streaming": getattr(faust, "__version__", "?"),
        "machine": f"{os.cpu_count()} cores",
        **versions,
    }
    return out


def table(result: dict[str, Any]) -> str:
    lines = [f"propagation ({result['profile']}), seconds from publish", f"{'':<12}{'p50':>8}{'p99':>8}{'max':>8}"]
    for kind in ("revocation", "deletion"):
        for what in ("effective_s", "converged_s"):
            s = result[kind][what]
            lines.append(f"{kind[:3]} {what[:-2]:<8}{s['p50']:>8.3f}{s['p99']:>8.3f}{s['max']:>8.3f}")
    for kind in ("revocation", "deletion"):
        if "served_effective_s" in result[kind]:
            s = result[kind]["served_effective_s"]
            n = result[kind]["served_measured"]
            row = f"{s['p50']:>8.3f}{s['p99']:>8.3f}{s['max']:>8.3f}"
            lines.append(f"{kind[:3]} served  {row}  (serve's own ask, {n} events)")
    counts = result["counts"]
    lines.append(
        f"documents backlog: {counts['documents_backlog_when_events_started']} when the events began,"
        f" {counts['documents_backlog_when_all_converged']} when the last converged"
    )
    lines.append(f"goals: {result['goals']}")
    by_copy = result.get("worker_records", {}).get("by_copy", {})
    if by_copy:
        lines.append("worker's own records (p50/p99 s from publish):")
        for copy, s in by_copy.items():
            if "/" not in copy:
                lines.append(f"  {copy:<16}{s['p50']:>8.3f}{s['p99']:>8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=["cluster", "embedded"], required=True)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--revocations", type=int, default=200)
    parser.add_argument("--deletions", type=int, default=200)
    parser.add_argument("--pace-ms", type=int, default=50)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument(
        "--probers", type=int, default=0, help="threads querying for pending events (default: 16 cluster, 6 embedded)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    factory: Callable[[Path], Any] = Cluster if args.profile == "cluster" else Embedded
    with tempfile.TemporaryDirectory(prefix="ragsync-propagation-") as tmp:
        runner = factory(Path(tmp))
        try:
            result = run(runner, args)
        finally:
            runner.close()
    out = args.out or RESULTS / f"propagation-{args.profile}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"wrote {out}")


class Embedded:
    """`ragsync serve` owns a fresh home and applies what this process publishes into its event log.

    Effective is probed like the cluster's: the real Retriever (BM25 with the permission filter, then the
    deny set) over the files serve writes (FTS5 and deny.db, read by this process as any reader would).
    Every SERVED_EVERY-th event is also followed through serve itself (the operator's traced ask: the
    whole answer path, up to three searches each embedding the question), reported as served_effective:
    an ask costs 0.1-0.5 s on a busy machine, so asking for all 20 events a second measured the
    queue of the probes' own questions. Converged comes from the worker's own propagation records
    (serve holds the vector shard).
    """

    probers = 6

    def __init__(self, tmp: Path) -> None:
        import socket

        from ragsync.settings import Settings
        from ragsync.wiring import build_embedded

        home = tmp / "home"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.env = {
            "RAGSYNC_PROFILE": "embedded",
            "RAGSYNC_HOME": str(home),
            "RAGSYNC_EMBED_MODEL_PATH": str(MODEL),
            "RAGSYNC_CONFIG": os.devnull,
            "RAGSYNC_SESSION_SECRET": "bench-secret-0123456789abcdef0123456789",
            "RAGSYNC_METRICS_PORT": "0",
        }
        self.settings = Settings(
            profile="embedded",
            home=home,
            embed_model_path=tmp / "no-model",
            session_secret=self.env["RAGSYNC_SESSION_SECRET"],
        )
        self.components = build_embedded(self.settings, with_embedder=False)  # publishing and reading only
        self.log_path = tmp / "serve.log"
        self.server: subprocess.Popen[bytes] | None = None
        self._http: Any = None
        self._token = ""
        self._key = ""
        self.published_wall: dict[str, float] = {}

    def start(self) -> None:
        import httpx

        from ragsync.operator_key import operator_keys
        from ragsync.wiring import token_signer

        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        env.update(self.env, PYTHONPATH=str(ROOT))
        with self.log_path.open("wb") as out:
            self.server = subprocess.Popen(
                [sys.executable, "-m", "ragsync.cli", "serve", "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self._http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit(f"serve did not become ready; see {self.log_path}")
        self._token = token_signer(self.settings).issue(STAFF, ttl_s=6 * 3600)
        self._key = operator_keys(self.settings).current()

    def publish(self, events: list[Event]) -> None:
        self.components.events.publish_many(events)

    def publish_one(self, event: Event) -> None:
        self.published_wall[event.event_id] = time.time()
        self.components.events.publish(event)

    def indexed(self, doc_ids: list[str]) -> int:
        docs = self.components.docs
        return sum(1 for d in doc_ids if (s := docs.get(TENANT, d)) is not None and s.content_version)

    def backlog(self) -> int:
        return int(self.components.events.lag("documents", "ragsync-indexer"))

    @property
    def vector(self) -> Any:
        return None

    @staticmethod
    def settled(p: Probe) -> bool:
        return p.effective is not None and (p.seq % SERVED_EVERY or p.served is not None)

    def probe(self, p: Probe, retriever: Any) -> None:
        if p.effective is None:
            now_access = AccessFilter.for_principal(STAFF, datetime.now(UTC))
            began = time.monotonic()
            hits = retriever.rank(word(p.kind[:3], p.index), now_access).lexical
            COSTS.setdefault("query", []).append(time.monotonic() - began)
            if not any(h.passage.doc_id == p.doc_id for h in hits):
                p.effective = time.monotonic()
        if p.served is None and p.seq % SERVED_EVERY == 0:
            began = time.monotonic()
            response = self._http.post(
                "/v1/owner/ask",
                json={"token": self._token, "question": word(p.kind[:3], p.index)},
                headers={"X-Ragsync-Operator": self._key},
            )
            COSTS.setdefault("ask", []).append(time.monotonic() - began)
            searches = response.json()["trace"]["searches"]
            ranked = [i for s in searches for i in (*s["lexical_ids"], *s["dense_ids"], *s["selected_ids"])]
            if not any(i.startswith(p.doc_id + "@") for i in ranked):
                p.served = time.monotonic()

    def finish(self, probes: list[Probe], deadline: float) -> None:
        """Converged from the worker's own propagation records (one read for all, once a second)."""
        while time.monotonic() < deadline:
            records = {r.event_id: r for r in self.components.propagation.records()}
            for p in probes:
                mine = records.get(p.event.event_id)
                if p.converged is not None or p.effective is None or mine is None or mine.converged_at is None:
                    continue
                lag = mine.converged_at.timestamp() - self.published_wall[p.event.event_id]
                p.converged = p.published + max(lag, p.effective - p.published)
                p.done.update({c: round(v, 4) for c, v in mine.delays().items()})
            if all(p.converged is not None for p in probes):
                return
            time.sleep(1)

    def worker_records(self) -> dict[str, Any]:
        from indexer.propagation import summarize

        s = summarize(self.components.propagation.records(), self.settings.revocation_bound_s)
        by_copy = {k: {q: round(v, 4) for q, v in d.items()} for k, d in s.by_copy.items()}
        return {"events": s.events, "by_copy": by_copy}

    def versions(self) -> dict[str, str]:
        import sqlite3

        import qdrant_edge

        return {"sqlite": sqlite3.sqlite_version, "qdrant-edge-py": getattr(qdrant_edge, "__version__", "0.9.0")}

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(90)
            except subprocess.TimeoutExpired:
                self.server.kill()
        if self._http is not None:
            self._http.close()
        self.components.close()


if __name__ == "__main__":
    main()
