#!/usr/bin/env python3
"""Retrieval latency up to a million passages, both profiles, filters admitting 1 %, 10 % and 100 %.

bench/retrieval.py at scale: the same synthetic passages (Zipf-vocabulary text, random unit
vectors, dim 384), the same queries and the same rankers (bm25, dense, fused = Retriever.search with
both rankers and RRF), but generated and loaded in batches so a million passages never sit in memory
at once (about 2 GB as Passage objects, 1.5 GB as vectors). Every load is timed and the process's
peak RSS is reported per size (run one size per process for a clean peak: `--sizes 1000000`).

Embedded: SqliteLexicalIndex (batches of 10,000 passages, one transaction each, then FTS5
'optimize' into one segment, timed apart) and EdgeVectorIndex (HNSW built by optimize()). Cluster:
ElasticLexicalIndex (bulk, refresh=false, one refresh) and QdrantVectorIndex on the server (timed
once the collection is green). `--rankers bm25` measures the lexical side alone: building HNSW over a
million vectors takes most of an hour on this machine's 2 shared cores (262-340 s at 100k).

    python3 bench/retrieval_scale.py --sizes 100000                    # embedded, all rankers (~8 min)
    python3 bench/retrieval_scale.py --sizes 1000000 --rankers bm25    # the lexical side at 1M
    python3 bench/retrieval_scale.py --profile cluster --sizes 1000000 --rankers bm25
Results are merged into results/retrieval-scale.json (rows of the same profile, size, filter,
ranker and backend are replaced), so runs of different sizes and profiles build one table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_workload import DIM, STOPWORD_LIKE, TENANT, StubEmbedder, Workload
from bench.retrieval_workload import batches as retrieval_batches
from query.retrieval import RetrievalSettings, Retriever
from schemas.passages import Passage
from schemas.principal import AccessFilter, Principal

FILTERS = (("1%", "hundredth"), ("10%", "tenth"), ("100%", "all"))
TIERS = ((10, "tenth"), (100, "hundredth"))
RANKERS = ("bm25", "bm25-exists", "bm25-termset", "bm25-before", "dense", "fused", "dense-before", "fused-before")
"""`dense-before` / `fused-before`: main 1fb722c's dense half on the cluster (bench/cluster_before.py).
A ranker named twice is measured twice (rows `pass` 1, 2: an ABBA order in one process)."""


def exists_search(lexical: Any, query: str, access: AccessFilter, limit: int, floor: float) -> list[Any]:
    """The FTS5 query before the ACL moved into the index (embedded only), on the same store: every
    matching row joined to passages and checked by EXISTS over passage_acl before ranking. `before`."""
    from indexer.sqlite_fts import _match_expression

    expression = _match_expression(query)
    fts = lexical._fts(access.tenant, create=False)
    if expression is None or fts is None:
        return []
    as_of = int(access.as_of.timestamp() * 1000)
    w = lexical.weights
    marks = ",".join("?" for _ in access.entries)
    sql = (
        "SELECT * FROM ("
        f" SELECT p.*, -bm25({fts}, {w.title:g}, {w.heading:g}, {w.text:g}, 0) AS score"
        f" FROM {fts} JOIN passages p ON p.rid = {fts}.rowid"
        f" WHERE {fts} MATCH ? AND p.tenant = ?"
        " AND p.effective_ms <= ? AND (p.superseded_ms IS NULL OR p.superseded_ms > ?)"
        f" AND EXISTS (SELECT 1 FROM passage_acl a WHERE a.rid = p.rid AND a.entry IN ({marks})"
        " AND a.since_ms <= ?)"
        ") WHERE score >= ? ORDER BY score DESC, passage_id LIMIT ?"
    )
    cur = lexical._conn.execute(sql, (expression, access.tenant, as_of, as_of, *access.entries, as_of, floor, limit))
    cols = [d[0] for d in cur.description]
    return [lexical._hit(dict(zip(cols, row, strict=True))) for row in cur.fetchall()]


def termset_search(lexical: Any, query: str, access: AccessFilter, limit: int, floor: float) -> list[Any]:
    """Tantivy's search with the former principal clause (one term_set_query, which walks the principals'
    term dictionary of every segment) on the same store: `bm25-termset`, the `before` of acl_query."""
    import tantivy

    from indexer import tantivy_side
    from indexer.fts_acl import acl_token

    def former(entries: Any) -> Any:
        tokens = sorted({acl_token(e) for e in entries})
        return tantivy.Query.const_score_query(
            tantivy.Query.term_set_query(tantivy_side.SCHEMA, "principals", tokens), 0.0
        )

    current = tantivy_side.acl_query
    tantivy_side.acl_query = former  # type: ignore[assignment]
    try:
        return list(lexical.search(query, access, limit, floor))
    finally:
        tantivy_side.acl_query = current  # type: ignore[assignment]


def elastic_before_search(lexical: Any, query: str, access: AccessFilter, limit: int, floor: float) -> list[Any]:
    """ElasticLexicalIndex.search as main 7ca2587 sent it (cluster only), on the same index: sorted by
    score then passage_id, `min_score`, the total counted (up to 10,000). `bm25-before`."""
    from bench.cluster_breakdown import before_body
    from indexer.payload import doc_to_passage
    from indexer.ports import Hit

    if not lexical.query_text(query) or not access.entries:
        return []
    response = lexical.client.search(
        index=lexical.alias(access.tenant), body=before_body(lexical, query, access, limit, floor)
    )
    return [Hit(passage=doc_to_passage(h["_source"]), score=float(h["_score"])) for h in response["hits"]["hits"]]


BATCH = 10_000
OUT = Path(__file__).resolve().parent / "results" / "retrieval-scale.json"


def _commit() -> str:
    """The code measured: HEAD, marked dirty when the worktree differs from it."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batches(n: int, rng: np.random.Generator) -> Iterator[tuple[int, list[Passage], np.ndarray]]:
    """bench/retrieval's passages with one more tier: every 10th readable by group:tenth, every 100th by
    group:hundredth too, so those filters admit exactly 10 % and 1 %."""
    return retrieval_batches(n, rng, TIERS, size=BATCH)


