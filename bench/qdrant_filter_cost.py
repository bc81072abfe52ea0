#!/usr/bin/env python3
"""What each clause of the permission filter costs Qdrant, by the server's own reported `time`: the adapter's
filter (tenant, ACL entries, validity), without the validity clauses, and the ACL clause alone, plus the
adapter's filter with `with_payload` limited to the fields the adapter reads; interleaved query by query on
random unit vectors, limit 50. The ACL clause alone is NOT a filter the adapter may send (it drops the
tenant): it only shows what checking the tenant condition point by point costs.

With the tenant-qualified ACL keys (indexer.qdrant_acl_key), also the keyed filter (tenant and entries as
one `tacl` condition, validity), the keyed filter without validity, and the keyed filter with the ACL
clause kept beside it; measured only for a filter whose admitted points all hold their keys (the two
filters count the same points: a collection migrated, or, with `--give-keys`, the points of the bench's
(tenant, ACL) combination the filter admits).

    python3 bench/qdrant_filter_cost.py --qdrant-url http://127.0.0.1:6343 --collection scale9_1000000
`--give-keys 1%` first gives its keys (by one checked write, indexer.qdrant_acl_key.set_keys) to the points
of bench/retrieval_scale's combination readable at 1 % (group:all, tenth and hundredth: 1 % of the
points), without marking the collection: Qdrant moves those points to an appendable segment (copy on
write) and indexes them again. Results are appended to results/qdrant-filter-cost.json. Not a timing run
of the bench lock: the server's own time, at whatever niceness it runs (recorded), with the load averages.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import FILTERS, _servers_at
from indexer.qdrant_acl_key import set_keys
from indexer.qdrant_server import access_filter
from schemas.principal import AccessFilter, Principal

OUT = Path(__file__).resolve().parent / "results" / "qdrant-filter-cost.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qdrant-url", default="http://127.0.0.1:6333")
    parser.add_argument("--collection", required=True)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--filters", nargs="+", default=["1%"])
    parser.add_argument(
        "--server-pid", type=int, help="a private server: its query threads at niceness 0 for the queries, then 15"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--give-keys", nargs="*", default=[], help="filters whose combination gets its keys first")
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
        "server_time_ms_p95": {},
        "admitted": {},
    }
    groups = [g for _, g in FILTERS]
    for label, group in FILTERS:
        if label in args.give_keys:  # bench/retrieval_scale's tiers: a point readable by a group has the broader ones
            acl = [f"group:{g}" for g in groups[groups.index(group) :]]
            with httpx.Client(timeout=600) as slow:
                slow.put(
                    f"{args.qdrant_url}/collections/{args.collection}/index?wait=true",
                    json={"field_name": "tacl", "field_schema": "keyword"},
                ).raise_for_status()
            from qdrant_client import QdrantClient

            client = QdrantClient(url=args.qdrant_url, timeout=600)
            set_keys(client, args.collection, "bench", acl)
            client.close()
    for label, group in FILTERS:
        if label not in args.filters:
            continue
        access = AccessFilter.for_principal(Principal(tenant="bench", user="bench", groups=(group,)), as_of)
        flt = access_filter(access, instants=False).model_dump(mode="json", exclude_none=True)
        keyed = access_filter(access, instants=False, keyed=True).model_dump(mode="json", exclude_none=True)
        fields = ["passage_id", "doc_id", "version", "acl", "acl_since"]
        variants: dict[str, dict[str, Any]] = {
            "adapter": {"filter": flt, "with_payload": True},
            "no_validity": {"filter": {"must": flt["must"][:2]}, "with_payload": True},
            "acl_only_not_a_valid_filter": {"filter": {"must": flt["must"][1:2]}, "with_payload": True},
            "adapter_payload_fields": {"filter": flt, "with_payload": fields},
        }
        counts = {name: _count(http, args, f) for name, f in (("adapter", flt), ("keyed", keyed))}
        run["admitted"][label] = counts
        if counts["keyed"] == counts["adapter"]:  # every admitted point holds its keys
            variants |= {
                "keyed": {"filter": keyed, "with_payload": True},
                "keyed_no_validity": {"filter": {"must": keyed["must"][:1]}, "with_payload": True},
                "keyed_and_acl": {"filter": {"must": [*keyed["must"][:1], *flt["must"][1:]]}, "with_payload": True},
            }
        times: dict[str, list[float]] = {k: [] for k in variants}
        raised = _servers_at([args.server_pid], 15) if args.server_pid else contextlib.nullcontext()
        with raised:
            run.setdefault("server_nice_timed", _nice(args.server_pid))
            _interleave(http, url, rng, args.queries, variants, times)
        run["server_time_ms_p50"][label] = {k: round(float(np.median(x)), 2) for k, x in times.items()}
        run["server_time_ms_p95"][label] = {k: round(float(np.percentile(x, 95)), 2) for k, x in times.items()}
        print(f"  {args.collection} {label}: {run['server_time_ms_p50'][label]}", file=sys.stderr)
    run["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    report = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    report["runs"].append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


def _interleave(
    http: httpx.Client,
    url: str,
    rng: np.random.Generator,
    queries: int,
    variants: dict[str, dict[str, Any]],
    times: dict[str, list[float]],
) -> None:
    """Each query vector through every variant in turn, the order rotated query by query."""
    names = list(variants)
    for q in range(queries):
        v = rng.standard_normal(384)
        v /= np.linalg.norm(v)
        for name in names[q % len(names) :] + names[: q % len(names)]:
            r = http.post(url, json={"query": v.tolist(), "limit": 50} | variants[name])
            r.raise_for_status()
            times[name].append(float(r.json()["time"]) * 1000)


def _nice(pid: int | None) -> int | None:
    return os.getpriority(os.PRIO_PROCESS, pid) if pid else None


def _count(http: httpx.Client, args: argparse.Namespace, flt: dict[str, Any]) -> int:
    r = http.post(f"{args.qdrant_url}/collections/{args.collection}/points/count", json={"filter": flt, "exact": True})
    r.raise_for_status()
    return int(r.json()["result"]["count"])


if __name__ == "__main__":
    main()
