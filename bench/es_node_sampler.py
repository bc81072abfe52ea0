#!/usr/bin/env python3
"""Samples the Elasticsearch node beside a propagation run (bench/README "Thirteenth round").

    python3 bench/es_node_sampler.py /tmp/run.stats.json --prefix bench & ... ; kill -TERM $!
    python3 bench/es_node_sampler.py --summary /tmp/run.stats.json

Every 0.5 s: the passages indexes' refresh, indexing, bulk, merge, segment and search statistics and
the node's refresh / write / search thread pools; the series is written on SIGTERM. The summary takes
the passages index that indexed most and the window in which its deletions were applied (the events
phase), and reports its refreshes (count, milliseconds each), the refresh pool's queue, its index and
delete operations, merges, segments and searches a second.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import httpx


def sample(out: Path, prefix: str, url: str) -> None:
    rows: list[dict[str, Any]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        out.write_text(json.dumps(rows))
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    client = httpx.Client(base_url=url, timeout=5)
    while True:
        at = time.time()
        try:
            metrics = "refresh,indexing,bulk,merge,search,segments"
            stats = client.get(f"/{prefix}*-passages*/_stats/{metrics}").json().get("indices", {})
            pools = client.get(
                "/_cat/thread_pool/refresh,write,search?format=json&h=name,active,queue,completed"
            ).json()
            rows.append({"t": at, "idx": {k: _index(v["primaries"]) for k, v in stats.items()}, "pools": pools})
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            rows.append({"t": at, "error": str(exc)})
        time.sleep(0.5)


def _index(p: dict[str, Any]) -> dict[str, Any]:
    indexing = ("index_total", "index_time_in_millis", "delete_total", "delete_time_in_millis")
    return {
        "refresh": p["refresh"],
        "bulk": p.get("bulk"),
        "indexing": {x: p["indexing"][x] for x in indexing},
        "merges": p["merges"]["total_time_in_millis"],
        "segments": p["segments"]["count"],
        "search": {x: p["search"][x] for x in ("query_total", "query_time_in_millis")},
    }


def summary(path: Path) -> dict[str, Any]:
    rows = [r for r in json.loads(path.read_text()) if r.get("idx")]
    name = max(rows[-1]["idx"], key=lambda k: rows[-1]["idx"][k]["indexing"]["index_total"])
    series = [(r["t"], r["idx"][name], r["pools"]) for r in rows if name in r["idx"]]
    deletes = [s[1]["indexing"]["delete_total"] for s in series]
    first = max(next(i for i, d in enumerate(deletes) if d > 0) - 2, 0)
    last = min(max(i for i, d in enumerate(deletes) if d < deletes[-1]) + 2, len(series) - 1)
    a, b = series[first][1], series[last][1]
    window = series[last][0] - series[first][0]
    refreshes = b["refresh"]["external_total"] - a["refresh"]["external_total"]
    refresh_ms = b["refresh"]["external_total_time_in_millis"] - a["refresh"]["external_total_time_in_millis"]
    queue = [int(p["queue"]) for s in series[first : last + 1] for p in s[2] if p["name"] == "refresh"]
    searches = b["search"]["query_total"] - a["search"]["query_total"]
    return {
        "index": name,
        "window_s": round(window, 1),
        "refreshes": refreshes,
        "refresh_ms_each": round(refresh_ms / max(refreshes, 1)),
        "refresh_pool_queue_avg_max": [round(sum(queue) / max(len(queue), 1), 2), max(queue, default=0)],
        "index_ops": b["indexing"]["index_total"] - a["indexing"]["index_total"],
        "delete_ops": b["indexing"]["delete_total"] - a["indexing"]["delete_total"],
        "merges_ms": b["merges"] - a["merges"],
        "segments": [a["segments"], b["segments"]],
        "searches_per_s": round(searches / window) if window else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--prefix", default="bench", help="index name prefix of the run (the bench's: bench<tag>)")
    parser.add_argument("--url", default="http://127.0.0.1:9200")
    parser.add_argument("--summary", nargs="+", type=Path, default=[])
    args = parser.parse_args()
    for path in args.summary:
        print(path.name, json.dumps(summary(path)))
    if args.out is not None:
        sample(args.out, args.prefix, args.url)


if __name__ == "__main__":
    main()
