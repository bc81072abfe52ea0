#!/usr/bin/env python3
"""Where a cluster query's time goes: Elasticsearch and Qdrant server time per ranker, round trips,
what each response carries, and whether the fused path runs its rankers side by side (issue 22 item 2).

Runs against the index and collection `bench/retrieval_scale.py --profile cluster --keep --cluster-name
NAME` loaded (same size and seed, so the same queries). For each filter (1 / 10 / 100 %):

- **bm25**: the request the adapter sends, posted raw: Elasticsearch's own `took`, the wall time of
  the round trip, the response size; and variants of the same request side by side, interleaved query
  by query (`before`: the request of main 7ca2587; `adapter`: this build's `ElasticLexicalIndex.search`
  request; the variants change one thing each). Every variant's top-k is compared with `before`'s.
- **read-back**: the `ids` look-up of the dense ranker's 50 hits (`passages`), its `took`.
- **dense**: the adapter's `query_points` posted raw: Qdrant's reported `time`, wall, response size;
  with `with_payload` limited to the fields the adapter reads, and `exact` (a full scan of what the
  filter admits) beside it.
- **fused timeline**: `Retriever.search` with timing wrappers around the three calls: when each
  started and ended relative to the search, so the overlap (side by side or in series) is measured.
- **profile**: Elasticsearch's profile API on a few queries (per-clause time, the collector).
- **config**: the index's settings and segments, the query cache, Qdrant's collection info
  (indexed vectors, segments, HNSW and optimizer config, payload indexes and their point counts).

    python3 bench/cluster_breakdown.py --cluster-name scale8 --size 100000 --queries 100 --lock /work/wt/bench.lock
Results: results/cluster-breakdown.json (`--out`). Timed parts hold `--lock`; load averages recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import FILTERS, Queries, _commit, _locked, reopen_cluster
from bench.retrieval_workload import TENANT, StubEmbedder
from indexer.elastic_mapping import SEARCH_FIELDS_ADDED, access_query
from indexer.qdrant_server import access_filter
from query.retrieval import RetrievalSettings, Retriever
from schemas.principal import AccessFilter, Principal

OUT = Path(__file__).resolve().parent / "results" / "cluster-breakdown.json"
QDRANT_VARIANTS = ("adapter", "payload_fields", "no_validity", "tenant_only", "exact")
SETTINGS = RetrievalSettings(k=8, candidates=50, bm25_floor=0.0, dense_floor=-1.0)


def before_body(lexical: Any, query: str, access: AccessFilter, limit: int, floor: float) -> dict[str, Any]:
    """The bm25 request of main 7ca2587 (ElasticLexicalIndex.search), as a search body."""
    w = lexical.weights
    match = {
        "multi_match": {
            "query": lexical.query_text(query),
            "fields": [f"text^{w.text:g}", f"heading^{w.heading:g}", f"title_text^{w.title:g}"],
            "type": "most_fields",
            "operator": "or",
        }
    }
    return {
        "query": {"bool": {"must": [match], "filter": access_query(access)}},
        "min_score": floor,
        "size": limit,
        "sort": [{"_score": "desc"}, {"passage_id": "asc"}],
        "track_scores": True,
        "_source": {"excludes": ["heading", *SEARCH_FIELDS_ADDED]},
    }


def variants(lexical: Any) -> dict[str, Callable[[str, AccessFilter, int, float], dict[str, Any]]]:
    def change(**kv: Any) -> Callable[[str, AccessFilter, int, float], dict[str, Any]]:
        def body(q: str, a: AccessFilter, limit: int, floor: float) -> dict[str, Any]:
            b = before_body(lexical, q, a, limit, floor)
            for k, v in kv.items():
                if v is None:
                    b.pop(k, None)
                else:
                    b[k] = v
            return b

        return body

    out: dict[str, Callable[[str, AccessFilter, int, float], dict[str, Any]]] = {
        "before": change(),
        "no_total_hits": change(track_total_hits=False),
        "no_total_hits_no_min_score": change(track_total_hits=False, min_score=None),
        "score_sort_only": change(track_total_hits=False, min_score=None, sort=None, track_scores=None),
        "no_source": change(_source=False),
    }
    from indexer.elastic import TIE_MARGIN

    # this build's first request (a tie past the margin asks again: counted apart, not timed here)
    out["adapter"] = lambda q, a, limit, floor: dict(lexical.search_request(q, a, limit + TIE_MARGIN, floor) or {})
    return out


def pct(xs: list[float], p: float) -> float:
    return round(float(np.percentile(xs, p)), 2) if xs else float("nan")


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50": pct(xs, 50), "p95": pct(xs, 95), "mean": round(float(np.mean(xs)), 2) if xs else float("nan")}


class Spans:
    """Start and end of each store call of a fused search, relative to a shared origin (ms)."""

    def __init__(self) -> None:
        self.origin = 0.0
        self.spans: list[tuple[str, float, float]] = []

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append((name, (began - self.origin) * 1000, (time.perf_counter() - self.origin) * 1000))


class TimedLexical:
    def __init__(self, inner: Any, spans: Spans) -> None:
        self.inner, self.spans = inner, spans

    def search(self, *a: Any) -> Any:
        with self.spans.span("bm25"):
            return self.inner.search(*a)

    def passages(self, *a: Any) -> Any:
        with self.spans.span("read_back"):
            return self.inner.passages(*a)


class TimedVector:
    def __init__(self, inner: Any, spans: Spans) -> None:
        self.inner, self.spans = inner, spans

    def search(self, *a: Any) -> Any:
        with self.spans.span("qdrant"):
            return self.inner.search(*a)


def es_post(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, dict[str, Any], int]:
    began = time.perf_counter()
    r = http.post(url, json=body)
    wall = (time.perf_counter() - began) * 1000
    r.raise_for_status()
    return wall, r.json(), len(r.content)


def listener_pid(port: int) -> int | None:
    """The process listening on a local port (from `ss`), to read its CPU time."""
    import re
    import subprocess

    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True).stdout
    found = re.search(r"pid=(\d+)", out)
    return int(found.group(1)) if found else None


def cpu_ms(pid: int | None) -> float:
    """User + system CPU of a process, every thread (ms; the kernel counts in ticks of 10 ms)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def server_cpu(
    blocks: dict[str, Callable[[int], object]], count: int, pids: dict[str, int | None]
) -> dict[str, dict[str, float]]:
    """Each call run `count` times in a block of its own: CPU ms per call of each server process, and
    of this process. Other clients of the shared servers add to it: an upper bound."""
    out: dict[str, dict[str, float]] = {}
    for name, call in blocks.items():
        before = {k: cpu_ms(p) for k, p in pids.items()}
        mine = time.process_time()
        began = time.perf_counter()
        for j in range(count):
            call(j)
        out[name] = {
            **{f"{k}_cpu_ms": round((cpu_ms(p) - before[k]) / count, 2) for k, p in pids.items()},
            "client_cpu_ms": round((time.process_time() - mine) * 1000 / count, 2),
            "wall_ms": round((time.perf_counter() - began) * 1000 / count, 2),
        }
    return out


