#!/usr/bin/env python3
"""Dense and fused latency with qdrant-edge's grant instants checked on the hits (the committed
EdgeVectorIndex.search) against the former search (the instants inside Qdrant's filter).

Both searches alternate twice on the same stores in one process (bench/retrieval_scale.py's passages,
queries and Tantivy store), so the machine's load falls on both alike; the timed part holds the lock.

    python3 bench/dense_instants_ab.py 20000          # -> bench/results/dense-instants-ab.json
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import Queries, _locked, load_embedded, measure_size
from indexer import qdrant_edge as qe
from indexer.ports import VectorHit, Vectors
from schemas.principal import AccessFilter

OUT = Path(__file__).resolve().parent / "results" / "dense-instants-ab.json"
LOCK = Path("/work/wt/bench.lock")


def former_search(
    self: qe.EdgeVectorIndex, vector: Vectors, access: AccessFilter, limit: int, floor: float
) -> list[VectorHit]:
    """The search before: the whole filter, grant instants included, inside Qdrant."""
    if not access.entries or limit <= 0:
        return []
    points = self._query(vector, qe.access_filter(access), limit, floor)
    return [qe.point_to_hit(dict(p.payload or {}), float(p.score)) for p in points]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    rng = np.random.default_rng(7)
    q = Queries(n, 100, rng)
    committed = qe.EdgeVectorIndex.search
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragsync-dense-ab-") as tmp:
        began = time.perf_counter()
        stores, vector, loaded = load_embedded(Path(tmp), n, q, rng, True, ["tantivy"])
        print(f"loaded in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        try:
            with _locked(LOCK if LOCK.exists() else None) as timed:
                for round_ in range(2):
                    for label, search in (("before", former_search), ("after", committed)):
                        qe.EdgeVectorIndex.search = search  # type: ignore[method-assign]
                        found = measure_size(
                            "embedded",
                            n,
                            stores["tantivy"],
                            vector,
                            q.workload(n),
                            ["dense", "fused"],
                            100,
                            {"engine": "tantivy"},
                        )
                        keep = ("filter", "ranker", "p50_ms", "p95_ms", "cpu_p50_ms", "cpu_p95_ms", "mean_returned")
                        rows += [{"search": label, "round": round_, **{k: r[k] for k in keep}} for r in found]
        finally:
            qe.EdgeVectorIndex.search = committed  # type: ignore[method-assign]
            stores["tantivy"].close()
            vector.close()
    out.write_text(json.dumps({"passages": n, "timed": timed, "load": loaded, "rows": rows}, indent=1) + "\n")
    print(f"written {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
