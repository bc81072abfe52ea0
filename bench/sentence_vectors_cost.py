#!/usr/bin/env python3
"""What storing sentence vectors costs (setting `sentence_vectors`): one evaluation set's corpus synced
into fresh homes without and with them, side by side in one run (alternating when --rounds > 1), each
a `ragsync sync` subprocess with its own empty embedding cache. Per side: wall time, the child's CPU
seconds, the vector shard's size on disk; for the home with them, vectors per passage (the texts the
sink embeds, at most indexer.ports.MAX_SENTENCE_VECTORS) and passages at the cap.

    python3 bench/sentence_vectors_cost.py --set python-manual     # needs eval/run_set.sh <set> --ci first
    -> bench/results/sentence-vectors-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SYNC_ARGS = {
    "python-manual": ["--tenant", "pydocs", "--tenant", "pyschool", "--source", "corpus"],
    "git-doc": ["--tenant", "gitdocs", "--tenant", "gitschool", "--source", "corpus"],
    "flex-doc": ["--tenant", "lexdocs", "--tenant", "lexfaq"],
    "sqlite-doc": ["--tenant", "sqlapp", "--tenant", "sqlcli"],
    "debian-handbook": ["--tenant", "hbadmin", "--tenant", "hbdesk"],
}


def _size(path: Path) -> int:
    """Bytes allocated on disk (qdrant-edge preallocates sparse files: their apparent size says little)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def sync(corpus: Path, home: Path, sentences: bool, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, RAGSYNC_HOME=str(home), RAGSYNC_PROFILE="embedded")
    env["RAGSYNC_SENTENCE_VECTORS"] = "true" if sentences else "false"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", "sync", str(corpus), *args, "--json"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "sentence_vectors": sentences,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "vector_shard_bytes": _size(home / "vectors"),
        "embedding_cache_bytes": sum(f.stat().st_blocks * 512 for f in home.glob("embeddings.db*")),
        "sync": json.loads(done.stdout) if done.stdout.strip().startswith("{") else done.stdout[-500:],
    }


def counts(home: Path) -> dict[str, Any]:
    from indexer.ports import MAX_SENTENCE_VECTORS
    from query.retrieval import passage_sentence_texts
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    settings = Settings(home=home, session_secret="sentence-cost-" + "x" * 20, sentence_vectors=True)
    components = build_embedded(settings)
    try:
        per: list[int] = []
        cursor = 0
        while True:
            rows = components.lexical.passages_after(cursor, 1000)
            if not rows:
                break
            per.extend(len(passage_sentence_texts(p)) for _, p in rows)
            cursor = rows[-1][0]
    finally:
        components.close()
    kept = [min(n, MAX_SENTENCE_VECTORS) for n in per]
    return {
        "passages": len(per),
        "sentence_vectors": sum(kept),
        "vectors_per_passage_mean": round(sum(kept) / max(1, len(kept)), 2),
        "sentences_per_passage_max": max(per, default=0),
        "passages_at_cap": sum(1 for n in per if n > MAX_SENTENCE_VECTORS),
        "cap": MAX_SENTENCE_VECTORS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SYNC_ARGS), default="python-manual")
    parser.add_argument("--variant", choices=("ci", "full"), default="ci")
    parser.add_argument("--rounds", type=int, default=1, help="off/on pairs, the order alternating")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sentence-vectors-cost.json")
    args = parser.parse_args()
    corpus = ROOT / "eval" / args.set / "build" / args.variant / "corpus"
    if not corpus.is_dir():
        sys.exit(f"no corpus at {corpus}: run eval/run_set.sh {args.set}{' --ci' if args.variant == 'ci' else ''}")
    load_start = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sentence-cost-") as tmp:
        on_home = None
        for r in range(args.rounds):
            for sentences in (False, True) if r % 2 == 0 else (True, False):
                home = Path(tmp) / f"home-{r}-{'on' if sentences else 'off'}"
                runs.append(sync(corpus, home, sentences, SYNC_ARGS[args.set]) | {"round": r})
                if sentences:
                    on_home = home
                print(json.dumps({k: v for k, v in runs[-1].items() if k != "sync"}), file=sys.stderr)
        assert on_home is not None
        stored = counts(on_home)
        for path in Path(tmp).iterdir():
            shutil.rmtree(path, ignore_errors=True)

    def mean(key: str, on: bool) -> float:
        vals = [float(r[key]) for r in runs if r["sentence_vectors"] == on]
        return sum(vals) / len(vals)

    report = {
        "benchmark": "sentence vectors: sync without and with them, side by side (fresh homes, empty caches)",
        "set": args.set,
        "variant": args.variant,
        "runs": runs,
        "stored": stored,
        "ratio_wall": round(mean("wall_s", True) / mean("wall_s", False), 3),
        "ratio_cpu": round(mean("cpu_s", True) / mean("cpu_s", False), 3),
        "ratio_vector_shard_bytes": round(mean("vector_shard_bytes", True) / mean("vector_shard_bytes", False), 3),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