def cpu_blocks(
    http: httpx.Client,
    es_search: str,
    qd_query: str,
    kinds: dict[str, Callable[[str, AccessFilter, int, float], dict[str, Any]]],
    lexical: Any,
    vector: Any,
    retriever: Retriever,
    w: Any,
    principal: Principal,
    flt: dict[str, Any],
    as_of: datetime,
) -> dict[str, Callable[[int], object]]:
    """The calls whose CPU per call is measured in blocks (server_cpu)."""
    access = AccessFilter.for_principal(principal, as_of)

    def qdrant_raw(j: int) -> object:
        vec = np.asarray(w.qvecs[j], dtype=np.float32).tolist()
        return http.post(qd_query, json={"query": vec, "filter": flt, "limit": 50, "with_payload": True})

    return {
        "es_before": lambda j: es_post(http, es_search, kinds["before"](w.texts[j], access, 50, 0.0)),
        "es_adapter": lambda j: es_post(http, es_search, kinds["adapter"](w.texts[j], access, 50, 0.0)),
        "qdrant_raw": qdrant_raw,
        "lexical_search": lambda j: lexical.search(w.texts[j], access, 50, 0.0),
        "vector_search": lambda j: vector.search(w.qvecs[j], access, 50, -1.0),
        "fused": lambda j: retriever.search(principal, w.texts[j], as_of),
    }