class Queries:
    """Collects query texts and vectors from the passages as they stream past (bench/retrieval's recipe)."""

    def __init__(self, n: int, count: int, rng: np.random.Generator, paired: bool = False) -> None:
        """`paired`: query k's vector from the passage its text came from (the two rankers' lists then
        overlap, as on real corpora); by default from another passage (they hardly ever do)."""
        self.text_from: dict[int, list[int]] = {}
        self.vector_from: dict[int, list[int]] = {}
        for k, i in enumerate(rng.integers(0, n, size=count)):
            self.text_from.setdefault(int(i), []).append(k)
        for k, i in enumerate(rng.integers(0, n, size=count)):
            self.vector_from.setdefault(int(i), []).append(k)
        if paired:
            self.vector_from = {i: list(ks) for i, ks in self.text_from.items()}
        self.rng = rng
        self.texts = [""] * count
        self.qvecs = np.zeros((count, DIM), dtype=np.float32)

    def see(self, start: int, passages: list[Passage], vectors: np.ndarray) -> None:
        head = {f"w{i}" for i in range(STOPWORD_LIKE)}
        for j, p in enumerate(passages):
            for k in self.text_from.get(start + j, ()):
                w = [x for x in p.text.split() if x not in head] or p.text.split()
                self.texts[k] = " ".join(self.rng.choice(w, size=min(4, len(w)), replace=False)) + f" q{k}"
            for k in self.vector_from.get(start + j, ()):
                v = vectors[j] + self.rng.standard_normal(DIM).astype(np.float32) * 0.03
                self.qvecs[k] = v / np.linalg.norm(v)

    def workload(self, n: int) -> Workload:
        return Workload(n, [], np.zeros((0, DIM), dtype=np.float32), self.texts, self.qvecs)


def _tree_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20 if path.exists() else 0.0


