#!/usr/bin/env python3
"""Retrieval latency of the embedded profile: BM25 (SQLite FTS5), dense (qdrant-edge) and both fused by RRF.

Measured at 10k and 100k passages, with a permission filter that admits 10% and 100% of them, because
the filter runs inside each store's query and its selectivity changes the work each store does (FTS5
joins the ACL table per match; Qdrant switches between filtered HNSW and a payload-index scan).

No model is involved: embedding 100k texts would take about an hour on 2 cores, and model latency is a
separate figure (bench/ingest.py). Passages are synthetic: text drawn from a Zipf-distributed
vocabulary (so BM25 posting lists have realistic skew) and random unit vectors (dim 384, MiniLM's);
each query vector is a noisy copy of a stored passage's vector, so nearest neighbours exist. The dense
floor is disabled (-1) so every query returns a full candidate list: the worst case for the store.
`fused` is Retriever.search (both rankers + RRF, result cache off) with a stub embedder that returns
the precomputed query vector. HNSW is built with EdgeVectorIndex.optimize() after the bulk load.

--profile cluster measures the same table against the cluster adapters: BM25 on a real Elasticsearch
(ElasticLexicalIndex, a unique index prefix, bulk-loaded without per-batch refresh, refreshed once,
dropped at the end), dense on the Qdrant server through QdrantVectorIndex (a unique collection, timed
once the server reports it optimized, dropped at the end), fused = both through Retriever.search; and,
in the same run on the same passages and query vectors, dense on qdrant-edge (the embedded adapter,
HNSW built) so the two Qdrant deployments are compared side by side. `--qdrant-url local` runs
qdrant-client's local mode instead of a server: it evaluates the payload filter point by point in
Python, so those figures are NOT representative and are measured at 10k passages only.

    python3 bench/retrieval.py                    # 10k and 100k (~5-10 min on 2 cores)
    python3 bench/retrieval.py --sizes 10000 --queries 100
    python3 bench/retrieval.py --profile cluster  # Elasticsearch + Qdrant server + qdrant-edge (~15 min)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_workload import DIM, STOPWORD_LIKE, TENANT, StubEmbedder, Workload, workload
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sqlite_fts import SqliteLexicalIndex
from query.retrieval import RetrievalSettings, Retriever
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal

RANKERS = ("bm25", "dense", "fused (rrf)")
FILTERS = (("10%", "tenth"), ("100%", "all"))
LOCAL_MODE_CAVEAT = (
    "qdrant-client local mode (in-process, filter evaluated point by point in Python):"
    " NOT representative of a Qdrant server"
)
RESULTS = Path(__file__).resolve().parent / "results"


def _pct(values: Sequence[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


def load(home: Path, passages: list[Passage], vectors: np.ndarray) -> tuple[Any, Any, dict[str, float]]:
    lexical = SqliteLexicalIndex(home / "lexical.db")
    vector = EdgeVectorIndex(home / "vectors", DIM)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    for start in range(0, len(passages), 2000):
        lexical.upsert(passages[start : start + 2000])
    timings["load_lexical_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(passages), 2000):
        vector.upsert(passages[start : start + 2000], vectors[start : start + 2000])
    timings["load_vector_s"] = time.perf_counter() - started
    started = time.perf_counter()
    vector.optimize()
    timings["optimize_s"] = time.perf_counter() - started
    return lexical, vector, timings


def measure(fn: Callable[[int], Any], n: int, warmup: int = 5) -> tuple[list[float], float]:
    for i in range(warmup):
        fn(i)
    latencies = []
    hits = 0
    for i in range(n):
        started = time.perf_counter()
        result = fn(i)
        latencies.append((time.perf_counter() - started) * 1000)
        hits += len(result.passages) if hasattr(result, "passages") else len(result)
    return latencies, hits / n


def measure_rows(
    w: Workload,
    lexical: Any,
    vector: Any,
    plan: dict[str, tuple[int, int]],
    extra: dict[str, Any],
    notes: dict[str, str] | None = None,
    backends: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """p50/p95 per filter and ranker; `plan` maps ranker -> (queries, warm-up queries), absent = skipped."""
    settings = RetrievalSettings(k=8, candidates=50, bm25_floor=0.0, dense_floor=-1.0)
    retriever = Retriever(lexical, vector, StubEmbedder(dict(zip(w.texts, w.qvecs, strict=True))), None, settings)
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    rows: list[dict[str, Any]] = []
    for label, group in FILTERS:
        principal = Principal(tenant=TENANT, user="bench", groups=(group,))
        access = AccessFilter.for_principal(principal, as_of)
        cases: dict[str, Callable[[int], Any]] = {
            "bm25": lambda i, a=access: lexical.search(w.texts[i], a, settings.candidates, settings.bm25_floor),
            "dense": lambda i, a=access: vector.search(w.qvecs[i], a, settings.candidates, settings.dense_floor),
            "fused (rrf)": lambda i, p=principal: retriever.search(p, w.texts[i], as_of),
        }
        for ranker, fn in cases.items():
            if ranker not in plan:
                continue
            queries, warmup = plan[ranker]
            latencies, returned = measure(lambda i, f=fn, q=queries: f(i % q), queries, warmup)
            row = {
                "passages": w.n,
                "filter_admits": label,
                "ranker": ranker,
                **({"backend": backends[ranker]} if backends and ranker in backends else {}),
                "queries": queries,
                "p50_ms": round(_pct(latencies, 50), 2),
                "p95_ms": round(_pct(latencies, 95), 2),
                "mean_returned": round(returned, 1),
                **{k: round(v, 1) if isinstance(v, float) else v for k, v in extra.items()},
            }
            if notes and ranker in notes:
                row["note"] = notes[ranker]
            rows.append(row)
            print(
                f"  {w.n} {label:>4} {ranker:12s} {row.get('backend', '')} p50 {row['p50_ms']:8.2f}"
                f" p95 {row['p95_ms']:8.2f} ms ({queries} queries)",
                file=sys.stderr,
            )
    return rows


def run_size(n: int, queries: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    w = workload(n, queries, rng)
    with tempfile.TemporaryDirectory(prefix=f"ragsync-bench-{n}-") as tmp:
        lexical, vector, timings = load(Path(tmp), w.passages, w.vectors)
        print(
            f"{n} passages loaded: lexical {timings['load_lexical_s']:.1f}s, vectors {timings['load_vector_s']:.1f}s,"
            f" optimize {timings['optimize_s']:.1f}s",
            file=sys.stderr,
        )
        rows = measure_rows(w, lexical, vector, {r: (queries, 5) for r in RANKERS}, timings)
        lexical.close()
        vector.close()
    return rows


# ---- cluster profile -------------------------------------------------------------------------------

ES_BATCH = 10_000
"""Passages per ElasticLexicalIndex.upsert call (the adapter splits it into _bulk requests of 500)."""


def load_elastic(lexical: Any, passages: list[Passage]) -> dict[str, Any]:
    """Bulk load with refresh=false, then one refresh and a wait for background merges to finish."""
    timings: dict[str, Any] = {}
    started = time.perf_counter()
    for start in range(0, len(passages), ES_BATCH):
        lexical.upsert(passages[start : start + ES_BATCH])
    timings["load_lexical_s"] = time.perf_counter() - started
    started = time.perf_counter()
    es, alias = lexical.client, lexical.alias(TENANT)
    es.indices.refresh(index=alias)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        stats = es.indices.stats(index=alias, metric="merge,segments")["_all"]["primaries"]
        if stats["merges"]["current"] == 0:
            break
        time.sleep(0.5)
    timings["refresh_merge_s"] = time.perf_counter() - started
    timings["es_segments"] = int(stats["segments"]["count"])
    count = lexical.count(TENANT)
    if count != len(passages):
        raise RuntimeError(f"Elasticsearch holds {count} passages after the load, expected {len(passages)}")
    return timings


def load_qdrant(vector: Any, passages: list[Passage], vectors: np.ndarray) -> dict[str, Any]:
    timings: dict[str, Any] = {}
    started = time.perf_counter()
    for start in range(0, len(passages), 2000):
        vector.upsert(passages[start : start + 2000], vectors[start : start + 2000])
    timings["load_vector_s"] = time.perf_counter() - started
    if not vector.local:
        # a server builds HNSW in the background: time queries only once the collection is green (optimized)
        started = time.perf_counter()
        deadline = time.monotonic() + 900
        client = vector._client
        while time.monotonic() < deadline:
            info = client.get_collection(vector.collection)
            if info.status == "green" and info.optimizer_status == "ok":
                break
            time.sleep(1)
        timings["optimize_s"] = time.perf_counter() - started
        timings["qdrant_segments"] = int(info.segments_count or 0)
        timings["qdrant_indexed_vectors"] = int(info.indexed_vectors_count or 0)
    count = vector.count(TENANT)
    if count != len(passages):
        raise RuntimeError(f"Qdrant holds {count} passages after the load, expected {len(passages)}")
    return timings


def edge_rows(w: Workload, lexical: Any, queries: int) -> list[dict[str, Any]]:
    """qdrant-edge on the same passages and query vectors: the embedded deployment of the same engine."""
    with tempfile.TemporaryDirectory(prefix=f"ragsync-bench-edge-{w.n}-") as tmp:
        vector = EdgeVectorIndex(Path(tmp) / "vectors", DIM)
        try:
            started = time.perf_counter()
            for start in range(0, w.n, 2000):
                vector.upsert(w.passages[start : start + 2000], w.vectors[start : start + 2000])
            timings = {"edge_load_s": time.perf_counter() - started}
            started = time.perf_counter()
            vector.optimize()
            timings["edge_optimize_s"] = time.perf_counter() - started
            print(
                f"{w.n} passages in qdrant-edge: load {timings['edge_load_s']:.1f}s,"
                f" optimize {timings['edge_optimize_s']:.1f}s",
                file=sys.stderr,
            )
            return measure_rows(
                w, lexical, vector, {"dense": (queries, 20)}, timings, backends={"dense": "qdrant-edge"}
            )
        finally:
            vector.close()


def run_cluster_size(n: int, args: argparse.Namespace, rng: np.random.Generator, prefix: str) -> list[dict[str, Any]]:
    from indexer.elastic import ElasticLexicalIndex
    from indexer.qdrant_server import QdrantVectorIndex, connect, open_local

    w = workload(n, args.queries, rng)
    # refresh="false": no refresh per _bulk request during the load; load_elastic refreshes once
    lexical = ElasticLexicalIndex(args.es_url, prefix=f"{prefix}-{n}", refresh="false")
    vector = None
    local_dir = None
    try:
        timings = load_elastic(lexical, w.passages)
        print(
            f"{n} passages in Elasticsearch: load {timings['load_lexical_s']:.1f}s,"
            f" refresh+merges {timings['refresh_merge_s']:.1f}s, {timings['es_segments']} segments",
            file=sys.stderr,
        )
        plan = {"bm25": (args.queries, 20)}  # 20 warm-up queries: the JVM's JIT and query cache
        notes: dict[str, str] = {}
        local = args.qdrant_url == "local"
        server = "local mode" if local else "qdrant-server"
        backends = {"bm25": "elasticsearch", "dense": server, "fused (rrf)": f"elasticsearch + {server}"}
        if not local or n <= args.dense_max_passages:
            if local:
                local_dir = tempfile.TemporaryDirectory(prefix="ragsync-bench-local-")
                client = open_local(Path(local_dir.name))
            else:
                client = connect(args.qdrant_url)
            vector = QdrantVectorIndex(client, DIM, collection=f"{prefix}-{n}".replace("-", "_"))
            timings |= load_qdrant(vector, w.passages, w.vectors)
            print(
                f"{n} passages in Qdrant: load {timings['load_vector_s']:.1f}s,"
                f" optimized after {timings.get('optimize_s', 0):.1f}s more",
                file=sys.stderr,
            )
            dense_plan = (args.dense_queries, 2) if local else (args.queries, 20)
            plan |= {"dense": dense_plan, "fused (rrf)": dense_plan}
            if local:
                notes = {"dense": LOCAL_MODE_CAVEAT, "fused (rrf)": LOCAL_MODE_CAVEAT}
        rows = measure_rows(w, lexical, vector, plan, timings, notes, backends)
        if vector is not None and not vector.local:
            vector.drop_all()
        if not args.no_edge:
            rows += edge_rows(w, lexical, args.queries)
        return rows
    finally:
        lexical.drop_all()
        lexical.close()
        if vector is not None:
            if not vector.local:
                with contextlib.suppress(Exception):
                    vector.drop_all()
            vector.close()
        if local_dir is not None:
            local_dir.cleanup()


def qdrant_version(url: str) -> str:
    from indexer.qdrant_server import QdrantUnavailable, client_version, connect

    try:
        client = connect(url)
    except QdrantUnavailable as exc:
        sys.exit(str(exc))
    try:
        return f"Qdrant {client.info().version} at {url} (qdrant-client {client_version()})"
    finally:
        client.close()


def elastic_version(url: str) -> str:
    from elasticsearch import Elasticsearch

    es = Elasticsearch(url, request_timeout=5)
    try:  # the integ-test distribution has no `GET /` (no rest-root module): ask the nodes API
        nodes = es.nodes.info(filter_path="nodes.*.version")["nodes"]
        return ",".join(sorted({str(node["version"]) for node in nodes.values()}))
    except Exception as exc:
        sys.exit(
            f"Elasticsearch is not reachable at {url} ({exc.__class__.__name__}); start it with"
            " `compose/local/services up elasticsearch` or pass --es-url"
        )
    finally:
        es.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=("embedded", "cluster"), default="embedded")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="default results/retrieval.json, or retrieval-cluster.json")
    cluster = parser.add_argument_group("cluster profile")
    cluster.add_argument("--es-url", default=os.environ.get("RAGSYNC_ES_URL", "http://127.0.0.1:9200"))
    cluster.add_argument(
        "--qdrant-url",
        default=os.environ.get("RAGSYNC_QDRANT_URL", "http://127.0.0.1:6333"),
        help="the Qdrant server [env RAGSYNC_QDRANT_URL]; 'local' for qdrant-client's local mode (not representative)",
    )
    cluster.add_argument("--no-edge", action="store_true", help="skip the qdrant-edge rows")
    cluster.add_argument(
        "--dense-max-passages",
        type=int,
        default=10_000,
        help="local mode only: largest size with dense and fused rows (filters are scanned point by point)",
    )
    cluster.add_argument("--dense-queries", type=int, default=60, help="local mode only: queries per dense/fused row")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    notes = [
        "synthetic passages: Zipf-vocabulary text and random unit vectors (dim 384); no model is run",
        f"queries: 4 words of a stored passage, skipping the {STOPWORD_LIKE} most frequent words (stopword-like)",
        "query vectors are noisy copies of stored vectors; dense floor -1 (full candidate lists)",
        "fused = Retriever.search: both rankers (50 candidates each) + RRF, result cache off",
        "filter_admits = share of passages the principal's ACL filter admits",
    ]
    if args.profile == "embedded":
        out = args.out or RESULTS / "retrieval.json"
        title = "embedded profile"
        benchmark = "retrieval latency, embedded profile (sqlite-fts5 + qdrant-edge)"
        backends: dict[str, Any] = {}
        rows = [row for n in args.sizes for row in run_size(n, args.queries, rng)]
    else:
        out = args.out or RESULTS / "retrieval-cluster.json"
        title = "cluster profile"
        version = elastic_version(args.es_url)
        local = args.qdrant_url == "local"
        benchmark = "retrieval latency, cluster profile (elasticsearch + " + (
            "qdrant-client local mode)" if local else "qdrant server), beside qdrant-edge"
        )
        backends = {
            "lexical": f"Elasticsearch {version} at {args.es_url}; the adapter's index: 1 shard, 0 replicas",
            "vector": LOCAL_MODE_CAVEAT
            if local
            else qdrant_version(args.qdrant_url)
            + "; one collection, tenant-keyed payload index, default HNSW (m=16, ef_construct=100)",
            "edge": "qdrant-edge-py (the embedded adapter), HNSW built with optimize() before queries",
        }
        notes += [
            "bm25 = ElasticLexicalIndex.search over HTTP: includes the Python client and parsing 50 _source documents",
            f"Elasticsearch load: upsert batches of {ES_BATCH} (the adapter sends _bulk requests of 500) with"
            " refresh=false, then one refresh and a wait until no merge is running",
            "bm25 rows: 20 warm-up queries before the measured ones (JIT, filter cache)",
            "dense = QdrantVectorIndex.search over HTTP (REST, qdrant-client): includes parsing 50 payloads into"
            " passages; timed once the collection is green (HNSW built by the server's optimizer)",
            "fused = ElasticLexicalIndex.search then QdrantVectorIndex.search (sequential) + RRF",
            "qdrant-edge rows: the same passages, vectors and queries in the embedded engine, in this process",
            "the machine is shared: other test suites may run meanwhile (2 cores)",
        ]
        if local:
            notes += [
                "DENSE AND FUSED FIGURES ARE NOT REPRESENTATIVE OF A QDRANT SERVER: qdrant-client local mode"
                " evaluates the payload filter for every point in Python, then scores all admitted points exactly;"
                " fused inherits that cost",
                f"dense and fused measured only up to {args.dense_max_passages} passages, with"
                f" {args.dense_queries} queries per row (2 warm-up)",
            ]
        prefix = f"bench-retrieval-{os.getpid()}-{int(time.time())}"
        rows = [row for n in args.sizes for row in run_cluster_size(n, args, rng, prefix)]
    report = {
        "benchmark": benchmark,
        **({"backends": backends} if backends else {}),
        "notes": notes,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "seed": args.seed,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Retrieval latency (ms), {title}, synthetic passages")
    for col in ("passages", "filter admits", "ranker", "backend", "queries", "p50", "p95", "returned"):
        table.add_column(col, justify="right" if col not in ("ranker", "filter admits", "backend") else "left")
    for row in rows:
        table.add_row(
            f"{row['passages']:,}",
            row["filter_admits"],
            row["ranker"] + (" *" if "note" in row else ""),
            row.get("backend", ""),
            str(row["queries"]),
            f"{row['p50_ms']:.2f}",
            f"{row['p95_ms']:.2f}",
            f"{row['mean_returned']:.0f}",
        )
    Console(width=120).print(table)
    if any("note" in row for row in rows):
        print(f"* {LOCAL_MODE_CAVEAT}")
    print(f"written {out}")


if __name__ == "__main__":
    main()
