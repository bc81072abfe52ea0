#!/usr/bin/env python3
"""Dense search at scale against the HNSW beam width at search (`hnsw_ef`), on a kept home.

bench/retrieval_scale.py's `dense_recall_vs_exact` compares HNSW's top-k with an exact search's; on
its random vectors every point but the query's own source sits at cosine ~0 from the query, so beyond
rank 1 the exact order is noise and exact searches at 1M take minutes on a busy machine. This probe
asks the question that has an answer on that data: each query is a noisy copy (the same recipe, noise
0.03 per component) of one stored vector the filter admits, and `planted@1` / `planted@8` is the share
of queries whose source comes back first / in the top 8. Per filter (1 %, 10 %, 100 %) and per
`hnsw_ef` (the shard's default is ef_construct, 100), through the adapter's own filter
(`access_filter(instants=False)`, what EdgeVectorIndex.search sends first). Wall ms per search, with
the bench lock held for the timed part.

    python3 bench/hnsw_ef.py --home /tmp/scale6/home-1m --n 1000000 --ef 100 200 400 --lock /work/wt/bench.lock
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

from bench.retrieval_scale import FILTERS, _commit, _locked
from bench.retrieval_workload import DIM, TENANT
from schemas.passages import make_passage_id
from schemas.principal import AccessFilter, Principal

OUT = Path(__file__).resolve().parent / "results" / "hnsw-ef.json"
EVERY = {"1%": 100, "10%": 10, "100%": 1}


def main() -> None:
    import qdrant_edge as q

    from indexer.payload import point_id
    from indexer.qdrant_edge import EdgeVectorIndex, access_filter

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="a home bench/retrieval_scale.py --home loaded")
    parser.add_argument("--n", type=int, required=True, help="passages in that home")
    parser.add_argument("--ef", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--lock", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    load_start = [round(x, 2) for x in os.getloadavg()]
    vector = EdgeVectorIndex(args.home / "vectors", DIM)
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    cases: dict[str, tuple[Any, list[str], np.ndarray]] = {}
    for label, group in FILTERS:
        every = EVERY[label]
        sources = (rng.integers(0, args.n // every, size=args.queries) * every).tolist()
        pids = [make_passage_id(f"doc{i // 20}.md", 1, f"s-{i % 20}") for i in sources]
        records = vector._shard.retrieve([point_id(TENANT, p) for p in pids], with_payload=False, with_vector=True)
        by_id = {str(r.id): np.asarray(r.vector, dtype=np.float32).reshape(-1) for r in records}
        stored = np.stack([by_id[str(point_id(TENANT, p))] for p in pids])
        noisy = stored + rng.standard_normal(stored.shape).astype(np.float32) * 0.03
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        access = AccessFilter.for_principal(Principal(tenant=TENANT, user="bench", groups=(group,)), as_of)
        cases[label] = (access_filter(access, instants=False), pids, noisy)

    def search(flt: Any, qv: np.ndarray, ef: int) -> list[str]:
        request = q.QueryRequest(
            limit=50,
            query=q.Query.Nearest(np.asarray(qv, dtype=np.float64).tolist()),
            filter=flt,
            score_threshold=-1.0,
            with_payload=True,
            with_vector=False,
            params=q.SearchParams(hnsw_ef=ef),
        )
        return [str((p.payload or {})["passage_id"]) for p in vector._shard.query(request)]

    rows: list[dict[str, Any]] = []
    try:
        with _locked(args.lock) as timed:
            for label, (flt, pids, qvecs) in cases.items():
                for ef in args.ef:
                    for i in range(5):  # warm-up
                        search(flt, qvecs[i], ef)
                    wall: list[float] = []
                    top1 = top8 = 0
                    for i, pid in enumerate(pids):
                        began = time.perf_counter()
                        got = search(flt, qvecs[i], ef)
                        wall.append((time.perf_counter() - began) * 1000)
                        top1 += bool(got) and got[0] == pid
                        top8 += pid in got[:8]
                    row = {
                        "passages": args.n,
                        "filter": label,
                        "hnsw_ef": ef,
                        "queries": len(pids),
                        "p50_ms": round(float(np.percentile(wall, 50)), 2),
                        "p95_ms": round(float(np.percentile(wall, 95)), 2),
                        "planted@1": round(top1 / len(pids), 3),
                        "planted@8": round(top8 / len(pids), 3),
                    }
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr)
    finally:
        vector.close()
    report = {
        "rows": rows,
        "run": {
            "home": str(args.home),
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "loadavg_start": load_start,
            "timed": timed,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "cpus": os.cpu_count(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