def load_embedded(
    home: Path, n: int, q: Queries, rng: np.random.Generator, dense: bool, engines: list[str]
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """Every engine's store (each in its own file) and one vector index, loaded from the same batches."""
    from indexer.qdrant_edge import EdgeVectorIndex
    from indexer.sqlite_fts import SqliteLexicalIndex
    from indexer.tantivy_lexical import TantivyLexicalIndex

    kinds = {"fts5": SqliteLexicalIndex, "tantivy": TantivyLexicalIndex}
    stores: dict[str, Any] = {e: kinds[e](home / f"lexical-{e}.db") for e in engines}
    vector = EdgeVectorIndex(home / "vectors", DIM) if dense else None
    t: dict[str, Any] = {f"load_lexical_{e}_s": 0.0 for e in engines} | {"load_vector_s": 0.0}
    for start, passages, vectors in batches(n, rng):
        q.see(start, passages, vectors)
        for engine, lexical in stores.items():
            began = time.perf_counter()
            lexical.upsert(passages)  # one transaction per batch (and one Tantivy commit)
            t[f"load_lexical_{engine}_s"] += time.perf_counter() - began
        if vector is not None:
            began = time.perf_counter()
            vector.upsert(passages, vectors)
            t["load_vector_s"] += time.perf_counter() - began
    if "fts5" in stores:
        began = time.perf_counter()
        for (fts,) in stores["fts5"]._conn.execute("SELECT name FROM fts_tables").fetchall():
            stores["fts5"]._conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
        t["fts_optimize_s"] = time.perf_counter() - began
    if vector is not None:
        import indexer.qdrant_edge as edge

        edge.REBUILD_TIMEOUT_S = 4 * 3600.0  # a million vectors may take longer than the worker's hour
        began = time.perf_counter()
        t["hnsw_built"] = vector.optimize()  # False: the child failed or timed out, queries would full-scan
        t["hnsw_optimize_s"] = time.perf_counter() - began
        t |= {f"hnsw_{k}": v for k, v in (getattr(vector, "last_rebuild", None) or {}).items()}
        info = vector._shard.info()
        t["vector_segments"] = int(info.segments_count)
        t["vector_indexed_points"] = int(getattr(info, "indexed_vectors_count", 0) or 0)
        if not t["hnsw_built"]:
            print("  HNSW was NOT built (rebuild failed or unchanged): dense rows measure a full scan", file=sys.stderr)
    for engine in engines:
        t[f"lexical_{engine}_db_mb"] = (home / f"lexical-{engine}.db").stat().st_size / 2**20
    if "tantivy" in stores:
        t["tantivy_index_mb"] = _tree_mb(home / "lexical-tantivy.db.tantivy")
        tantivy = stores["tantivy"]
        sides = [tantivy._side(TENANT, s, create=False) for s in tantivy._shards(TENANT)]
        t["tantivy_shards"] = len(sides)
        t["tantivy_segments"] = sum(side.searcher().num_segments for side in sides if side is not None)
    return stores, vector, t


def reopen_embedded(
    home: Path, n: int, q: Queries, rng: np.random.Generator, dense: bool, engines: list[str], hnsw: tuple[int, int]
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """`--reuse`: the stores an earlier run loaded into `home` (same size and seed), reopened. The batches
    are generated again only to draw the same queries (nothing is written), and HNSW is built here, in
    this process, with m and ef_construct = `hnsw` (0, 0: the shard's defaults, 16 and 100), unless an
    earlier `--reuse` run built it already: the graph is flushed into the home and kept (`hnsw_reused`)."""
    import qdrant_edge as qe

    from indexer.qdrant_edge import VACUUM, EdgeVectorIndex
    from indexer.sqlite_fts import SqliteLexicalIndex
    from indexer.tantivy_lexical import TantivyLexicalIndex

    for start, passages, vectors in batches(n, rng):
        q.see(start, passages, vectors)
    kinds = {"fts5": SqliteLexicalIndex, "tantivy": TantivyLexicalIndex}
    stores: dict[str, Any] = {e: kinds[e](home / f"lexical-{e}.db") for e in engines}
    t: dict[str, Any] = {"reused_home": str(home)}
    for e, lexical in stores.items():
        t[f"lexical_{e}_passages"] = held = lexical.count(TENANT)  # an earlier run's purge deleted doc0's 20
        if held not in (n, n - 20):
            raise RuntimeError(f"{home}: the {e} store holds {held} passages, not {n}")
    vector = None
    if dense:
        path = home / "vectors"
        import shutil

        shutil.rmtree(path.with_name("vectors.rebuild"), ignore_errors=True)  # a killed run's half-built copy
        m, ef = hnsw
        config = qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine),
            optimizers=VACUUM,
            hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef, full_scan_threshold=10_000) if m else None,
        )
        shard = qe.EdgeShard.load(str(path), config)
        before = shard.info()
        t["hnsw_m"], t["hnsw_ef_construct"] = (m, ef) if m else (16, 100)
        if before.points_count and before.indexed_vectors_count >= before.points_count:
            # an earlier --reuse run built the graph and flushed it into the home: kept, not rebuilt
            t["hnsw_built"], t["hnsw_reused"] = True, True
        else:
            t["hnsw_loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
            at = f"{datetime.now(UTC):%H:%M:%S}"
            print(f"  building HNSW over {before.points_count} points from {at}", file=sys.stderr, flush=True)
            began, cpu = time.perf_counter(), time.process_time()
            t["hnsw_built"] = bool(shard.optimize())
            shard.flush()  # the indexed segment stays in the home: the next --reuse run finds it built
            t["hnsw_optimize_s"] = time.perf_counter() - began
            t["hnsw_optimize_cpu_s"] = time.process_time() - cpu  # every thread of this process
            t["hnsw_loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            t["hnsw_reused"] = False
        shard.close()
        vector = EdgeVectorIndex(path, DIM)
        info = vector._shard.info()
        t["vector_segments"] = int(info.segments_count)
        t["vector_points"] = int(info.points_count)
        t["vector_indexed_points"] = int(getattr(info, "indexed_vectors_count", 0) or 0)
    return stores, vector, t


def load_cluster(
    args: argparse.Namespace, n: int, q: Queries, rng: np.random.Generator, dense: bool, prefix: str
) -> tuple[Any, Any, dict[str, Any]]:
    from indexer.elastic import ElasticLexicalIndex
    from indexer.qdrant_server import QdrantVectorIndex, connect

    lexical = ElasticLexicalIndex(args.es_url, prefix=f"{prefix}-{n}", refresh="false")
    vector = (
        QdrantVectorIndex(connect(args.qdrant_url), DIM, collection=f"{prefix}-{n}".replace("-", "_"))
        if dense
        else None
    )
    t: dict[str, Any] = {"load_lexical_s": 0.0, "load_vector_s": 0.0}
    threshold = None
    if vector is not None and args.index_after_load:  # Qdrant's bulk-load recipe: no HNSW until loaded
        from qdrant_client import models

        threshold = vector._client.get_collection(vector.collection).config.optimizer_config.indexing_threshold
        vector._client.update_collection(
            vector.collection, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=0)
        )
        t["qdrant_indexing_threshold"] = threshold
    from concurrent.futures import ThreadPoolExecutor

    def timed(key: str, call: Callable[[], None]) -> None:
        began = time.perf_counter()
        call()
        t[key] += time.perf_counter() - began

    # Elasticsearch's batch in a thread beside Qdrant's (both wait on their server most of the time);
    # the load times are each store's own, summed over batches
    with ThreadPoolExecutor(1) as side:
        t["load_wall_s"] = time.perf_counter()
        for start, passages, vectors in batches(n, rng):
            q.see(start, passages, vectors)
            es_part = side.submit(timed, "load_lexical_s", lambda p=passages: lexical.upsert(p))
            if vector is not None:
                timed("load_vector_s", lambda p=passages, v=vectors: vector.upsert(p, v))
            es_part.result()
        t["load_wall_s"] = time.perf_counter() - t["load_wall_s"]
    began = time.perf_counter()
    es, alias = lexical.client, lexical.alias(TENANT)
    es.indices.refresh(index=alias)
    es.indices.forcemerge(index=alias, max_num_segments=1, request_timeout=1800)
    t["es_refresh_merge_s"] = time.perf_counter() - began
    stats = es.indices.stats(index=alias, metric="store,segments")["_all"]["primaries"]
    t["es_store_mb"] = stats["store"]["size_in_bytes"] / 2**20
    if lexical.count(TENANT) != n:
        raise RuntimeError("Elasticsearch lost passages during the load")
    if vector is not None:  # the server builds HNSW in the background: time queries once it is green
        began = time.perf_counter()
        if args.index_after_load:
            from qdrant_client import models

            vector._client.update_collection(
                vector.collection, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=threshold)
            )
            time.sleep(5)  # the optimizer starts on the next tick: not green-and-idle before it has
        deadline = time.monotonic() + 3600
        while time.monotonic() < deadline:
            info = vector._client.get_collection(vector.collection)
            if info.status == "green" and info.optimizer_status == "ok":
                break
            time.sleep(2)
        t["qdrant_optimize_s"] = time.perf_counter() - began
        info = vector._client.get_collection(vector.collection)
        t["qdrant_green"] = info.status == "green" and info.optimizer_status == "ok"
        t["qdrant_segments"] = int(info.segments_count or 0)
        t["qdrant_indexed_vectors"] = int(info.indexed_vectors_count or 0)
        if info.status != "green":
            print(
                f"  Qdrant not green after the wait ({info.status}): dense rows are not of a built index",
                file=sys.stderr,
            )
    return lexical, vector, t


