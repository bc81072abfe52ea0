#!/usr/bin/env python3
"""Where an answer's CPU goes, stage by stage: unique questions (a ticket qualifier each, as
bench/api_load.py sends them) asked one at a time in-process on a copy of an evaluation set's home, the
rankers one after the other (so every stage runs in the asking thread), each stage's process CPU
(ONNX Runtime's own threads included) summed inclusively and divided by the asks.

    eval/python-manual/run.sh --ci
    python3 bench/answer_stage_cpu.py [--set python-manual] [--asks 200]

A speed figure of one busy or quiet machine: compare stages within one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="python-manual")
    parser.add_argument("--asks", type=int, default=200)
    sys.path.insert(0, str(ROOT / "bench"))
    from eval_homes import add_homes_option, embed_model_path, set_paths

    add_homes_option(parser)
    args = parser.parse_args()
    base, source = set_paths(args.set, "ci", args.homes)
    rows = [json.loads(x) for x in (base / "questions.jsonl").read_text().splitlines() if x.strip() and x[0] != "#"]
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-stages-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(source, home, ignore=shutil.ignore_patterns("owner.lock", "*.sock"))
        os.environ.update(RAGSYNC_HOME=str(home), RAGSYNC_PROFILE="embedded", RAGSYNC_CONFIG=os.devnull)
        os.environ["RAGSYNC_CONCURRENT_RANKERS"] = "false"
        from ragsync.settings import load_settings
        from ragsync.wiring import build
        from schemas.principal import Principal

        components = build(load_settings())
        worker = components.query_worker()
        spent: dict[str, float] = defaultdict(float)
        inside: dict[str, bool] = {}

        def wrap(obj: Any, name: str, label: str) -> None:
            fn = getattr(obj, name)

            @functools.wraps(fn)
            def timed(*a: Any, **k: Any) -> Any:
                if inside.get(label):
                    return fn(*a, **k)
                inside[label] = True
                started = time.process_time()
                try:
                    return fn(*a, **k)
                finally:
                    spent[label] += time.process_time() - started
                    inside[label] = False

            setattr(obj, name, timed)

        r, model = worker.retriever, worker.model
        wrap(r.embedder._inner, "embed_query", "question embedding (ONNX)")  # type: ignore[union-attr]
        wrap(r.lexical, "search", "lexical search")
        wrap(r.lexical, "passages", "lexical read-back of dense hits and cached results")
        wrap(r.vector, "search", "vector search")
        wrap(r, "deny_entries", "deny set")
        wrap(r.reranker, "score", "sentence reranker")
        wrap(r, "search", "retrieval (all of the above)")
        wrap(model, "decide", "answer step (extractive model)")
        wrap(worker, "ask", "ask (whole)")

        def principal(p: dict[str, Any]) -> Principal:
            return Principal(tenant=p["tenant"], user=p["user"], groups=tuple(p["groups"]))

        for q in rows:  # the home's sentence vectors and the memos warm, as under load
            worker.ask(principal(q["principal"]), q["question"])
        spent.clear()
        searches = 0
        started = time.process_time()
        for i in range(args.asks):
            q = rows[i % len(rows)]
            asked = f"{q['question'].rstrip()} (ticket {1000 + i // 1000}-{i % 1000})"
            searches += len(worker.ask(principal(q["principal"]), asked).trace.searches)
        total = time.process_time() - started
        components.close()
    stages = {k: round(1000 * v / args.asks, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
    result = {
        "set": f"{args.set} (ci)",
        "asks": args.asks,
        "home": str(source),
        "embed_model_path": str(embed_model_path()),
        "searches_per_ask": round(searches / args.asks, 2),
        "cpu_ms_per_ask": round(1000 * total / args.asks, 2),
        "stages_cpu_ms_per_ask": stages,
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
