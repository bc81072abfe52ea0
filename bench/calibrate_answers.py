#!/usr/bin/env python3
"""Calibration of the extractive model's answer threshold (`min_score`) on the three evaluation sets.

For every question of every set it runs one permission-filtered search (the configured Retriever) and
scores the evidence the way the model does, with no threshold: the best sentence's score, whether the
question names something no passage mentions (the model then abstains whatever the score), and which
passages the model would cite. From those it reports

* the highest score of a question that must abstain (unanswerable or denied), per set;
* the leave-one-set-out excess: how far the held-out set's highest abstain-question score lies above the
  threshold the two other sets would set. It is how wrong a threshold fitted on two manuals was on a
  third one, so the margin above the highest abstain-question score is at least the largest excess;
* grounded answer rates (answerable questions whose citations include a gold passage) at thresholds
  around the chosen one, so the cost of the margin is visible.

The sets' homes come from their run.sh (eval/<set>/run.sh [--ci]). Nothing here tunes on question IDs:
the threshold is a function of the scores of every abstain question of all three sets.

    python3 bench/calibrate_answers.py            # full sets -> bench/results/answer-calibration.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval_homes import SETS, add_homes_option, embed_model_path, set_paths  # noqa: E402

from query.extractive import ExtractiveModel  # noqa: E402
from query.ports import TOOL_SUBMIT, ModelTurn, ToolCall  # noqa: E402
from query.worker import QueryWorker, default_as_of  # noqa: E402
from ragsync.evaluation import load_questions  # noqa: E402
from ragsync.evaluation.metrics import is_gold  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import build_embedded  # noqa: E402
from schemas._time import to_utc  # noqa: E402

RESULTS = ROOT / "bench" / "results"


@dataclass
class Scored:
    set: str
    id: str
    abstain: bool
    score: float | None  # None: abstains at any threshold (no sentence, a name unmentioned, meaning too low)
    grounded: bool  # the claims the model would make include a gold passage


class _Capture:
    """Stands in for the model for one turn: keeps the evidence and abstains."""

    name = "capture"

    def __init__(self) -> None:
        self.turns: list[ModelTurn] = []

    def decide(self, turn: ModelTurn) -> ToolCall:
        self.turns.append(turn)
        return ToolCall(TOOL_SUBMIT, {"abstain": True, "reason": "capture"})


def score_set(
    name: str, variant: str, model_path: Path, homes: Path | None = None, min_meaning: float | None = None
) -> list[Scored]:
    base, home = set_paths(name, variant, homes)
    settings = Settings(home=home, embed_model_path=model_path, session_secret="calibrate-" + "x" * 24)
    components = build_embedded(settings)
    try:
        worker = components.query_worker()
        model = worker.model
        if not isinstance(model, ExtractiveModel):
            sys.exit("calibration is for the embedded profile's extractive model")
        meaning = model.min_meaning if min_meaning is None else min_meaning
        probe = ExtractiveModel(model.embedder, min_meaning=meaning, min_score=float("-inf"))
        out = []
        for q in load_questions(base / "questions.jsonl"):
            capture = _Capture()
            single = QueryWorker(worker.retriever, capture, "calibrate", replace(worker.settings, max_searches=1))
            single.ask(q.principal, q.question, to_utc(q.as_of) if q.as_of is not None else default_as_of())
            score: float | None = None
            grounded = False
            if capture.turns:
                turn = capture.turns[0]
                by_id = {ev.passage_id: ev for ev in turn.evidence}
                ranked = probe.candidates(turn.question, turn.evidence)
                good = (
                    []
                    if probe.unmentioned_names(turn.question, turn.evidence)
                    else probe._good(turn.question, ranked, turn.evidence)
                )
                if good:
                    score = good[0].score
                    grounded = any(
                        is_gold(_Text(c.evidence.passage_id, by_id[c.evidence.passage_id].text), q.gold) for c in good
                    )
            out.append(Scored(name, q.id, q.expect == "abstain", score, grounded))
        return out
    finally:
        components.close()


@dataclass
class _Text:
    passage_id: str
    text: str

    @property
    def doc_id(self) -> str:
        return self.passage_id.split("@", 1)[0]


def _max_abstain(rows: list[Scored]) -> float:
    return max((r.score for r in rows if r.abstain and r.score is not None), default=float("-inf"))


def grounded_rate(rows: list[Scored], threshold: float) -> float:
    answerable = [r for r in rows if not r.abstain]
    hits = sum(1 for r in answerable if r.score is not None and r.score >= threshold and r.grounded)
    return round(hits / len(answerable), 4) if answerable else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("full", "ci"), default="full")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/answer-calibration[-ci].json")
    add_homes_option(parser)
    parser.add_argument(
        "--min-meaning",
        type=float,
        default=None,
        help="the model's meaning gate for this run (another model's cosines sit on another scale)",
    )
    args = parser.parse_args()
    model = embed_model_path()
    rows = {name: score_set(name, args.variant, model, args.homes, args.min_meaning) for name in SETS}
    highest = {name: _max_abstain(r) for name, r in rows.items()}
    excess = {name: round(highest[name] - max(v for other, v in highest.items() if other != name), 4) for name in SETS}
    top = max(highest.values())
    margin = max(0.05, *excess.values())
    chosen = round(top + margin, 2)
    current = ExtractiveModel().min_score
    thresholds = sorted({round(top, 3), chosen, current, round(top + 0.1, 2), round(top - 0.1, 2)})
    report: dict[str, Any] = {
        "benchmark": "answer threshold calibration of the extractive model (single search, no threshold)",
        "variant": args.variant,
        "model": os.environ.get("RAGSYNC_EMBED_MODEL_NAME", "sentence-transformers/all-MiniLM-L6-v2"),
        "min_meaning": args.min_meaning if args.min_meaning is not None else ExtractiveModel().min_meaning,
        "highest_abstain_question_score": {name: round(v, 4) for name, v in highest.items()},
        "highest_abstain_questions": {
            name: sorted(((round(r.score, 4), r.id) for r in rs if r.abstain and r.score is not None), reverse=True)[:3]
            for name, rs in rows.items()
        },
        "leave_one_set_out_excess": excess,
        "margin": round(margin, 4),
        "suggested_min_score": chosen,
        "configured_min_score": current,
        "abstain_questions_abstaining_whatever_the_threshold": {
            name: sum(1 for r in rs if r.abstain and r.score is None) for name, rs in rows.items()
        },
        "grounded_answer_rate_single_search": {
            str(t): {name: grounded_rate(rs, t) for name, rs in rows.items()} for t in thresholds
        },
        "notes": [
            "score = the best sentence's score (query/extractive.py); None when the model abstains whatever the "
            "threshold (no sentence, meaning below min_meaning, or a name in the question no passage mentions)",
            "margin = max(0.05, the largest leave-one-set-out excess)",
        ],
    }
    out = args.out or RESULTS / f"answer-calibration{'-ci' if args.variant == 'ci' else ''}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in list(report)[2:9]}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    main()
