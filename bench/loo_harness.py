"""The leave-one-set-out harness of bench/answer_rule.py and bench/leave_one_out.py, in one place.

Both choose something (an answer rule; a ranking method and an answer threshold) on some evaluation
sets and report it on others: each set gets the choice made on the other sets ("held out") beside the
choice made on all of them ("tuned"), and `--final` runs `ragsync eval`'s harness per set under each
role's choice, once per distinct choice. One copy, so the two protocols cannot drift apart.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from eval_homes import embed_model_path, set_paths

C = TypeVar("C", bound=Hashable)

BY_TYPE: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "n": lambda v: v.get("n"),
    "fused": lambda v: v["retrieval"]["fused"].get("recall@10"),
    "bm25": lambda v: v["retrieval"].get("bm25", {}).get("recall@10"),
    "dense": lambda v: v["retrieval"].get("dense", {}).get("recall@10"),
    "grounded_loop": lambda v: v.get("loop", {}).get("grounded_answer_rate"),
    "grounded_single": lambda v: v.get("single", {}).get("grounded_answer_rate"),
}
"""The per-question-type figures a final run can report, read from `ragsync eval`'s report["by_type"]."""


def by_type_figures(report: Mapping[str, Any], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The named BY_TYPE figures of each question type that has retrieval figures: one reading of the
    report for both protocols, so the same name is the same figure in both results files."""
    return {t: {name: BY_TYPE[name](v) for name in names} for t, v in report["by_type"].items() if "retrieval" in v}


def held_out(sets: Sequence[str], choose: Callable[[Sequence[str]], C]) -> tuple[C, dict[str, C]]:
    """(the choice made on all `sets`, each set's choice made on the other sets); a set alone gets the
    choice made on all (there is nothing else to choose on)."""
    tuned = choose(sets)
    return tuned, {s: choose([o for o in sets if o != s]) if len(sets) > 1 else tuned for s in sets}


def run_final(
    variant: str,
    sets: Sequence[str],
    homes: Path | None,
    chosen: Mapping[str, Mapping[str, C]],
    *,
    secret: str,
    evaluate: Callable[[Any, Any, Any, C], dict[str, Any]],
    describe: Callable[[C], dict[str, Any]],
    shown: str,
) -> dict[str, Any]:
    """`ragsync eval`'s harness per set under each role's choice (`chosen[set][role]`), on the set's home.

    `evaluate(components, ctx, questions, choice)` runs one evaluation (once per distinct choice of a
    set); each role's entry is `describe(choice)` followed by that run's figures, and its `shown`
    figure is printed as it comes."""
    from query.extractive import ExtractiveModel
    from ragsync.evaluation import EvalContext, load_questions
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    out: dict[str, Any] = {}
    for s in sets:
        base, home = set_paths(s, variant, homes)
        questions = load_questions(base / "questions.jsonl")
        settings = Settings(home=home, embed_model_path=embed_model_path(), session_secret=secret + "x" * 20)
        components = build_embedded(settings)
        try:
            ctx = EvalContext.from_components(components)
            assert isinstance(ctx.model, ExtractiveModel)
            runs: dict[C, dict[str, Any]] = {}
            out[s] = {}
            for role, choice in chosen[s].items():
                if choice not in runs:
                    runs[choice] = evaluate(components, ctx, questions, choice)
                out[s][role] = {**describe(choice), **runs[choice]}
                print(f"{s} {role}: {json.dumps(out[s][role][shown])}", file=sys.stderr)
        finally:
            components.close()
    return out
