#!/usr/bin/env python3
"""Retrieval latency of the embedded profile: BM25 (SQLite FTS5), dense (qdrant-edge) and both fused by RRF.

Measured at 10k and 100k passages, with a permission filter that admits 10% and 100% of them, because
the filter runs inside each store's query and its selectivity changes the work each store does (FTS5
joins the ACL table per match; Qdrant switches between filtered HNSW and a payload-index scan).

No model is involved: embedding 100k texts would take about an hour on 2 cores, and model latency is a
separate figure (bench/ingest.py). Passages are synthetic: text drawn from a Zipf-distributed
vocabulary (so BM25 posting lists have realistic skew) and random unit vectors (dim 384, MiniLM's);
each query vector is a noisy copy of a stored passage's vector, so nearest neighbours exist. The dense
floor is disabled (-1) so every query returns a full candidate list: the worst case for the store.
`fused` is Retriever.search (both rankers + RRF, result cache off) with a stub embedder that returns
the precomputed query vector. HNSW is built with EdgeVectorIndex.optimize() after the bulk load.

    python3 bench/retrieval.py                    # 10k and 100k (~5-10 min on 2 cores)
    python3 bench/retrieval.py --sizes 10000 --queries 100
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sqlite_fts import SqliteLexicalIndex
from query.retrieval import RetrievalSettings, Retriever
from schemas.passages import Passage, make_passage_id
from schemas.principal import AccessFilter, Principal

DIM = 384
TENANT = "bench"
VOCAB = 20_000
WORDS_PER_PASSAGE = (40, 120)
STOPWORD_LIKE = 150
RESULTS = Path(__file__).resolve().parent / "results"


def _pct(values: Sequence[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


class StubEmbedder:
    """Returns the query's precomputed vector: the Retriever's dense path without a model."""

    model_name = "stub"
    dim = DIM

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self._vectors = vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vectors[text]


def synthetic(n: int, rng: np.random.Generator) -> tuple[list[Passage], np.ndarray]:
    """n passages; every 10th one is also readable by group:tenth, so that filter admits exactly 10%."""
    words = np.array([f"w{i}" for i in range(VOCAB)])
    ranks = np.arange(1, VOCAB + 1)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    effective = datetime(2026, 1, 1, tzinfo=UTC)
    passages: list[Passage] = []
    for i in range(n):
        length = int(rng.integers(*WORDS_PER_PASSAGE))
        text = " ".join(words[rng.choice(VOCAB, size=length, p=probs)])
        acl = ("group:all", "group:tenth") if i % 10 == 0 else ("group:all",)
        doc_id = f"doc{i // 20}.md"
        anchor = f"s-{i % 20}"
        passages.append(
            Passage(
                passage_id=make_passage_id(doc_id, 1, anchor),
                doc_id=doc_id,
                version=1,
                anchor=anchor,
                tenant=TENANT,
                acl=acl,
                effective_from=effective,
                heading_path=(f"Section {i % 20}",),
                title=doc_id,
                text=text,
                source_url=f"file:///{doc_id}",
                chunker_version="bench",
            )
        )
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return passages, vectors


def load(home: Path, passages: list[Passage], vectors: np.ndarray) -> tuple[Any, Any, dict[str, float]]:
    lexical = SqliteLexicalIndex(home / "lexical.db")
    vector = EdgeVectorIndex(home / "vectors", DIM)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    for start in range(0, len(passages), 2000):
        lexical.upsert(passages[start : start + 2000])
    timings["load_lexical_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for start in range(0, len(passages), 2000):
        vector.upsert(passages[start : start + 2000], vectors[start : start + 2000])
    timings["load_vector_s"] = time.perf_counter() - started
    started = time.perf_counter()
    vector.optimize()
    timings["optimize_s"] = time.perf_counter() - started
    return lexical, vector, timings


def measure(fn: Callable[[int], Any], n: int, warmup: int = 5) -> tuple[list[float], float]:
    for i in range(warmup):
        fn(i)
    latencies = []
    hits = 0
    for i in range(n):
        started = time.perf_counter()
        result = fn(i)
        latencies.append((time.perf_counter() - started) * 1000)
        hits += len(result.passages) if hasattr(result, "passages") else len(result)
    return latencies, hits / n


def run_size(n: int, queries: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    passages, vectors = synthetic(n, rng)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=f"ragsync-bench-{n}-") as tmp:
        lexical, vector, timings = load(Path(tmp), passages, vectors)
        print(
            f"{n} passages loaded: lexical {timings['load_lexical_s']:.1f}s, vectors {timings['load_vector_s']:.1f}s,"
            f" optimize {timings['optimize_s']:.1f}s",
            file=sys.stderr,
        )
        # Query words skip the Zipf head: real queries lose their stopwords in query_terms().
        head = {f"w{i}" for i in range(STOPWORD_LIKE)}
        words = [
            [w for w in p.text.split() if w not in head] or p.text.split()
            for p in rng.choice(np.array(passages, dtype=object), size=queries)
        ]
        texts = [" ".join(rng.choice(w, size=min(4, len(w)), replace=False)) + f" q{i}" for i, w in enumerate(words)]
        targets = rng.integers(0, n, size=queries)
        noise = rng.standard_normal((queries, DIM)).astype(np.float32) * 0.03
        qvecs = vectors[targets] + noise
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
        query_vectors = dict(zip(texts, qvecs, strict=True))
        settings = RetrievalSettings(k=8, candidates=50, bm25_floor=0.0, dense_floor=-1.0)
        retriever = Retriever(lexical, vector, StubEmbedder(query_vectors), None, settings)
        as_of = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=1)
        for label, group in (("10%", "tenth"), ("100%", "all")):
            principal = Principal(tenant=TENANT, user="bench", groups=(group,))
            access = AccessFilter.for_principal(principal, as_of)
            cases: dict[str, Callable[[int], Any]] = {
                "bm25": lambda i, a=access: lexical.search(texts[i], a, settings.candidates, settings.bm25_floor),
                "dense": lambda i, a=access: vector.search(qvecs[i], a, settings.candidates, settings.dense_floor),
                "fused (rrf)": lambda i, p=principal: retriever.search(p, texts[i], as_of),
            }
            for ranker, fn in cases.items():
                latencies, returned = measure(lambda i, f=fn: f(i % queries), queries)
                rows.append(
                    {
                        "passages": n,
                        "filter_admits": label,
                        "ranker": ranker,
                        "queries": queries,
                        "p50_ms": round(_pct(latencies, 50), 2),
                        "p95_ms": round(_pct(latencies, 95), 2),
                        "mean_returned": round(returned, 1),
                        **{k: round(v, 1) for k, v in timings.items()},
                    }
                )
                print(f"  {n} {label:>4} {ranker:12s} p50 {rows[-1]['p50_ms']:8.2f} ms", file=sys.stderr)
        lexical.close()
        vector.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS / "retrieval.json")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    rows = [row for n in args.sizes for row in run_size(n, args.queries, rng)]
    report = {
        "benchmark": "retrieval latency, embedded profile (sqlite-fts5 + qdrant-edge)",
        "notes": [
            "synthetic passages: Zipf-vocabulary text and random unit vectors (dim 384); no model is run",
            f"queries: 4 words of a stored passage, skipping the {STOPWORD_LIKE} most frequent words (stopword-like)",
            "query vectors are noisy copies of stored vectors; dense floor -1 (full candidate lists)",
            "fused = Retriever.search: both rankers (50 candidates each) + RRF, result cache off",
            "filter_admits = share of passages the principal's ACL filter admits",
        ],
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "seed": args.seed,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    table = Table(title="Retrieval latency (ms), embedded profile, synthetic passages")
    for col in ("passages", "filter admits", "ranker", "p50", "p95", "returned"):
        table.add_column(col, justify="right" if col not in ("ranker", "filter admits") else "left")
    for row in rows:
        table.add_row(
            f"{row['passages']:,}",
            row["filter_admits"],
            row["ranker"],
            f"{row['p50_ms']:.2f}",
            f"{row['p95_ms']:.2f}",
            f"{row['mean_returned']:.0f}",
        )
    Console(width=120).print(table)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
