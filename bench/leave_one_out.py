#!/usr/bin/env python3
"""Leave one set out: every ranking method and threshold chosen on the other sets, reported on the set
left out, beside the figure with the choice made on all sets (issue 23 item 2).

Ranking: a grid of methods (`Method`, bench/loo_rank.py: the dense floor, a relative BM25 floor, RRF's
k and the BM25 list's weight, a third list of sentence-level vectors (max-sim), the reranker's passage
cosine weight and its blend with the fused order) is replayed on every set from recorded features
(bench/loo_collect.py). For each set, the method with the best objective (mean over sets of
(fused R@10 + paraphrase-and-situation R@10) / 2; ties: mean MRR, then the fewest changes from the
defaults) is chosen on the other sets and reported on it ("held out"), beside the method chosen on
all sets ("tuned"), the defaults, and the method that set alone would choose ("fitted": how much
fitting to one set is worth, never a figure to claim).

Levers: the same protocol over sub-grids, each with one lever held at its neutral value, so a lever
that only pays on the set it was tuned on shows as no held-out gain.

Answers: the extractive model's threshold (`min_score`) by bench/calibrate_answers.py's rule (highest
abstain-question score plus a margin), the rule applied to the other sets only, then the held-out
set's single-search grounded rate and abstentions at that threshold.

    python3 bench/leave_one_out.py --variant ci                # -> bench/results/leave-one-out-ci.json
    python3 bench/leave_one_out.py --variant ci --sets flex-doc git-doc python-manual

Needs each set's home (eval/<set>/run.sh [--ci]); features are cached in eval/<set>/build/<variant>/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eval_homes import SETS, add_homes_option, embed_model_path, set_paths  # noqa: E402
from loo_collect import load_or_collect  # noqa: E402
from loo_harness import by_type_figures, held_out, run_final  # noqa: E402
from loo_rank import Compiled, Figures, Method, compile_question, fast_figures, fast_rank, rank  # noqa: E402

RESULTS = ROOT / "bench" / "results"

GRID: dict[str, Sequence[Any]] = {
    "dense_floor": (0.25, 0.30),
    "bm25_rel_floor": (0.0, 0.3),
    "rrf_k": (60,),
    "bm25_weight": (0.5, 1.0),
    "sentence_weight": (0.0, 1.0),
    "passage_meaning": (0.0, 0.3, 0.6),
    "fusion_weight": (0.5, 1.0),
    "subquery_weight": (0.0, 0.5, 1.0),
}
EXTRA = (Method(rrf_k=10), Method(rerank_depth=0), Method(rerank_depth=20))
"""Single changes beside the grid: a smaller RRF k, no reranker, a shallower reranker."""

LEVERS: dict[str, tuple[str, Any]] = {
    "sentence max-sim list (third RRF list)": ("sentence_weight", 0.0),
    "BM25 list weight": ("bm25_weight", 1.0),
    "relative BM25 floor": ("bm25_rel_floor", 0.0),
    "dense floor": ("dense_floor", 0.30),
    "passage cosine in the reranker": ("passage_meaning", 0.0),
    "reranker blend weight": ("fusion_weight", 0.5),
    "each sentence of the question searched (fourth RRF list)": ("subquery_weight", 0.0),
}
"""Each lever's neutral value: the sub-grid without the lever holds it there."""


def grid() -> list[Method]:
    names = list(GRID)
    out = [Method(**dict(zip(names, values, strict=True))) for values in itertools.product(*GRID.values())]
    return [*out, *EXTRA]


def _changes(m: Method) -> int:
    d = Method()
    return sum(1 for f in fields(Method) if getattr(m, f.name) != getattr(d, f.name))


def select(figs: Mapping[str, Mapping[Method, Figures]], sets: Sequence[str], methods: Sequence[Method]) -> Method:
    """The best mean objective over `sets`; ties by mean MRR, then the fewest changes from the defaults."""

    def key(m: Method) -> tuple[float, float, int]:
        objective = sum(figs[s][m].objective() for s in sets) / len(sets)
        mrr = sum(figs[s][m].mrr for s in sets) / len(sets)
        return (round(objective, 6), round(mrr, 6), -_changes(m))

    return max(methods, key=key)


def _fig(f: Figures) -> dict[str, Any]:
    return {
        "n": f.n,
        "fused_recall@10": round(f.fused, 4),
        "paraphrase_situation_recall@10": round(f.hard, 4),
        "mrr": round(f.mrr, 4),
        "by_type": {t: {k: round(v, 4) for k, v in d.items()} for t, d in f.by_type.items()},
        "fused_below_better_ranker": sorted(
            t for t, d in f.by_type.items() if d["fused"] + 1e-9 < max(d["bm25"], d["dense"])
        ),
    }


