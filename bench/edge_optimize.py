#!/usr/bin/env python3
"""How long the embedded owner stops answering while qdrant-edge builds HNSW, in-process vs child.

`EdgeShard.optimize` holds the GIL while it builds, so in the owner's process every query, webhook
and the worker (revocations included) wait for it. `EdgeVectorIndex.optimize` now runs it on a copy
in a child process. Both designs run side by side in one run on the same points: a thread queries
the live shard every 10 ms and the longest gap between two answers is the freeze a revocation or a
question would see.

    python3 bench/edge_optimize.py                 # 10,000 points of 384 dims (~1 min)
    python3 bench/edge_optimize.py --points 20000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.qdrant_edge import EdgeVectorIndex  # noqa: E402
from schemas._time import utcnow  # noqa: E402
from schemas.passages import Passage, make_passage_id  # noqa: E402
from schemas.principal import AccessFilter  # noqa: E402

DIM = 384


class Prober:
    """Queries the index from another thread and keeps the longest gap between two answers."""

    def __init__(self, index: EdgeVectorIndex, access: AccessFilter, probe: np.ndarray) -> None:
        self.index, self.access, self.probe = index, access, probe
        self.gaps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            self.index.search(self.probe, self.access, 5, 0.0)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now
            time.sleep(0.01)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def make_passages(points: int) -> tuple[list[Passage], AccessFilter]:
    now = utcnow()
    passages = [
        Passage(
            passage_id=make_passage_id(f"bench:doc{i}.md", 1, "a-1"),
            doc_id=f"bench:doc{i}.md",
            version=1,
            anchor="a-1",
            tenant="acme",
            acl=("group:staff",) if i % 10 else ("group:hr",),
            effective_from=now,
            superseded_on=None,
            heading_path=(),
            title="",
            text="",
            source_url=f"file:///doc{i}.md",
            chunker_version="bench",
        )
        for i in range(points)
    ]
    return passages, AccessFilter("acme", ("group:staff",), now)


def build(path: Path, points: int, rng: np.random.Generator) -> tuple[EdgeVectorIndex, AccessFilter]:
    index = EdgeVectorIndex(path, DIM)
    passages, access = make_passages(points)
    for start in range(0, points, 1000):
        chunk = passages[start : start + 1000]
        vectors = rng.standard_normal((len(chunk), DIM)).astype(np.float32)
        index.upsert(chunk, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    index.flush()
    return index, access


def run_design(design: str, points: int, folder: Path) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    index, access = build(folder / design, points, rng)
    probe = rng.standard_normal(DIM).astype(np.float32)
    with Prober(index, access, probe) as prober:
        time.sleep(0.3)
        started = time.perf_counter()
        if design == "in-process":
            with index._lock:  # the previous design: optimize on the live shard, under its lock
                changed = bool(index._shard.optimize())
        else:
            changed = index.optimize()
        took = time.perf_counter() - started
        time.sleep(0.3)
    points_now, indexed = index.indexed()
    index.close()
    gaps = sorted(prober.gaps)
    return {
        "optimize_s": round(took, 3),
        "changed": changed,
        "indexed_vectors": indexed,
        "points": points_now,
        "queries_answered": len(gaps),
        "longest_gap_between_answers_s": round(gaps[-1], 3),
        "p99_gap_s": round(gaps[int(0.99 * (len(gaps) - 1))], 3),
        **({"rebuild": index.last_rebuild} if design == "child-process" else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "edge-optimize.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-optimize-") as tmp:
        results = {design: run_design(design, args.points, Path(tmp)) for design in ("in-process", "child-process")}
    freeze_before = results["in-process"]["longest_gap_between_answers_s"]
    freeze_after = results["child-process"]["longest_gap_between_answers_s"]
    report = {
        "benchmark": "longest query gap while qdrant-edge builds HNSW, in-process vs child process",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "points": args.points,
        "dims": DIM,
        "designs": results,
        "freeze_ratio_in_process_to_child": round(freeze_before / max(freeze_after, 1e-3), 1),
        "versions": {"qdrant-edge-py": version("qdrant-edge-py"), "python": platform.python_version()},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'design':<14} {'optimize s':>10} {'longest gap s':>14} {'answers':>8}")
    for design, r in results.items():
        print(f"{design:<14} {r['optimize_s']:>10} {r['longest_gap_between_answers_s']:>14} {r['queries_answered']:>8}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