def reopen_cluster(
    args: argparse.Namespace, n: int, q: Queries, rng: np.random.Generator, dense: bool, prefix: str
) -> tuple[Any, Any, dict[str, Any]]:
    """`--reuse` on the cluster: the Elasticsearch index and Qdrant collection an earlier `--keep` run
    loaded under `--cluster-name` (same size and seed), reopened. The batches are generated again only to
    draw the same queries; nothing is written. Refused unless both hold all n passages and Qdrant is
    green with every vector indexed (a half-built graph would time a full scan)."""
    from indexer.elastic import ElasticLexicalIndex
    from indexer.qdrant_server import QdrantVectorIndex, connect

    for start, passages, vectors in batches(n, rng):
        q.see(start, passages, vectors)
    lexical = ElasticLexicalIndex(args.es_url, prefix=f"{prefix}-{n}", refresh="false")
    t: dict[str, Any] = {"reused_cluster": f"{prefix}-{n}", "es_refresh": "false", "qdrant_url": args.qdrant_url}
    if (held := lexical.count(TENANT)) != n:
        raise RuntimeError(f"{prefix}-{n}: Elasticsearch holds {held} passages, not {n}")
    stats = lexical.client.indices.stats(index=lexical.alias(TENANT), metric="store,segments")["_all"]["primaries"]
    t["es_store_mb"] = stats["store"]["size_in_bytes"] / 2**20
    t["es_segments"] = int(stats["segments"]["count"])
    vector = None
    if dense:
        vector = QdrantVectorIndex(connect(args.qdrant_url), DIM, collection=f"{prefix}-{n}".replace("-", "_"))
        info = vector._client.get_collection(vector.collection)
        deadline = time.monotonic() + args.wait_green
        while not (info.status == "green" and info.optimizer_status == "ok") and time.monotonic() < deadline:
            time.sleep(5)  # `--wait-green`: a build still under way
            info = vector._client.get_collection(vector.collection)
        t["qdrant_green"] = info.status == "green" and info.optimizer_status == "ok"
        t["qdrant_segments"] = int(info.segments_count or 0)
        t["qdrant_indexed_vectors"] = int(info.indexed_vectors_count or 0)
        points = int(info.points_count or 0)
        if points != n or not (t["qdrant_green"] or args.allow_unbuilt):
            raise RuntimeError(
                f"{vector.collection}: {points} points, status {info.status}/{info.optimizer_status}:"
                f" not a built collection of {n}"
            )
        if t["qdrant_indexed_vectors"] < n:  # green and idle: segments under the indexing threshold
            print(
                f"  Qdrant indexed {t['qdrant_indexed_vectors']} of {n} vectors: the rest are scanned", file=sys.stderr
            )
    return lexical, vector, t