def protocol(
    figs: Mapping[str, Mapping[Method, Figures]], sets: Sequence[str], methods: Sequence[Method]
) -> dict[str, Any]:
    tuned, held_by_set = held_out(sets, lambda train: select(figs, train, methods))
    out: dict[str, Any] = {"tuned_on_all": tuned.label(), "sets": {}}
    for s in sets:
        held = held_by_set[s]
        fitted = select(figs, [s], methods)
        out["sets"][s] = {
            "held_out_method": held.label(),
            "held_out": _fig(figs[s][held]),
            "tuned": _fig(figs[s][tuned]),
            "default": _fig(figs[s][Method()]),
            "fitted_to_this_set": {"method": fitted.label(), **_fig(figs[s][fitted])},
        }
    held_mean = [figs[s][held_by_set[s]] for s in sets]
    out["mean_held_out"] = {
        "fused_recall@10": round(sum(f.fused for f in held_mean) / len(sets), 4),
        "paraphrase_situation_recall@10": round(sum(f.hard for f in held_mean) / len(sets), 4),
    }
    return out


def sub_grid(methods: Sequence[Method], **held: Any) -> list[Method]:
    """The methods whose named fields hold the given values (a lever held at its neutral value)."""
    return [m for m in methods if all(getattr(m, name) == value for name, value in held.items())]


RECALLS = {"fused": "fused_recall@10", "hard": "paraphrase_situation_recall@10"}


def per_set(
    p: Mapping[str, Any], choice: str = "method", figures: Mapping[str, str] | None = RECALLS
) -> dict[str, dict[str, Any]]:
    """A protocol's held-out choice per set (its `held_out_<choice>`, shown as `choice`) with its
    held-out figures: `figures` names the ones kept (by default fused and paraphrase-and-situation
    R@10), None keeps them all under their own names (bench/answer_turns.py's protocols)."""
    return {
        s: {
            choice: v[f"held_out_{choice}"],
            **(v["held_out"] if figures is None else {name: v["held_out"][key] for name, key in figures.items()}),
        }
        for s, v in p["sets"].items()
    }


def levers(figs: Mapping[str, Mapping[Method, Figures]], sets: Sequence[str], methods: Sequence[Method]) -> Any:
    """Held-out figures with each lever free against held at its neutral value."""
    full = protocol(figs, sets, methods)["mean_held_out"]
    out = {}
    for name, (field_name, neutral) in LEVERS.items():
        base = protocol(figs, sets, sub_grid(methods, **{field_name: neutral}))
        without = base["mean_held_out"]
        out[name] = {
            "held_out_mean_with": full,
            "held_out_mean_without": without,
            "gain_fused": round(full["fused_recall@10"] - without["fused_recall@10"], 4),
            "gain_paraphrase_situation": round(
                full["paraphrase_situation_recall@10"] - without["paraphrase_situation_recall@10"], 4
            ),
            "per_set_held_out_without": per_set(base),
        }
    return out


CANDIDATE_DEFAULTS = (
    Method(sentence_weight=1.0),
    Method(subquery_weight=1.0),
    Method(sentence_weight=1.0, subquery_weight=1.0),
    Method(sentence_weight=0.5, subquery_weight=0.5),
)
"""The new lists as fixed additions to the defaults (weights set before this run, not chosen on any set):
each set's figures beside the defaults', so a list that costs one set shows there."""