def config(lexical: Any, vector: Any, es_url: str, qdrant_url: str) -> dict[str, Any]:
    es = lexical.client
    alias = lexical.alias(TENANT)
    settings = es.indices.get_settings(index=alias, include_defaults=True)
    ((index, body),) = settings.items()
    flat = {**body.get("defaults", {}), **body["settings"]}
    keys = (
        "index.number_of_shards",
        "index.number_of_replicas",
        "index.refresh_interval",
        "index.max_result_window",
        "index.requests.cache.enable",
        "index.queries.cache.enabled",
        "index.search.idle.after",
        "index.codec",
    )

    def lookup(key: str) -> Any:
        node: Any = flat
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return node.get(key) if isinstance(node, dict) else None
            node = node[part]
        return node

    stats = es.indices.stats(index=alias, metric="segments,query_cache,request_cache,search,store")["_all"]["primaries"]
    nodes = es.nodes.stats(metric="thread_pool,jvm", filter_path="nodes.*.thread_pool.search,nodes.*.jvm.mem")
    info = httpx.get(f"{qdrant_url}/collections/{vector.collection}", timeout=10).json()["result"]
    return {
        "es_index": index,
        "es_settings": {k: lookup(k) for k in keys},
        "es_segments": stats["segments"]["count"],
        "es_store_mb": round(stats["store"]["size_in_bytes"] / 2**20, 1),
        "es_query_cache": stats["query_cache"],
        "es_request_cache": stats["request_cache"],
        "es_nodes": nodes.body,
        "qdrant_collection": {
            k: info.get(k)
            for k in (
                "status",
                "optimizer_status",
                "points_count",
                "indexed_vectors_count",
                "segments_count",
                "payload_schema",
            )
        }
        | {"config": info["config"]},
    }


