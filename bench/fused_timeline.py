#!/usr/bin/env python3
"""When each call of a cluster fused search ends, this build's dense half beside main's, interleaved query by
query (alternating which goes first), on the stores `bench/retrieval_scale.py --keep --cluster-name NAME`
loaded. Queries are drawn from the first 10,000 passages of that load (the same seed), so a million
passages are not generated again: text from one passage, the vector from another (plus noise), as
retrieval_scale draws them. Timing wrappers around the three store calls (bench/cluster_breakdown.Spans).

    python3 bench/fused_timeline.py --cluster-name scale9 --size 1000000 --qdrant-url http://127.0.0.1:6343 \\
        --lock /work/wt/bench.lock --server-pid PID
Results: results/fused-timeline.json (runs appended). Timed part under `--lock`; load averages recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cluster_before import BeforeRetriever, before_vector
from bench.cluster_breakdown import Spans, TimedLexical, TimedVector, summary
from bench.retrieval_scale import FILTERS, Queries, _commit, _locked, _servers_at, batches
from bench.retrieval_workload import DIM, TENANT, StubEmbedder
from indexer.elastic import ElasticLexicalIndex
from indexer.qdrant_server import QdrantVectorIndex, connect
from query.retrieval import RetrievalSettings, Retriever
from schemas.principal import Principal

OUT = Path(__file__).resolve().parent / "results" / "fused-timeline.json"
SETTINGS = RetrievalSettings(k=8, candidates=50, bm25_floor=0.0, dense_floor=-1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--filters", nargs="+", default=[f for f, _ in FILTERS])
    parser.add_argument("--lock", type=Path)
    parser.add_argument("--server-pid", type=int, nargs="*", default=[])
    parser.add_argument("--server-nice", type=int, default=15)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--es-url", default=os.environ.get("RAGSYNC_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--qdrant-url", default=os.environ.get("RAGSYNC_QDRANT_URL", "http://127.0.0.1:6333"))
    args = parser.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    rng = np.random.default_rng(args.seed)
    rng.integers(0, args.size, size=200), rng.integers(0, args.size, size=200)  # retrieval_scale's draws
    start, passages, vectors = next(batches(args.size, rng))
    q = Queries(len(passages), args.queries, np.random.default_rng(args.seed + 1))
    q.see(start, passages, vectors)
    lexical = ElasticLexicalIndex(args.es_url, prefix=f"{args.cluster_name}-{args.size}", refresh="false")
    collection = f"{args.cluster_name}-{args.size}".replace("-", "_")
    vector = QdrantVectorIndex(connect(args.qdrant_url), DIM, collection=collection)
    old_vector = before_vector(args.qdrant_url, DIM, collection)
    embedder = StubEmbedder(dict(zip(q.texts, q.qvecs, strict=True)))
    spans = Spans()
    builds = {
        "after": Retriever(TimedLexical(lexical, spans), TimedVector(vector, spans), embedder, None, SETTINGS),  # type: ignore[arg-type]
        "before": BeforeRetriever(
            TimedLexical(lexical, spans),  # type: ignore[arg-type]
            TimedVector(old_vector, spans),  # type: ignore[arg-type]
            embedder,
            None,
            SETTINGS,
        ),
    }
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    result: dict[str, Any] = {}
    keys = ("total", "bm25_end", "qdrant_start", "qdrant_end", "read_back_end", "read_back_ids")
    with _locked(args.lock, 15) as timed, _servers_at(args.server_pid, args.server_nice):
        for label, group in FILTERS:
            if label not in args.filters:
                continue
            principal = Principal(tenant=TENANT, user="bench", groups=(group,))
            line: dict[str, dict[str, list[float]]] = {b: {k: [] for k in keys} for b in builds}
            for i in range(-5, args.queries):
                order = list(builds) if i % 2 == 0 else list(reversed(builds))
                for name in order:
                    spans.spans.clear()
                    spans.origin = time.perf_counter()
                    builds[name].search(principal, q.texts[i % args.queries], as_of)
                    total = (time.perf_counter() - spans.origin) * 1000
                    if i < 0:
                        continue
                    by = {n: (s, e) for n, s, e in spans.spans}
                    t = line[name]
                    t["total"].append(total)
                    t["bm25_end"].append(by["bm25"][1])
                    t["qdrant_start"].append(by["qdrant"][0])
                    t["qdrant_end"].append(by["qdrant"][1])
                    t["read_back_end"].append(by["read_back"][1] if "read_back" in by else by["qdrant"][1])
                    t["read_back_ids"].append(1.0 if "read_back" in by else 0.0)
            result[label] = {b: {k: summary(v) for k, v in line[b].items()} for b in builds}
            shown = {b: round(result[label][b]["total"]["p50"], 1) for b in builds}
            print(f"  {args.size} {label}: total p50 {shown}", file=sys.stderr)
    report = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    report["runs"].append(
        {
            "at_start": started,
            "commit": _commit(),
            "label": args.label,
            "size": args.size,
            "queries": args.queries,
            "timed": timed,
            "filters": result,
            "note": "read_back_ids: share of searches that made a read-back call at all",
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
