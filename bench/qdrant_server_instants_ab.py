#!/usr/bin/env python3
"""The Qdrant server's dense search with the grant instants inside the filter (before) against the
indexed conditions plus `granted_as_of` on the hits (after, QdrantVectorIndex.search), on one
collection, alternated, the same queries each way. Filters admit 1 %, 10 %, 100 % of the points.

    PYTHONPATH=$PWD python3 bench/qdrant_server_instants_ab.py --points 20000 --lock /work/wt/bench.lock
    # -> results/qdrant-server-instants-ab.json
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qdrant_client import QdrantClient

from indexer.qdrant_server import QdrantVectorIndex, access_filter
from schemas.passages import Passage, make_passage_id
from schemas.principal import AccessFilter

DIM = 384
FILTERS = (("1%", "group:e1"), ("10%", "group:e10"), ("100%", "group:all"))
OUT = Path(__file__).resolve().parent / "results" / "qdrant-server-instants-ab.json"


@contextlib.contextmanager
def locked(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def passages(start: int, n: int, since: datetime) -> list[Passage]:
    out = []
    for i in range(start, start + n):
        acl = ["group:all"] + (["group:e10"] if i % 10 == 0 else []) + (["group:e1"] if i % 100 == 0 else [])
        out.append(
            Passage(
                passage_id=make_passage_id(f"d{i}.md", 1, "root-1"),
                doc_id=f"d{i}.md",
                version=1,
                anchor="root-1",
                tenant="bench",
                acl=tuple(acl),
                acl_since={e: since for e in acl},
                effective_from=since,
                heading_path=(),
                title="",
                text=f"passage {i}",
                source_url=f"file:///d{i}.md",
                chunker_version="bench",
            )
        )
    return out


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--url", default=os.environ.get("RAGSYNC_QDRANT_URL", "http://127.0.0.1:6333"))
    ap.add_argument("--lock", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    index = QdrantVectorIndex(QdrantClient(url=args.url), DIM, collection=f"bench_instants_{uuid.uuid4().hex[:8]}")
    since = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        began = time.perf_counter()
        for start in range(0, args.points, 1000):
            n = min(1000, args.points - start)
            v = rng.standard_normal((n, DIM)).astype(np.float32)
            index.upsert(passages(start, n, since), v / np.linalg.norm(v, axis=1, keepdims=True))
        index.flush()
        load_s = time.perf_counter() - began
        while True:  # time queries once the server's indexing has finished
            info = index._client.get_collection(index.collection)
            if str(info.status).lower().endswith("green"):
                break
            time.sleep(1)
        qs = rng.standard_normal((args.queries, DIM)).astype(np.float32)
        qs /= np.linalg.norm(qs, axis=1, keepdims=True)
        as_of = since + timedelta(days=300)
        rows: list[dict[str, Any]] = []
        load_start = os.getloadavg()
        with locked(args.lock):
            for r in range(args.rounds):
                for label, entry in FILTERS:
                    access = AccessFilter("bench", (entry,), as_of)
                    for way in ("before", "after"):
                        times = []
                        for qv in qs:
                            t0 = time.perf_counter()
                            if way == "before":
                                index._query(qv, access_filter(access), 50, -1.0)
                            else:
                                index.search(qv, access, 50, -1.0)
                            times.append((time.perf_counter() - t0) * 1000)
                        row = {"round": r + 1, "filter": label, "way": way, "p50_ms": pct(times, 50)}
                        row["p95_ms"] = pct(times, 95)
                        rows.append(row)
                        print(row, file=sys.stderr)
        report = {
            "points": args.points,
            "queries": args.queries,
            "load_s": round(load_s, 1),
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "rows": rows,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    finally:
        index.drop_all()
        index.close()


if __name__ == "__main__":
    main()
