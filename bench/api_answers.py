#!/usr/bin/env python3
"""Same answers, two builds: every question of an evaluation set asked through two source trees' query
workers (this one and a reference, e.g. main), compared field by field.

A speed change to the answer path must not change one answer: for each ask the answer, every claim
(statement, quote, passage ID, source URL), the abstention reason, and each search (its query, the
lexical, dense and selected passage IDs) must be equal. The asks are the set's questions as written
and each again with two reference-number qualifiers, as bench/api_load.py sends them, all at one
fixed instant (the start of the run), each tree on its own copy of the set's home.

    git archive main | tar -x -C /tmp/main-tree
    python3 bench/api_answers.py --reference /tmp/main-tree          # prints and records the comparison

The comparison goes into bench/results/api_load.json under "same_answers".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "api_load.json"


def asks(base: Path) -> list[tuple[dict[str, Any], str]]:
    """Every question of the set, then each with two qualifiers (answerable or not: abstentions count)."""
    from api_load import unique_question

    out: list[tuple[dict[str, Any], str]] = []
    lines = (base / "questions.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip() and not line.startswith("#")]
    for variant in range(3):
        for n, q in enumerate(rows):
            text = q["question"] if variant == 0 else unique_question(q["question"], variant * 1000 + n)
            out.append((q["principal"], text))
    return out


def dump(tree: Path, asked: Path, home: Path, out: Path, as_of: str, threads: int = 1) -> None:
    """In a process whose imports come from `tree` (and nothing of this tree's): every ask's outcome, asked
    from `threads` threads at once (so that concurrent requests' questions share model runs)."""
    sys.path.insert(0, str(tree))
    os.environ.update(RAGSYNC_HOME=str(home), RAGSYNC_PROFILE="embedded", RAGSYNC_CONFIG=os.devnull)
    from ragsync.settings import load_settings
    from ragsync.wiring import build
    from schemas.principal import Principal

    components = build(load_settings())
    worker = components.query_worker()
    instant = datetime.fromisoformat(as_of)
    from concurrent.futures import ThreadPoolExecutor

    def ask(item: tuple[dict[str, Any], str]) -> dict[str, Any]:
        p, question = item
        principal = Principal(tenant=p["tenant"], user=p["user"], groups=tuple(p["groups"]))
        r = worker.ask(principal, question, instant)
        return {
            "question": question,
            "answered": r.answered,
            "answer": r.answer,
            "claims": [[c.statement, c.quote, c.passage_id, c.source_url] for c in r.claims],
            "reason": r.trace.reason.value if r.trace.reason is not None else None,
            "searches": [[s.query, s.lexical_ids, s.dense_ids, s.selected_ids] for s in r.trace.searches],
            "evidence_ids": r.evidence_ids,
        }

    started = time.process_time()
    try:
        with ThreadPoolExecutor(threads) as pool:
            rows = list(pool.map(ask, json.loads(asked.read_text())))
    finally:
        components.close()
    cpu_ms = (time.process_time() - started) * 1000 / max(len(rows), 1)
    batcher = getattr(getattr(components.embedder, "_inner", None), "_questions", None)  # indexer.query_batch
    batches = {"runs": batcher.runs, "largest": batcher.largest} if batcher is not None else None
    dumped = {"tree": str(tree), "cpu_ms_per_ask": round(cpu_ms, 1), "question_batches": batches, "asks": rows}
    out.write_text(json.dumps(dumped))


def run_tree(tree: Path, args: argparse.Namespace, tmp: Path, name: str, as_of: str) -> dict[str, Any]:
    from eval_homes import set_paths

    base, eval_home = set_paths(args.set, args.variant, None)
    home = tmp / f"home-{name}"
    shutil.copytree(eval_home, home, ignore=shutil.ignore_patterns("owner.lock", "*.sock"))
    out = tmp / f"{name}.json"
    asked = tmp / "asks.json"
    asked.write_text(json.dumps(asks(base)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_") and k != "PYTHONPATH"}
    env["RAGSYNC_EMBED_MODEL_PATH"] = os.environ.get(
        "RAGSYNC_EMBED_MODEL_PATH", str(ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")
    )
    env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, __file__, "--dump", str(tree), str(asked), str(home), str(out), as_of, str(args.threads)]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def compare(reference: dict[str, Any], build: dict[str, Any]) -> dict[str, Any]:
    fields = ("answered", "answer", "claims", "reason", "searches", "evidence_ids")
    differing = []
    for a, b in zip(reference["asks"], build["asks"], strict=True):
        fields_differing = [f for f in fields if a[f] != b[f]]
        if fields_differing:
            differing.append({"question": a["question"], "fields": fields_differing})
    return {
        "asks": len(build["asks"]),
        "answered": sum(r["answered"] for r in build["asks"]),
        "abstained": sum(not r["answered"] for r in build["asks"]),
        "searches": sum(len(r["searches"]) for r in build["asks"]),
        "compared": list(fields),
        "differing": differing,
        "same": not differing,
        "cpu_ms_per_ask": {"reference": reference["cpu_ms_per_ask"], "build": build["cpu_ms_per_ask"]},
        "question_batches": {"reference": reference.get("question_batches"), "build": build.get("question_batches")},
    }


def main() -> None:
    if len(sys.argv) == 8 and sys.argv[1] == "--dump":
        dump(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]), sys.argv[6], int(sys.argv[7]))
        return
    sys.path.insert(0, str(ROOT / "bench"))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="the reference source tree (e.g. main)")
    parser.add_argument("--reference-name", default="main")
    parser.add_argument("--set", default="python-manual")
    parser.add_argument("--variant", default="ci", choices=("ci", "full"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--threads", type=int, default=1, help="ask from this many threads at once (questions then share model runs)"
    )
    args = parser.parse_args()
    as_of = datetime.now(UTC).replace(microsecond=0).isoformat()
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-api-answers-") as tmp_name:
        tmp = Path(tmp_name)
        reference = run_tree(args.reference.resolve(), args, tmp, "reference", as_of)
        build = run_tree(ROOT, args, tmp, "build", as_of)
    result = compare(reference, build)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "query", "indexer", "schemas", "ragsync"],
                           cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    entry = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "set": f"{args.set} ({args.variant})",
        "as_of": as_of,
        "reference": args.reference_name,
        "build": head.stdout.strip() + (" (uncommitted changes)" if dirty.stdout.strip() else ""),
        "threads": args.threads,
        **result,
        "command": "python3 " + " ".join(sys.argv),
    }
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    report["same_answers"] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(entry, indent=2))
    if not result["same"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
