#!/usr/bin/env python3
"""What a sync of small files costs beside the model: every vector already in the embedding cache.

One sync of bench/ingest.py's small-files corpus into a fresh home whose embedding cache was filled
beforehand (`prepare`), so no model run happens and the wall and CPU time are the pipeline's own:
the scan and its event log, opening the stores, chunking, FTS5, qdrant-edge, doc states, flush and
commit. Run it from two trees alternately (PYTHONPATH=TREE) to compare a lever side by side.

    python3 bench/ingest_cached.py prepare --dir /tmp/cached      # corpus + filled cache (runs the model once)
    flock /work/wt/bench.lock python3 bench/ingest_cached.py run --dir /tmp/cached --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ingest_corpus import small_files
from indexer.embedder import CachedEmbedder, FastEmbedder
from ragsync.pipeline import sync_folder
from ragsync.settings import Settings
from ragsync.wiring import build_embedded

MODEL = Path(os.path.expanduser("~/.cache/ragsync/models/all-minilm-l6-v2-q"))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_sync(home: Path, corpus: Path, model: FastEmbedder, cache: Path | None) -> dict[str, Any]:
    home.mkdir(parents=True)
    if cache is not None:
        shutil.copy2(cache, home / "embeddings-shared.db")
    settings = Settings(home=home, embed_model_path=MODEL, profile="embedded", session_secret="bench")
    components = build_embedded(settings)
    components.embedder = CachedEmbedder(model, home / "embeddings-shared.db")
    components.closers.append(components.embedder)
    started, cpu = time.perf_counter(), cpu_s()
    try:
        report = sync_folder(components, corpus, tenants=["acme"])
    finally:
        components.close()
    assert report.stats is not None and not report.scan.errors
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(cpu_s() - cpu, 3),
        "passages": report.stats.passages_written,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["prepare", "run"])
    parser.add_argument("--dir", type=Path, required=True, help="Holds the corpus and the filled cache.")
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    corpus, cache = args.dir / "corpus", args.dir / "embeddings.db"
    model = FastEmbedder(MODEL)
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-cached-") as tmp:
        if args.action == "prepare":
            shutil.rmtree(corpus, ignore_errors=True)
            small_files(corpus, args.files)
            one_sync(Path(tmp) / "fill", corpus, model, None)
            shutil.copy2(Path(tmp) / "fill" / "embeddings-shared.db", cache)
            return
        load_start = [round(x, 2) for x in os.getloadavg()]
        runs = [one_sync(Path(tmp) / f"home-{i}", corpus, model, cache) for i in range(args.rounds)]
    load_end = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({"runs": runs, "load_avg_start": load_start, "load_avg_end": load_end}))


if __name__ == "__main__":
    main()