def dense_recall(
    profile: str, vector: Any, w: Workload, limit: int, ks: tuple[int, ...] = (1, 8, 50), queries: int = 0
) -> dict[str, Any]:
    """Recall of the dense ranker's HNSW search against exact search (a full scan, same filter, same
    queries): mean |approx top-k ∩ exact top-k| / |exact top-k| per filter, over the first `queries`
    queries (0: all). Not timed; outside the lock. An exact search scans every vector the filter admits:
    at 1M at nice 15 on a busy machine one took over a minute, so 200 per filter did not finish."""
    from indexer import qdrant_edge, qdrant_server

    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    out: dict[str, Any] = {}
    for label, group in FILTERS:
        access = AccessFilter.for_principal(Principal(tenant=TENANT, user="bench", groups=(group,)), as_of)
        sums = dict.fromkeys(ks, 0.0)
        count = min(queries, len(w.texts)) if queries else len(w.texts)
        for i in range(count):
            approx = [h.passage_id for h in vector.search(w.qvecs[i], access, limit, -1.0)]
            if profile == "embedded":
                import qdrant_edge as q

                request = q.QueryRequest(
                    limit=limit,
                    query=q.Query.Nearest(np.asarray(w.qvecs[i], dtype=np.float64).tolist()),
                    filter=qdrant_edge.access_filter(access),
                    with_payload=True,
                    with_vector=False,
                    params=q.SearchParams(exact=True),
                )
                exact = [str((p.payload or {})["passage_id"]) for p in vector._shard.query(request)]
            else:
                from qdrant_client import models

                res = vector._client.query_points(
                    vector.collection,
                    query=np.asarray(w.qvecs[i], dtype=np.float32).tolist(),
                    query_filter=qdrant_server.access_filter(access),
                    limit=limit,
                    with_payload=["passage_id"],
                    search_params=models.SearchParams(exact=True),
                )
                exact = [str((p.payload or {})["passage_id"]) for p in res.points]
            for k in ks:
                want = set(exact[:k])
                sums[k] += len(want & set(approx[:k])) / len(want) if want else 1.0
        out[label] = {f"recall@{k}": round(v / count, 4) for k, v in sums.items()} | {"queries": count}
        print(f"  dense recall vs exact, {label}: {out[label]}", file=sys.stderr)
    return out


def purge_cost(lexical: Any) -> float:
    """Seconds of a purge after one deletion: Tantivy's rebuild, from SQLite, of the shard that held it."""
    lexical.delete_doc(TENANT, "doc0.md")
    began = time.perf_counter()
    details = lexical.purge()
    spent = round(time.perf_counter() - began, 1)
    print(f"  tantivy purge after one deletion: {spent} s {details}", file=sys.stderr)
    return spent


BACKGROUND_THREADS = ("hnsw-build", "optimiz")
"""Qdrant's index-building threads: left at their niceness when a server is raised for a timed part."""