def candidates(figs: Mapping[str, Mapping[Method, Figures]], sets: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in CANDIDATE_DEFAULTS:
        rows = {}
        for s in sets:
            f, d = figs[s][m], figs[s][Method()]
            rows[s] = {
                "fused": round(f.fused, 4),
                "hard": round(f.hard, 4),
                "mrr": round(f.mrr, 4),
                "fused_minus_default": round(f.fused - d.fused, 4),
                "hard_minus_default": round(f.hard - d.hard, 4),
                "mrr_minus_default": round(f.mrr - d.mrr, 4),
            }
        out[m.label()] = {
            "sets": rows,
            "mean_fused": round(sum(figs[s][m].fused for s in sets) / len(sets), 4),
            "mean_hard": round(sum(figs[s][m].hard for s in sets) / len(sets), 4),
        }
    out["default"] = {
        "mean_fused": round(sum(figs[s][Method()].fused for s in sets) / len(sets), 4),
        "mean_hard": round(sum(figs[s][Method()].hard for s in sets) / len(sets), 4),
    }
    return out


def _store_vs_brute(qs: Sequence[Any]) -> dict[str, Any] | None:
    """How the store's sentence list (max-sim over stored, capped sentence vectors) compares with the
    brute-force list it replaced: questions whose top 10 differ as sets, and the mean top-10 overlap."""
    pairs = [(q.sentence, q.sentence_brute) for q in qs if getattr(q, "sentence_brute", None)]
    if not pairs:
        return None
    overlaps = [len({p for p, _ in a[:10]} & {p for p, _ in b[:10]}) / max(1, min(10, len(b))) for a, b in pairs]
    return {
        "questions": len(pairs),
        "top10_sets_differ": sum(1 for o in overlaps if o < 1.0),
        "mean_top10_overlap": round(sum(overlaps) / len(overlaps), 4),
    }


def buildable(
    figs: Mapping[str, Mapping[Method, Figures]], sets: Sequence[str], methods: Sequence[Method], stored: bool = False
) -> Any:
    """The protocol over the methods the live Retriever builds (the sentence max-sim list only when every
    set's stores hold sentence vectors: `stored`), with and without the question's sentences searched one by one."""
    live = list(methods) if stored else sub_grid(methods, sentence_weight=0)
    briefs = {}
    for label, grid_ in (("with_subquery", live), ("without_subquery", sub_grid(live, subquery_weight=0))):
        p = protocol(figs, sets, grid_)
        briefs[label] = {"tuned_on_all": p["tuned_on_all"], "mean_held_out": p["mean_held_out"], "sets": per_set(p)}
    return briefs


def answer_rows(name: str, variant: str, homes: Path | None) -> list[Any]:
    """calibrate_answers.score_set's rows of one set, cached beside its features (the build folder)."""
    import pickle

    from calibrate_answers import score_set

    base, home = set_paths(name, variant, homes)
    cache = base / "loo-answers.pkl"
    if cache.is_file() and cache.stat().st_mtime > (home / "state.db").stat().st_mtime:
        with cache.open("rb") as f:
            rows: list[Any] = pickle.load(f)
        return rows
    rows = score_set(name, variant, embed_model_path(), homes)
    with cache.open("wb") as f:
        pickle.dump(rows, f)
    return rows


def answers(variant: str, sets: Sequence[str], homes: Path | None) -> dict[str, Any]:
    """The answer threshold by calibrate_answers's rule, chosen on the other sets, per held-out set."""
    from calibrate_answers import _max_abstain, grounded_rate

    rows = {s: answer_rows(s, variant, homes) for s in sets}
    highest = {s: _max_abstain(r) for s, r in rows.items()}

    def rule(train: Sequence[str]) -> float:
        top = max(highest[s] for s in train)
        excess = [highest[s] - max(highest[o] for o in train if o != s) for s in train if len(train) > 1]
        return round(top + max(0.05, *excess) if excess else top + 0.05, 2)

    def fixed(train: Sequence[str]) -> float:
        """The same without the data-driven margin: the highest abstain score plus a fixed 0.05."""
        return round(max(highest[s] for s in train) + 0.05, 2)

    tuned, held_by_set = held_out(sets, rule)
    fixed_tuned, fixed_held = held_out(sets, fixed)
    out: dict[str, Any] = {
        "tuned_min_score": tuned,
        "highest_abstain_score": {s: round(v, 4) for s, v in highest.items()},
    }
    per = {}
    for s in sets:
        held = held_by_set[s]
        abstain = [r for r in rows[s] if r.abstain]

        def abstained(t: float, abstain: list[Any] = abstain) -> str:
            return f"{sum(1 for r in abstain if r.score is None or r.score < t)}/{len(abstain)}"

        per[s] = {
            "held_out_min_score": held,
            "held_out_grounded_single": grounded_rate(rows[s], held),
            "held_out_abstained": abstained(held),
            "tuned_grounded_single": grounded_rate(rows[s], tuned),
            "tuned_abstained": abstained(tuned),
            "fixed_margin": {
                "held_out_min_score": fixed_held[s],
                "held_out_grounded_single": grounded_rate(rows[s], fixed_held[s]),
                "held_out_abstained": abstained(fixed_held[s]),
                "tuned_min_score": fixed_tuned,
                "tuned_grounded_single": grounded_rate(rows[s], fixed_tuned),
            },
            "configured_min_score_2.07": {
                "grounded_single": grounded_rate(rows[s], 2.07),
                "abstained": abstained(2.07),
            },
        }
    out["sets"] = per
    return out


def final(
    variant: str, sets: Sequence[str], homes: Path | None, chosen: Mapping[str, Mapping[str, tuple[Method, float]]]
) -> dict[str, Any]:
    """`ragsync eval`'s harness per set under each choice (held out, tuned): answers, loop, permissions.

    `chosen[set][role]` is (ranking method, answer threshold); a choice two roles share is run once."""

    def evaluate(components: Any, ctx: Any, questions: Any, choice: tuple[Method, float]) -> dict[str, Any]:
        from dataclasses import replace

        from loo_live import MethodRetriever
        from ranking import default_ctx, summary

        from query.extractive import ExtractiveModel
        from ragsync.evaluation import Gates, run_eval

        method, min_score = choice
        retriever = MethodRetriever(components.retriever(), method)
        model = ExtractiveModel(ctx.model.embedder, min_meaning=ctx.model.min_meaning, min_score=min_score)
        report = run_eval(replace(default_ctx(ctx, retriever), model=model), questions, Gates(k=10))
        figures: dict[str, Any] = summary(report, [0.0]) | {
            "by_type": by_type_figures(report, ("fused", "bm25", "dense", "grounded_loop")),
            "abstain_rate": report["overall"]["loop"]["abstain_rate"],
        }
        return figures

    return run_final(
        variant,
        sets,
        homes,
        chosen,
        secret="loo-final-",
        evaluate=evaluate,
        describe=lambda choice: {"method": choice[0].label(), "min_score": choice[1]},
        shown="fused",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--variant", choices=("full", "ci"), default="full")
    parser.add_argument("--refresh", action="store_true", help="collect features again")
    parser.add_argument("--collect-only", action="store_true")
    parser.add_argument("--no-answers", action="store_true", help="skip the answer threshold's protocol")
    parser.add_argument("--final", action="store_true", help="then run the full evaluation under each set's choices")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/leave-one-out[-ci].json")
    add_homes_option(parser)
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    compiled: dict[str, list[Compiled]] = {}
    checks: dict[str, Any] = {}
    for s in args.sets:
        base, home = set_paths(s, args.variant, args.homes)
        data = load_or_collect(s, base, home, embed_model_path(), args.refresh)
        qs = data["questions"]
        compiled[s] = [compile_question(q) for q in qs]
        fast_diff = sum(
            1 for q, c in zip(qs, compiled[s], strict=True) if rank(q, Method())[:10] != fast_rank(c, Method())[:10]
        )
        checks[s] = {
            "questions": len(qs),
            "replay_checked_against_live": data.get("replay_checked"),
            "replay_mismatches": data["replay_mismatches"],
            "fast_replay_mismatches": fast_diff,
            "sentence_source": data.get("sentence_source", "brute force"),
            "replay_mismatches_with_both_lists_live": data.get("replay_mismatches_with_lists"),
            "store_against_brute_force": _store_vs_brute(qs),
        }
    if args.collect_only:
        if not args.no_answers:
            for s in args.sets:
                checks[s]["answer_rows"] = len(answer_rows(s, args.variant, args.homes))
        print(json.dumps(checks, indent=1))
        return
    methods = grid()
    scored = [*methods, *(m for m in CANDIDATE_DEFAULTS if m not in methods)]  # selection sees `methods` only
    figs = {s: {m: fast_figures(compiled[s], m) for m in scored} for s in args.sets}
    report: dict[str, Any] = {
        "benchmark": "leave one set out: ranking methods and the answer threshold chosen on the other sets",
        "variant": args.variant,
        "objective": "mean over the training sets of (fused R@10 + paraphrase-and-situation R@10) / 2; "
        "ties: mean MRR, then fewest changes from the defaults",
        "grid": {k: list(v) for k, v in GRID.items()} | {"extra": [m.label() for m in EXTRA]},
        "defaults": asdict(Method()),
        "methods": len(methods),
        "replay_checks": checks,
        "ranking": protocol(figs, args.sets, methods),
        "levers": levers(figs, args.sets, methods),
        "fixed_additions_to_the_defaults": candidates(figs, args.sets),
        "buildable": buildable(
            figs, args.sets, methods, all(checks[s]["sentence_source"] == "store" for s in args.sets)
        ),
    }
    if not args.no_answers:
        report["answers"] = answers(args.variant, args.sets, args.homes)
    if args.final:
        by_label = {m.label(): m for m in methods}
        rk, ans = report["ranking"], report.get("answers", {})
        chosen = {
            s: {
                "held_out": (by_label[rk["sets"][s]["held_out_method"]], ans["sets"][s]["held_out_min_score"]),
                "tuned": (by_label[rk["tuned_on_all"]], ans["tuned_min_score"]),
            }
            for s in args.sets
        }
        report["final"] = final(args.variant, args.sets, args.homes, chosen)
    report["loadavg_start"] = load_start
    report["loadavg_end"] = os.getloadavg()
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    out = args.out or RESULTS / f"leave-one-out{'-ci' if args.variant == 'ci' else ''}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