def profile_summary(resp: dict[str, Any]) -> dict[str, Any]:
    shard = resp["profile"]["shards"][0]
    search = shard["searches"][0]
    top = search["query"][0]

    def clause(q: dict[str, Any]) -> dict[str, Any]:
        b = q.get("breakdown", {})
        return {
            "type": q["type"],
            "description": q["description"][:120],
            "ms": round(q["time_in_nanos"] / 1e6, 3),
            "score_count": b.get("score_count"),
            "next_doc_count": b.get("next_doc_count"),
            "advance_count": b.get("advance_count"),
            "set_min_competitive_score_count": b.get("set_min_competitive_score_count"),
        }

    return {
        "took": resp["took"],
        "query": clause(top),
        "children": [clause(c) for c in top.get("children", [])],
        "rewrite_ms": round(search["rewrite_time"] / 1e6, 3),
        "collector": [
            {"name": c["name"], "reason": c["reason"], "ms": round(c["time_in_nanos"] / 1e6, 3)}
            for c in search["collector"]
        ],
        "fetch_ms": round(shard.get("fetch", {}).get("time_in_nanos", 0) / 1e6, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profiles", type=int, default=3, help="profiled queries per filter")
    parser.add_argument("--lock", type=Path)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--es-url", default=os.environ.get("RAGSYNC_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--qdrant-url", default=os.environ.get("RAGSYNC_QDRANT_URL", "http://127.0.0.1:6333"))
    args = parser.parse_args()
    args.reuse, args.load_nice = True, 0
    started = datetime.now(UTC).isoformat(timespec="seconds")
    rng = np.random.default_rng(args.seed)
    # retrieval_scale draws its queries for 200; the first `--queries` of them are the same ones
    q = Queries(args.size, 200, rng)
    lexical, vector, t = reopen_cluster(args, args.size, q, rng, True, args.cluster_name)
    w = q.workload(args.size)
    count = min(args.queries, 200)
    # identity: Qdrant gzips a response when asked (httpx asks by default), and a gzipped response often
    # stalled ~40 ms (delayed ACK) on this machine: raw timings here would measure that, not the server
    http = httpx.Client(timeout=30, headers={"Accept-Encoding": "identity"})
    es_search = f"{args.es_url}/{lexical.alias(TENANT)}/_search"
    qd_query = f"{args.qdrant_url}/collections/{vector.collection}/points/query"
    report: dict[str, Any] = {"at_start": started, "commit": _commit(), "label": args.label, "reopened": t}
    report["config"] = config(lexical, vector, args.es_url, args.qdrant_url)
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    kinds = variants(lexical)
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    encoded = {
        name: QdrantVectorIndex(
            QdrantClient(url=args.qdrant_url, timeout=30, check_compatibility=False, headers=headers),
            vector.dim,
            collection=vector.collection,
        )
        for name, headers in (
            ("gzip", {"Accept-Encoding": "gzip, deflate"}),
            ("identity", {"Accept-Encoding": "identity"}),
        )
    }
    servers = {"es": listener_pid(9200), "qdrant": listener_pid(6333)}
    report["server_pids"] = servers
    results: dict[str, Any] = {}
    with _locked(args.lock) as timed:
        for label, group in FILTERS:
            principal = Principal(tenant=TENANT, user="bench", groups=(group,))
            access = AccessFilter.for_principal(principal, as_of)
            es: dict[str, dict[str, list[float]]] = {k: {"took": [], "wall": [], "bytes": []} for k in kinds}
            same_topk = dict.fromkeys(kinds, 0)
            hits_returned: dict[str, list[float]] = {k: [] for k in kinds}
            read_back: dict[str, list[float]] = {"took": [], "wall": [], "bytes": []}
            qd: dict[str, dict[str, list[float]]] = {k: {"time": [], "wall": [], "bytes": []} for k in QDRANT_VARIANTS}
            flt = access_filter(access, instants=False).model_dump(mode="json", exclude_none=True)
            # the same filter without its validity clauses (tenant and ACL entries only), and tenant alone
            acl_only = {"must": flt["must"][:2]}
            tenant_only = {"must": flt["must"][:1]}
            for i in range(-5, count):  # five warm-up queries
                j = i % count
                ids: dict[str, list[str]] = {}
                for name, body in kinds.items():  # interleaved query by query: the same machine state
                    wall, resp, size = es_post(http, es_search, body(w.texts[j], access, 50, 0.0))
                    if i < 0:
                        continue
                    es[name]["took"].append(resp["took"])
                    es[name]["wall"].append(wall)
                    es[name]["bytes"].append(size)
                    hits = resp["hits"]["hits"]
                    hits_returned[name].append(len(hits))
                    # the adapter's order: score desc, passage_id asc (a variant without the tie-break
                    # is re-sorted here; its set may still differ at a tie on the 50th score)
                    ranked = sorted(
                        hits,
                        key=lambda h: (
                            -float(h["_score"]),
                            h["_source"]["passage_id"] if h.get("_source") else h["_id"],
                        ),
                    )
                    ids[name] = [h["_id"] for h in ranked][:50]
                if i >= 0:
                    for name in kinds:
                        same_topk[name] += ids[name] == ids["before"]
                vec = np.asarray(w.qvecs[j], dtype=np.float32).tolist()
                base = {"query": vec, "filter": flt, "limit": 50, "score_threshold": -1.0, "with_vector": False}
                for name, extra in (
                    ("adapter", {"with_payload": True}),
                    ("payload_fields", {"with_payload": ["passage_id", "doc_id", "version", "acl", "acl_since"]}),
                    ("no_validity", {"with_payload": True, "filter": acl_only}),
                    ("tenant_only", {"with_payload": True, "filter": tenant_only}),
                    ("exact", {"with_payload": True, "params": {"exact": True}}),
                ):
                    if name == "exact" and j >= 20:
                        continue  # a full scan per query: 20 are enough to compare
                    began = time.perf_counter()
                    r = http.post(qd_query, json=base | extra)
                    wall = (time.perf_counter() - began) * 1000
                    r.raise_for_status()
                    if i < 0:
                        continue
                    body = r.json()
                    qd[name]["time"].append(float(body["time"]) * 1000)
                    qd[name]["wall"].append(wall)
                    qd[name]["bytes"].append(len(r.content))
                    if name == "adapter":
                        pids = [str(p["payload"]["passage_id"]) for p in body["result"]["points"]]
                        rb = {
                            "query": {
                                "bool": {
                                    "filter": [{"ids": {"values": pids}}, *access_query(access)],
                                }
                            },
                            "size": len(pids),
                            "_source": {"excludes": ["heading", *SEARCH_FIELDS_ADDED]},
                        }
                        wall, resp, size = es_post(http, es_search, rb)
                        read_back["took"].append(resp["took"])
                        read_back["wall"].append(wall)
                        read_back["bytes"].append(size)
            # the fused path with timing wrappers: do the halves overlap?
            spans = Spans()
            retriever = Retriever(
                TimedLexical(lexical, spans),  # type: ignore[arg-type]
                TimedVector(vector, spans),  # type: ignore[arg-type]
                StubEmbedder(dict(zip(w.texts, w.qvecs, strict=True))),
                None,
                SETTINGS,
            )
            timeline: dict[str, list[float]] = {
                "total": [],
                "bm25_start": [],
                "bm25_end": [],
                "qdrant_start": [],
                "qdrant_end": [],
                "read_back_end": [],
                "overlap_ms": [],
            }
            for i in range(-5, count):
                spans.spans.clear()
                spans.origin = time.perf_counter()
                retriever.search(principal, w.texts[i % count], as_of)
                total = (time.perf_counter() - spans.origin) * 1000
                if i < 0:
                    continue
                by = {name: (s, e) for name, s, e in spans.spans}
                timeline["total"].append(total)
                timeline["bm25_start"].append(by["bm25"][0])
                timeline["bm25_end"].append(by["bm25"][1])
                timeline["qdrant_start"].append(by["qdrant"][0])
                timeline["qdrant_end"].append(by["qdrant"][1])
                timeline["read_back_end"].append(by["read_back"][1] if "read_back" in by else by["qdrant"][1])
                dense_end = by["read_back"][1] if "read_back" in by else by["qdrant"][1]
                timeline["overlap_ms"].append(
                    max(0.0, min(by["bm25"][1], dense_end) - max(by["bm25"][0], by["qdrant"][0]))
                )
            # the adapter's dense search through a client that accepts gzip (httpx's default) and one
            # that does not, interleaved query by query
            encodings: dict[str, list[float]] = {"gzip": [], "identity": []}
            for i in range(-5, count):
                for name, store in encoded.items():
                    began = time.perf_counter()
                    store.search(w.qvecs[i % count], access, 50, -1.0)
                    if i >= 0:
                        encodings[name].append((time.perf_counter() - began) * 1000)
            profiled = []
            for j in range(args.profiles):
                for name in ("before", "adapter"):
                    _, resp, _ = es_post(http, es_search, kinds[name](w.texts[j], access, 50, 0.0) | {"profile": True})
                    profiled.append({"variant": name, "query": w.texts[j], **profile_summary(resp)})
            blocks = cpu_blocks(http, es_search, qd_query, kinds, lexical, vector, retriever, w, principal, flt, as_of)
            cpu = server_cpu(blocks, count, servers)
            results[label] = {
                "cpu_per_call": cpu,
                "es": {
                    name: {k: summary(v) for k, v in d.items()}
                    | {
                        "same_top50_as_before": same_topk[name],
                        "mean_hits": round(float(np.mean(hits_returned[name])), 1),
                    }
                    for name, d in es.items()
                },
                "read_back": {k: summary(v) for k, v in read_back.items()},
                "qdrant": {name: {k: summary(v) for k, v in d.items()} for name, d in qd.items()},
                "fused_timeline_ms": {k: summary(v) for k, v in timeline.items()},
                "dense_by_encoding_ms": {
                    k: summary(v) | {"share_over_35ms": round(float(np.mean(np.array(v) > 35)), 3)}
                    for k, v in encodings.items()
                },
                "fused_spans": "bm25, qdrant and read_back (the dense hits' passages from Elasticsearch) start/end",
                "profile": profiled,
                "queries": count,
            }
            r = results[label]
            print(f"{label:>4}: cpu per call {json.dumps(cpu)}", file=sys.stderr)
            print(f"{label:>4}: dense by encoding {json.dumps(r['dense_by_encoding_ms'])}", file=sys.stderr)
            print(
                f"{label:>4}: es took p50/p95 "
                + ", ".join(f"{n} {d['took']['p50']:.0f}/{d['took']['p95']:.0f}" for n, d in r["es"].items())
                + f"; read-back took {r['read_back']['took']['p50']:.0f}/{r['read_back']['took']['p95']:.0f}"
                + "; qdrant time "
                + ", ".join(f"{n} {d['time']['p50']:.1f}/{d['time']['p95']:.1f}" for n, d in r["qdrant"].items())
                + f"; fused {r['fused_timeline_ms']['total']['p50']:.0f}/{r['fused_timeline_ms']['total']['p95']:.0f}"
                f" overlap p50 {r['fused_timeline_ms']['overlap_ms']['p50']:.0f}",
                file=sys.stderr,
            )
    report["timed"] = timed
    report["filters"] = results
    existing: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    existing["runs"].append(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)
    lexical.close()
    vector.close()


if __name__ == "__main__":
    main()
