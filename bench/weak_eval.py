#!/usr/bin/env python3
"""The query adapter trained on documentation no evaluation set uses, measured on every set (issue 23 item 3).

Every evaluation set is held out by construction (no pair comes from its package); the one constant,
the adapter's `strength`, is chosen leave one set out as bench/leave_one_out.py chooses a method: for
each set, the strength maximising the other sets' mean of (fused R@10 + paraphrase-and-situation R@10)
/ 2, ties to MRR, then to the smaller strength. Each strength runs the live `Retriever.rank` of the
set's home (the pipeline's defaults, the reranker included) with the adapter on the dense search, on
every answerable question, one set after the other in one process (side by side: same homes, model).

    for s in python-manual git-doc flex-doc debian-handbook sqlite-doc; do eval/run_set.sh $s --ci; done
    python3 bench/weak_eval.py --variant ci --out bench/results/weak-supervision-ci.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from query.retrieval import Retriever
from ragsync.evaluation import load_questions
from ragsync.evaluation.metrics import recall_at, reciprocal_rank, span_ranks
from ragsync.query_adapter import PACKAGED, load_adapter
from ragsync.settings import Settings
from ragsync.wiring import build_embedded
from schemas.principal import AccessFilter

REPO = Path(__file__).resolve().parent.parent
SETS = ("python-manual", "git-doc", "flex-doc", "debian-handbook", "sqlite-doc")
STRENGTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
PARA = ("paraphrase", "situation")


def _now() -> Any:
    from query.worker import default_as_of

    return default_as_of()


def measure_set(name: str, variant: str, adapter_path: Path, strengths: tuple[float, ...]) -> dict[str, Any]:
    base = REPO / "eval" / name / "build" / variant
    settings = Settings(
        home=base / "home",
        embed_model_path=Path(os.environ["RAGSYNC_EMBED_MODEL_PATH"]),
        session_secret="weak-eval-" + "x" * 24,
    )
    components = build_embedded(settings)
    try:
        live = components.retriever()
        assert live.embedder is not None, "needs the embedding model"
        questions = [q for q in load_questions(base / "questions.jsonl") if q.expect == "answer"]
        out: dict[str, Any] = {"questions": len(questions), "by_strength": {}}
        for s in strengths:
            adapter = load_adapter(adapter_path, s, live.embedder.dim) if s > 0 else None
            r = Retriever(live.lexical, live.vector, live.embedder, None, live.settings, live.reranker, adapter=adapter)
            out["by_strength"][str(s)] = _measure(r, questions)
            print(f"{name} strength {s}: {out['by_strength'][str(s)]['overall']}", file=sys.stderr)
        return out
    finally:
        components.close()


def _measure(r: Retriever, questions: list[Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for q in questions:
        access = AccessFilter.for_principal(q.principal, q.as_of or _now())
        ranking = r.rank(q.question, access)
        fused = [ranking.passages[pid] for pid, _ in ranking.fused]
        dense = [h.passage for h in ranking.dense]
        f_ranks, d_ranks = span_ranks(fused, q.gold), span_ranks(dense, q.gold)
        rows.append(
            {
                "id": q.id,
                "type": q.type,
                "fused@10": recall_at(f_ranks, 10),
                "dense@10": recall_at(d_ranks, 10),
                "rr": reciprocal_rank(f_ranks),
                "fused_ranks": f_ranks,
            }
        )
    return {"overall": summary(rows), "by_type": _by_type(rows), "rows": rows, "seconds": time.perf_counter() - started}


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    para = [x for x in rows if x["type"] in PARA]

    def avg(xs: list[dict[str, Any]], key: str) -> float:
        return round(sum(x[key] for x in xs) / len(xs), 4) if xs else float("nan")

    return {
        "fused_recall@10": avg(rows, "fused@10"),
        "paraphrase_situation_recall@10": avg(para, "fused@10") if para else avg(rows, "fused@10"),
        "mrr": avg(rows, "rr"),
        "dense_recall@10": avg(rows, "dense@10"),
    }


def _by_type(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for x in rows:
        groups[x["type"]].append(x)
    return {t: {"n": len(xs), **summary(xs)} for t, xs in sorted(groups.items())}


def objective(m: dict[str, float]) -> tuple[float, float]:
    return ((m["fused_recall@10"] + m["paraphrase_situation_recall@10"]) / 2, m["mrr"])


def choose(per_set: dict[str, dict[str, Any]], held: str, strengths: tuple[float, ...]) -> float:
    """The strength the other sets choose (mean objective, then mean MRR, then the smaller strength)."""
    train = [s for s in per_set if s != held]

    def score(st: float) -> tuple[float, float, float]:
        objs = [objective(per_set[s]["by_strength"][str(st)]["overall"]) for s in train]
        return (sum(o[0] for o in objs) / len(objs), sum(o[1] for o in objs) / len(objs), -st)

    return max(strengths, key=score)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="ci", choices=("ci", "full"))
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--adapter", type=Path, default=PACKAGED)
    ap.add_argument("--strengths", type=float, nargs="*", default=list(STRENGTHS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    strengths = tuple(args.strengths)
    load = {"start": os.getloadavg()}
    started = time.time()
    per_set = {s: measure_set(s, args.variant, args.adapter, strengths) for s in args.sets}
    held_out: dict[str, Any] = {}
    for s in args.sets:
        chosen = choose(per_set, s, strengths) if len(args.sets) > 1 else 0.0
        held_out[s] = {
            "strength": chosen,
            "held_out": per_set[s]["by_strength"][str(chosen)]["overall"],
            "defaults": per_set[s]["by_strength"]["0.0"]["overall"],
        }
    load["end"] = os.getloadavg()
    report = {
        "what": "query adapter trained on heading->body pairs of Debian documentation no evaluation set uses",
        "variant": args.variant,
        "adapter": str(args.adapter),
        "strengths": strengths,
        "load_averages": load,
        "seconds": round(time.time() - started, 1),
        "held_out": held_out,
        "per_set": per_set,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for s, h in held_out.items():
        print(s, h["strength"], h["held_out"], h["defaults"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
