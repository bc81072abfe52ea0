#!/usr/bin/env python3
"""Same outcomes, two `ragsync eval` reports: every question's ranks, answer or abstention (and its reason),
searches, cited passage IDs and leaks, in the loop and single-search runs, compared one by one.

A speed change to the answer path must leave every outcome of every evaluation set as it was. Run the
eval of a set twice on the same (warm) home, once from each source tree, then compare:

    git archive main | tar -x -C /tmp/main-tree
    for t in /tmp/main-tree "$PWD"; do (cd "$t" && PYTHONPATH="$t" RAGSYNC_HOME=$PWD/eval/<set>/build/ci/home \\
        RAGSYNC_PROFILE=embedded python3 -m ragsync.cli eval eval/<set>/build/ci/questions.jsonl --out <out>); done
    python3 bench/eval_same_outcomes.py main.json branch.json      # exit 1 when one outcome differs

Latencies are not compared (they are not outcomes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RUN_FIELDS = ("answered", "grounded", "searches", "reason", "cited_ids")


def outcome(result: dict[str, Any]) -> dict[str, Any]:
    out = {k: result.get(k) for k in ("id", "ranks", "stage", "leaks", "gold_denied")}
    for run in ("loop", "single"):
        given = result.get(run) or {}
        out[run] = {f: given.get(f) for f in RUN_FIELDS}
    return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    a = [outcome(r) for r in before["results"]]
    b = [outcome(r) for r in after["results"]]
    differing = [x["id"] for x, y in zip(a, b, strict=False) if x != y]
    return {
        "questions": len(b),
        "same_questions": [x["id"] for x in a] == [y["id"] for y in b],
        "differing": differing,
        "leaks": sum(len(r.get("leaks") or []) for r in after["results"]),
        "answered": sum(bool((r.get("loop") or {}).get("answered")) for r in after["results"]),
        "same": not differing and len(a) == len(b),
    }


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    result = compare(json.loads(Path(sys.argv[1]).read_text()), json.loads(Path(sys.argv[2]).read_text()))
    print(json.dumps(result))
    if not result["same"] or result["leaks"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
