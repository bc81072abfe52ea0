#!/usr/bin/env python3
"""Ingest throughput: passages/s through connector -> chunker -> embedder -> stores, against the model alone.

Embedding dominates ingest (MiniLM manages tens of passages/s on 2 cores), so the figure that says
whether the pipeline around the model is efficient is the ratio of end-to-end throughput to the raw
embedding throughput of the same model on the same passage texts, in the same run (target >= 0.8).

Phases, each in a fresh RAGSYNC_HOME on the embedded profile:
  1. raw: FastEmbedder.embed on the exact texts the pipeline embeds (recorded by a dry run), timed
     before and after phase 2 and averaged, so a machine that slows down mid-run skews both sides alike;
     the pipeline embeds through the same ONNX session, warmed on all the texts beforehand
  2. pipeline: sync_folder (scan -> event log -> chunk -> embed -> FTS5 + qdrant-edge + doc state)
  3. pipeline without embedding cost: the same sync into another fresh home whose embedding cache
     was copied from phase 2 (every vector is a cache hit), under tracemalloc: what the pipeline
     itself costs in time and Python memory
Peak RSS (getrusage) covers the whole process, model included.

    python3 bench/ingest.py                    # the Python-manual CI subset (~400 passages, ~2-5 min)
    python3 bench/ingest.py --corpus DIR       # any drive folder with .ragsync-acl.toml manifests
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.embedder import CachedEmbedder, FastEmbedder  # noqa: E402
from ragsync.pipeline import sync_folder  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import build_embedded  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx"


class RecordingEmbedder:
    """Passes through to the pipeline's embedder and keeps the texts, for the raw phase."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.texts: list[str] = []
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)  # type: ignore[no-any-return]
        finally:
            self.seconds += time.perf_counter() - started

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def default_corpus() -> Path:
    """The CI subset of the Python manual, built with the evaluation's own script."""
    here = ROOT / "eval" / "python-manual"
    spec = importlib.util.spec_from_file_location("build_corpus", here / "build_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ensure_manual(module.MANUAL)
    out = here / "build" / "ci"
    module.build("ci", out)
    return Path(out / "corpus")


def pipeline(
    corpus: Path, home: Path, model: Path, record: bool, shared: FastEmbedder | None = None
) -> tuple[dict[str, Any], RecordingEmbedder | None]:
    """One sync into `home`; with `shared`, the pipeline embeds through that (already warm) model session."""
    settings = Settings(home=home, embed_model_path=model, profile="embedded", session_secret="bench")
    components = build_embedded(settings)
    if shared is not None:
        components.embedder = CachedEmbedder(shared, home / "embeddings-shared.db")
        components.closers.append(components.embedder)
    recorder = None
    if record:
        recorder = RecordingEmbedder(components.embedder)
        components.embedder = recorder  # type: ignore[assignment]
    started = time.perf_counter()
    try:
        report = sync_folder(components, corpus)
    finally:
        components.close()
    elapsed = time.perf_counter() - started
    stats = report.stats
    assert stats is not None and not report.scan.errors, report.scan.errors
    return {
        "documents": report.scan.upserts,
        "passages": stats.passages_written,
        "seconds": elapsed,
        "passages_per_s": stats.passages_written / elapsed,
    }, recorder


def raw(embedder: FastEmbedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed(texts)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest.json")
    args = parser.parse_args()
    corpus = args.corpus or default_corpus()
    rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    with tempfile.TemporaryDirectory(prefix="ragsync-bench-ingest-") as tmp:
        tmp_path = Path(tmp)
        model = FastEmbedder(args.model)  # the raw side: same model files, same batch size as the pipeline's
        model.embed(["warm up the session"] * 8)

        # A dry pipeline run only to learn the texts; its timing is discarded (cold caches, first imports).
        _, recorder = pipeline(corpus, tmp_path / "dry", args.model, record=True)
        assert recorder is not None
        texts = list(recorder.texts)
        shutil.rmtree(tmp_path / "dry")

        # Both sides use one ONNX session, warmed on every batch shape first: a cold session spends its
        # first pass growing its memory arena, which would be charged to whichever side ran first.
        model.embed(texts)
        raw_before = raw(model, texts)
        measured, timed = pipeline(corpus, tmp_path / "pipeline", args.model, record=True, shared=model)
        raw_after = raw(model, texts)
        assert timed is not None
        raw_s = (raw_before + raw_after) / 2

        warm = tmp_path / "warm"
        warm.mkdir()
        shutil.copy2(tmp_path / "pipeline" / "embeddings-shared.db", warm / "embeddings.db")
        tracemalloc.start()
        overhead, _ = pipeline(corpus, warm, args.model, record=False)
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

    rss_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = len(texts)
    raw_rate = n / raw_s
    ratio = measured["passages_per_s"] / raw_rate
    report = {
        "benchmark": "ingest throughput, embedded profile",
        "corpus": str(corpus),
        "documents": measured["documents"],
        "passages": measured["passages"],
        "embedded_texts": n,
        "mean_text_chars": round(sum(map(len, texts)) / max(n, 1)),
        "raw_embedding": {
            "seconds_before": round(raw_before, 2),
            "seconds_after": round(raw_after, 2),
            "passages_per_s": round(raw_rate, 2),
        },
        "pipeline": {
            "seconds": round(measured["seconds"], 2),
            "passages_per_s": round(measured["passages_per_s"], 2),
            "seconds_in_embedder": round(timed.seconds, 2),
        },
        "pipeline_without_embedding": {
            "seconds": round(overhead["seconds"], 2),
            "passages_per_s": round(overhead["passages_per_s"], 1),
            "python_peak_mb_tracemalloc": round(traced_peak / 1e6, 1),
        },
        "ratio_pipeline_to_raw": round(ratio, 3),
        "target_ratio": 0.8,
        "meets_target": ratio >= 0.8,
        "peak_rss_mb": round(rss_peak_kb / 1024, 1),
        "rss_at_start_mb": round(rss_start / 1024, 1),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "notes": [
            "raw = the same model on the exact texts the pipeline embedded, mean of a run before and after",
            "pipeline_without_embedding = same sync with every vector an embedding-cache hit, under tracemalloc",
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Ingest: {report['documents']} documents, {report['passages']} passages")
    for col in ("phase", "seconds", "passages/s", "note"):
        table.add_column(col, justify="left" if col in ("phase", "note") else "right")
    table.add_row(
        "raw embedding", f"{raw_s:.1f}", f"{raw_rate:.1f}", f"before {raw_before:.1f}s, after {raw_after:.1f}s"
    )
    table.add_row(
        "pipeline",
        f"{measured['seconds']:.1f}",
        f"{measured['passages_per_s']:.1f}",
        f"{timed.seconds:.1f}s inside the embedder",
    )
    table.add_row(
        "pipeline, vectors cached",
        f"{overhead['seconds']:.1f}",
        f"{overhead['passages_per_s']:.0f}",
        f"python peak {traced_peak / 1e6:.0f} MB (tracemalloc)",
    )
    Console(width=120).print(table)
    verdict = "meets" if ratio >= 0.8 else "MISSES"
    print(f"ratio pipeline/raw = {ratio:.2f} ({verdict} the 0.8 target); peak RSS {rss_peak_kb / 1024:.0f} MB")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