def _renice(pid: int, value: int) -> None:
    """Every thread of a process (on Linux a niceness is a thread's: `renice -p` moves the main one only)
    but its background builders (`BACKGROUND_THREADS`), which must not compete with the timed queries."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            if (task / "comm").read_text().startswith(BACKGROUND_THREADS):
                continue
            os.setpriority(os.PRIO_PROCESS, int(task.name), value)


@contextlib.contextmanager
def _servers_at(pids: list[int], nice: int) -> Iterator[None]:
    """Private servers (`--server-pid`, e.g. a niced Qdrant that built the collection) at niceness 0 for
    the timed part only, back to `nice` after."""
    for pid in pids:
        _renice(pid, 0)
    try:
        yield
    finally:
        for pid in pids:
            _renice(pid, nice)


@contextlib.contextmanager
def _locked(lock: Path | None, nice: int = 0) -> Iterator[dict[str, Any]]:
    """The bench lock around the timed queries only, with the load averages when it was taken and left.
    A load run at a lower priority (`--load-nice`) gets its usual priority back for the timed part
    (lowering niceness needs root: the niceness the queries ran at is recorded either way)."""
    import fcntl

    timed: dict[str, Any] = {}
    handle = lock.open("a") if lock else None
    try:
        if handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
        if nice:
            with contextlib.suppress(PermissionError):
                os.setpriority(os.PRIO_PROCESS, 0, 0)
        timed["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        timed["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
        timed["started"] = datetime.now(UTC).isoformat(timespec="seconds")
        yield timed
        timed["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        if handle:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        if nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)


def measure_cpu(fn: Callable[[int], Any], n: int, warmup: int) -> tuple[list[float], list[float], float]:
    """Wall and this thread's CPU milliseconds per query: on a shared machine wall time includes the
    time other processes held the cores, CPU time (embedded: the whole query runs in this thread) does not."""
    for i in range(warmup):
        fn(i % n)
    wall: list[float] = []
    cpu: list[float] = []
    hits = 0
    for i in range(n):
        w0, c0 = time.perf_counter(), time.thread_time()
        result = fn(i)
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - w0) * 1000)
        hits += len(result.passages) if hasattr(result, "passages") else len(result)
        if hasattr(result, "dense_ids"):  # a fused search: dense hits the BM25 half had returned too
            OVERLAP.append(len(set(result.dense_ids) & set(result.lexical_ids)))
    return wall, cpu, hits / n


OVERLAP: list[int] = []
"""Per fused search, how many of the dense list's passages the BM25 list held: those the dense half's
read-back may take from the BM25 half instead of asking Elasticsearch again (query.retrieval)."""


def measure_size(
    profile: str,
    n: int,
    lexical: Any,
    vector: Any,
    w: Workload,
    rankers: list[str],
    queries: int,
    extra: dict[str, Any],
) -> list[dict[str, Any]]:
    settings = RetrievalSettings(k=8, candidates=50, bm25_floor=0.0, dense_floor=-1.0)
    retriever = (
        Retriever(lexical, vector, StubEmbedder(dict(zip(w.texts, w.qvecs, strict=True))), None, settings)
        if vector is not None
        else None
    )
    engine = extra.get("engine", "")
    as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
    rows = []
    before_vector = before_retriever = None
    if any(r.endswith("-before") and r != "bm25-before" for r in rankers):
        from bench.cluster_before import BeforeRetriever
        from bench.cluster_before import before_vector as open_before

        before_vector = open_before(extra["qdrant_url"], DIM, vector.collection)
        embedder = StubEmbedder(dict(zip(w.texts, w.qvecs, strict=True)))
        before_retriever = BeforeRetriever(lexical, before_vector, embedder, None, settings)
    for label, group in FILTERS:
        if label not in extra.get("filters", (label,)):
            continue
        principal = Principal(tenant=TENANT, user="bench", groups=(group,))
        access = AccessFilter.for_principal(principal, as_of)
        cases = {
            "bm25": lambda i, a=access: lexical.search(w.texts[i], a, settings.candidates, settings.bm25_floor),
            "bm25-exists": lambda i, a=access: exists_search(
                lexical, w.texts[i], a, settings.candidates, settings.bm25_floor
            ),
            "bm25-termset": lambda i, a=access: termset_search(
                lexical, w.texts[i], a, settings.candidates, settings.bm25_floor
            ),
            "bm25-before": lambda i, a=access: elastic_before_search(
                lexical, w.texts[i], a, settings.candidates, settings.bm25_floor
            ),
            "dense": lambda i, a=access: vector.search(w.qvecs[i], a, settings.candidates, settings.dense_floor),
            "fused": lambda i, p=principal: retriever.search(p, w.texts[i], as_of),  # type: ignore[union-attr]
            "dense-before": lambda i, a=access: before_vector.search(  # type: ignore[union-attr]
                w.qvecs[i], a, settings.candidates, settings.dense_floor
            ),
            "fused-before": lambda i, p=principal: before_retriever.search(p, w.texts[i], as_of),  # type: ignore[union-attr]
        }
        passes: dict[str, int] = {}
        for ranker in rankers:
            passes[ranker] = passes.get(ranker, 0) + 1
            OVERLAP.clear()
            latencies, cpu, returned = measure_cpu(cases[ranker], queries, 20)
            row = {
                "profile": profile,
                "passages": n,
                "filter": label,
                "ranker": ranker,
                **({"pass": passes[ranker]} if rankers.count(ranker) > 1 else {}),
                **({"engine": engine} if engine else {}),
                "queries": queries,
                "p50_ms": round(float(np.percentile(latencies, 50)), 2),
                "p95_ms": round(float(np.percentile(latencies, 95)), 2),
                "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 2),
                "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 2),
                "mean_returned": round(returned, 1),
                **({"mean_dense_in_bm25": round(float(np.mean(OVERLAP)), 2)} if OVERLAP else {}),
                **{k: round(v, 1) if isinstance(v, float) else v for k, v in extra.items()},
            }
            rows.append(row)
            print(
                f"  {profile} {engine} {n} {label:>4} {ranker:6s} p50 {row['p50_ms']:8.2f} p95 {row['p95_ms']:8.2f} ms"
                f" (cpu p50 {row['cpu_p50_ms']:.2f} p95 {row['cpu_p95_ms']:.2f})",
                file=sys.stderr,
            )
    return rows


def markdown(report: dict[str, Any]) -> str:
    """The table bench/README.md shows, from the results file (`--table`)."""
    lines = [
        "| profile | engine | passages | filter | ranker | wall p50 ms | wall p95 ms | CPU p50 ms | CPU p95 ms"
        " | returned |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['profile']} | {r.get('engine', '')} | {r['passages']:,} | {r['filter']} | {r['ranker']} |"
            f" {r['p50_ms']:.2f} |"
            f" {r['p95_ms']:.2f} | {r.get('cpu_p50_ms', '')} | {r.get('cpu_p95_ms', '')} | {r['mean_returned']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:] == ["--table"]:
        print(markdown(json.loads(OUT.read_text())))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=("embedded", "cluster"), default="embedded")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--rankers", nargs="+", choices=RANKERS, default=list(RANKERS))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--engines", nargs="+", choices=("fts5", "tantivy"), default=["fts5"], help="embedded lexical engines"
    )
    parser.add_argument("--lock", type=Path, help="hold this file's flock for the timed queries only (not the load)")
    parser.add_argument("--load-nice", type=int, default=0, help="niceness of the load (the timed part runs at 0)")
    parser.add_argument("--label", default="", help="a name for this build's rows (e.g. 'before'), kept in each row")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--home", type=Path, help="embedded: load into this directory and keep it (default: a temp dir)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="embedded: reopen the stores an earlier run loaded into --home, build HNSW"
    )
    parser.add_argument(
        "--hnsw", type=int, nargs=2, default=(0, 0), metavar=("M", "EF"), help="with --reuse: HNSW m, ef_construct"
    )
    parser.add_argument(
        "--index-during-load",
        dest="index_after_load",
        action="store_false",
        help="cluster: let Qdrant index segments while points arrive (default: indexing off until loaded)",
    )
    parser.add_argument(
        "--cluster-name",
        help="cluster: index prefix and collection name (`<name>-<size>`); default a fresh one per run",
    )
    parser.add_argument(
        "--keep", action="store_true", help="cluster: leave the loaded index and collection (for a later --reuse)"
    )
    parser.add_argument(
        "--load-only", action="store_true", help="cluster, with --keep: load and stop (no timed part, no lock)"
    )
    parser.add_argument(
        "--paired-queries",
        action="store_true",
        help="each query's vector from the passage its text came from (BM25 and dense lists overlap)",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        nargs="*",
        default=[],
        help="private servers' pids: every thread reniced to 0 for the timed part, to --server-nice after",
    )
    parser.add_argument("--server-nice", type=int, default=15)
    parser.add_argument("--wait-green", type=float, default=0.0, help="cluster --reuse: seconds to wait for green")
    parser.add_argument("--filters", nargs="+", choices=[f for f, _ in FILTERS], default=[f for f, _ in FILTERS])
    parser.add_argument(
        "--allow-unbuilt",
        action="store_true",
        help="cluster --reuse: time a collection whose HNSW build is still running (rows record"
        " qdrant_green and qdrant_indexed_vectors; segments not indexed yet are scanned)",
    )
    parser.add_argument("--no-recall", action="store_true", help="skip the dense recall check against exact search")
    parser.add_argument(
        "--recall-queries", type=int, default=50, help="exact searches per filter for the recall check (0: all)"
    )
    parser.add_argument("--es-url", default=os.environ.get("RAGSYNC_ES_URL", "http://127.0.0.1:9200"))
    parser.add_argument("--qdrant-url", default=os.environ.get("RAGSYNC_QDRANT_URL", "http://127.0.0.1:6333"))
    args = parser.parse_args()
    args.started = datetime.now(UTC).isoformat(timespec="seconds")
    if args.reuse and args.profile == "embedded" and (args.home is None or len(args.sizes) != 1):
        parser.error("--reuse needs --home and one size, embedded")
    if args.profile == "cluster" and (args.reuse or args.keep) and not args.cluster_name:
        parser.error("--reuse and --keep need --cluster-name on the cluster profile")
    if args.load_only and not (args.keep and args.profile == "cluster"):
        parser.error("--load-only needs --keep on the cluster profile")
    dense = any(r in ("dense", "fused", "dense-before", "fused-before") for r in args.rankers)
    if args.profile == "embedded" and {"dense-before", "fused-before"} & set(args.rankers):
        parser.error("dense-before and fused-before are the cluster's former dense half")
    if args.profile == "cluster" and "bm25-exists" in args.rankers:
        parser.error("bm25-exists is the embedded store's former query")
    if args.profile == "embedded" and "bm25-before" in args.rankers:
        parser.error("bm25-before is Elasticsearch's former query (cluster)")
    if args.load_nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.load_nice)
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    timed_loads: list[dict[str, Any]] = []
    for n in args.sizes:
        rng = np.random.default_rng(args.seed)
        q = Queries(n, args.queries, rng, args.paired_queries)
        prefix = args.cluster_name or f"bench-scale-{os.getpid()}-{int(time.time())}"
        kept = contextlib.nullcontext(str(args.home)) if args.home else None
        with kept or tempfile.TemporaryDirectory(
            prefix=f"ragsync-scale-{n}-", dir=os.environ.get("RAGSYNC_BENCH_TMP")
        ) as tmp:
            if args.profile == "embedded" and args.reuse:
                stores, vector, t = reopen_embedded(Path(tmp), n, q, rng, dense, args.engines, tuple(args.hnsw))
            elif args.profile == "embedded":
                Path(tmp).mkdir(parents=True, exist_ok=True)
                stores, vector, t = load_embedded(Path(tmp), n, q, rng, dense, args.engines)
            else:
                opened = reopen_cluster if args.reuse else load_cluster
                lexical, vector, t = opened(args, n, q, rng, dense, prefix)
                stores = {"": lexical}
            t["peak_rss_mb"] = _rss_mb()
            if args.paired_queries:
                t["paired_queries"] = True
            if args.filters != [f for f, _ in FILTERS]:
                t["filters"] = args.filters
            shown = {k: round(v, 1) if isinstance(v, float) else v for k, v in t.items()}
            print(f"{args.profile} {n}: {json.dumps(shown)}", file=sys.stderr)
            if args.load_only:
                for store in (*stores.values(), *([vector] if vector is not None else [])):
                    store.close()
                continue
            try:
                with _locked(args.lock, args.load_nice) as timed, _servers_at(args.server_pid, args.server_nice):
                    for i, (engine, lexical) in enumerate(stores.items()):
                        extra = (
                            t | ({"build": args.label} if args.label else {}) | ({"engine": engine} if engine else {})
                        )
                        # dense does not depend on the lexical engine (measured once); bm25-exists is FTS5's query
                        rankers = [
                            r
                            for r in args.rankers
                            if not (r == "dense" and i > 0)
                            and not (r == "bm25-exists" and engine == "tantivy")
                            and not (r == "bm25-termset" and engine != "tantivy")
                        ]
                        rows += measure_size(
                            args.profile, n, lexical, vector, q.workload(n), rankers, args.queries, extra
                        )
                    timed_loads.append(timed)
                write_report(args, rows, timed_loads, load_start)  # the timed rows are kept whatever follows
                if vector is not None and not args.no_recall:  # after the timed part, not timed
                    recall = dense_recall(args.profile, vector, q.workload(n), 50, queries=args.recall_queries)
                    for row in rows:
                        if row["passages"] == n and row["ranker"] in ("dense", "fused", "dense-before", "fused-before"):
                            row["dense_recall_vs_exact"] = recall[row["filter"]]
                if "tantivy" in stores:  # after the timed part: what a deletion's purge costs at this size
                    purge_s = purge_cost(stores["tantivy"])
                    for row in rows:
                        if row["passages"] == n and row.get("engine") == "tantivy":
                            row["tantivy_purge_rebuild_s"] = purge_s
            finally:
                drop = args.profile == "cluster" and not (args.keep or args.reuse)
                for lexical in stores.values():
                    if drop:
                        with contextlib.suppress(Exception):
                            lexical.drop_all()
                    lexical.close()
                if vector is not None:
                    if drop:
                        with contextlib.suppress(Exception):
                            vector.drop_all()
                    vector.close()
    if not args.load_only:
        write_report(args, rows, timed_loads, load_start, final=True)


def write_report(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    timed_loads: list[dict[str, Any]],
    load_start: tuple[float, float, float],
    final: bool = False,
) -> None:
    """Merge this run's rows into the results file: once right after the timed part (so rows survive an
    untimed check that is stopped) and again at the end with the recall and purge figures. The run's
    entry in `runs` is replaced, not repeated (same `at_start`)."""
    load_end = os.getloadavg()
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {"rows": [], "runs": []}
    key = ("profile", "passages", "filter", "ranker", "build", "engine", "pass")
    fresh = {tuple(r.get(k, "") for k in key) for r in rows}
    report["rows"] = [r for r in report["rows"] if tuple(r.get(k, "") for k in key) not in fresh] + rows
    report["runs"] = [r for r in report.get("runs", []) if r.get("at_start") != args.started]
    report["runs"].append(
        {
            "at_start": args.started,
            "complete": final,
            "profile": args.profile,
            "sizes": args.sizes,
            "rankers": args.rankers,
            "build": args.label,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in load_end],
            "timed": timed_loads,
            "engines": args.engines if args.profile == "embedded" else [],
            "cpus": os.cpu_count(),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
