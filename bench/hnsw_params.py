#!/usr/bin/env python3
"""HNSW build cost against recall, qdrant-edge, on bench/retrieval_scale's synthetic vectors.

Loads n vectors (the same generator, seed 7, every point readable by group:all) into one shard, then
for each (m, ef_construct) builds HNSW on a copy in this process and measures the build's wall and CPU
seconds (Qdrant's threads included) and the recall of 100 queries (noisy copies of stored vectors, as
the benchmark's) against exact search with the same filter: mean |approx top-k ∩ exact top-k| / k.
Answers whether a cheaper build is a gain: a build that loses the nearest neighbour is not.

    python3 bench/hnsw_params.py --n 30000 --params 16,100 16,32 8,32
Results are appended to results/retrieval-scale.json under "hnsw_params".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_workload import DIM, batches

OUT = Path(__file__).resolve().parent / "results" / "retrieval-scale.json"


def main() -> None:
    import qdrant_edge as q

    from indexer.qdrant_edge import VACUUM, EdgeVectorIndex, access_filter
    from schemas.principal import AccessFilter

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--params", nargs="+", default=["16,100", "16,32", "8,32"], help="m,ef_construct")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    combos = [tuple(int(x) for x in c.split(",")) for c in args.params]
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    rng = np.random.default_rng(7)
    home = Path(tempfile.mkdtemp(prefix="ragsync-hnsw-"))
    try:
        base = home / "base"
        index = EdgeVectorIndex(base, DIM)
        firsts = []
        for _, passages, vectors in batches(args.n, rng, ((10, "tenth"), (100, "hundredth"))):
            index.upsert(passages, vectors)
            firsts.append(vectors[:20])
        index.flush()
        index.close()
        qvecs = np.concatenate(firsts)[:100]
        qvecs = qvecs + np.random.default_rng(1).standard_normal(qvecs.shape).astype(np.float32) * 0.03
        flt = access_filter(AccessFilter("bench", ("group:all",), datetime(2026, 6, 2, tzinfo=UTC)))
        rows: list[dict[str, Any]] = []
        for m, ef in combos:
            copy = home / f"m{m}-ef{ef}"
            shutil.copytree(base, copy)
            config = q.EdgeConfig(
                vectors=q.EdgeVectorParams(size=DIM, distance=q.Distance.Cosine),
                optimizers=VACUUM,
                hnsw_config=q.HnswIndexConfig(m=m, ef_construct=ef, full_scan_threshold=10_000),
            )
            shard = q.EdgeShard.load(str(copy), config)
            began, cpu = time.perf_counter(), time.process_time()
            shard.optimize()
            shard.flush()
            build, build_cpu = time.perf_counter() - began, time.process_time() - cpu
            info = shard.info()
            sums = {1: 0.0, 8: 0.0, 50: 0.0}
            for x in qvecs:
                found = []
                for exact in (False, True):
                    request = q.QueryRequest(
                        limit=50,
                        query=q.Query.Nearest(x.astype(np.float64).tolist()),
                        filter=flt,
                        with_payload=True,
                        params=q.SearchParams(exact=exact),
                    )
                    found.append([(p.payload or {})["passage_id"] for p in shard.query(request)])
                for k in sums:
                    sums[k] += len(set(found[0][:k]) & set(found[1][:k])) / k
            row = {
                "n": args.n,
                "m": m,
                "ef_construct": ef,
                "build_s": round(build, 1),
                "build_cpu_s": round(build_cpu, 1),
                "segments": int(info.segments_count),
                "indexed": int(getattr(info, "indexed_vectors_count", 0) or 0),
                **{f"recall@{k}": round(v / len(qvecs), 4) for k, v in sums.items()},
                **({"build": args.label} if args.label else {}),
            }
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
            shard.close()
            shutil.rmtree(copy)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report = json.loads(args.out.read_text()) if args.out.exists() else {"rows": [], "runs": []}
    report.setdefault("hnsw_params", []).append(
        {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "loadavg_start": loadavg_start,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "rows": rows,
        }
    )
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
