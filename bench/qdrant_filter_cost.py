#!/usr/bin/env python3
"""What each clause of the permission filter costs Qdrant, by the server's own reported `time`: the adapter's
filter (tenant, ACL entries, validity), without the validity clauses, and the ACL clause alone, plus the
adapter's filter with `with_payload` limited to the fields the adapter reads; interleaved query by query on
random unit vectors, limit 50. The ACL clause alone is NOT a filter the adapter may send (it drops the
tenant): it only shows what checking the tenant condition point by point costs.

    python3 bench/qdrant_filter_cost.py --qdrant-url http://127.0.0.1:6343 --collection scale9_1000000
Results are appended to results/qdrant-filter-cost.json. Not a timing run of the bench lock: the server's
own time, at whatever niceness it runs (recorded), with the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import FILTERS
from indexer.qdrant_server import access_filter
from schemas.principal import AccessFilter, Principal

OUT = Path(__file__).resolve().parent / "results" / "qdrant-filter-cost.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qdrant-url", default="http://127.0.0.1:6333")
    parser.add_argument("--collection", required=True)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--filters", nargs="+", default=["1%"])
    parser.add_argument("--server-pid", type=int, help="recorded: the server's niceness")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    http = httpx.Client(headers={"Accept-Encoding": "identity"}, timeout=60)
    url = f"{args.qdrant_url}/collections/{args.collection}/points/query"
    rng = np.random.default_rng(4)
    run: dict[str, Any] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "collection": args.collection,
        "queries": args.queries,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "server_nice": os.getpriority(os.PRIO_PROCESS, args.server_pid) if args.server_pid else None,
        "server_time_ms_p50": {},
    }
    for label, group in FILTERS:
        if label not in args.filters:
            continue
        access = AccessFilter.for_principal(Principal(tenant="bench", user="bench", groups=(group,)), as_of)
        flt = access_filter(access, instants=False).model_dump(mode="json", exclude_none=True)
        fields = ["passage_id", "doc_id", "version", "acl", "acl_since"]
        variants: dict[str, dict[str, Any]] = {
            "adapter": {"filter": flt, "with_payload": True},
            "no_validity": {"filter": {"must": flt["must"][:2]}, "with_payload": True},
            "acl_only_not_a_valid_filter": {"filter": {"must": flt["must"][1:2]}, "with_payload": True},
            "adapter_payload_fields": {"filter": flt, "with_payload": fields},
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.queries):
            v = rng.standard_normal(384)
            v /= np.linalg.norm(v)
            for name, extra in variants.items():
                r = http.post(url, json={"query": v.tolist(), "limit": 50} | extra)
                r.raise_for_status()
                times[name].append(float(r.json()["time"]) * 1000)
        run["server_time_ms_p50"][label] = {k: round(float(np.median(x)), 2) for k, x in times.items()}
        print(f"  {args.collection} {label}: {run['server_time_ms_p50'][label]}", file=sys.stderr)
    run["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    report["runs"].append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
