#!/usr/bin/env python3
"""Sentence choice across passages, held out (issue 23): does the passage's retrieval evidence, used beside
the sentence's own score, pick the gold passage's sentence where the model now picks another passage's?

bench/answer_misses.py found that in about half of the score gate's abstentions the best sentence is from
another passage than the gold one. Each variant below reorders the model's candidates (after the lead from
restated questions, before the name rule's fall-through and query.answer_form's readings of the best
sentence, as ExtractiveModel.candidates would) and is then read by the answer rule exactly as
bench/answer_rule.py reads it (its grid, its selection: every training abstain question abstains, then the
best mean single-search grounded rate; ties: the smaller passage weight, then the simpler and stricter rule).
The variant's constant and the rule's constants are chosen together, leave one set out:

    rank     score + a * (1 - order / n): more weight on the passage's fused rank (the model has 0.8 already;
             the recorded evidence holds the fused order, not the RRF score, so the rank is the evidence)
    support  score + b * the share of the question's content words the sentence's whole passage holds
             (title, heading, text): prefer the passage that supports the whole question
    passage_meaning  score + c * the mean cosine of the passage's candidate sentences to the question: the
             passage about the question as a whole, by meaning rather than by words
    top_k    only the sentences of the first k passages of the fused ranking
    margin   when the best sentence is not from the best-ranked passage that has a candidate, that passage's
             best sentence is taken instead if it scores within m of the best

Each family is reported beside main's rule ("main": the same protocol, no passage variant) per set, held out:
grounded (single search), answered, abstain questions kept abstaining, and the abstain questions answered.

    python3 bench/answer_passages.py --variant ci     # -> bench/results/answer-passages-ci.json
    python3 bench/answer_passages.py                  # full sets -> bench/results/answer-passages.json
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import answer_rule  # noqa: E402
from answer_rule import Rule, grid  # noqa: E402
from answer_turns import Figures, Infeasible, Turn, load_turns, options, tally, write_report  # noqa: E402
from loo_harness import held_out  # noqa: E402

from query.extractive import Candidate  # noqa: E402
from query.ports import Evidence  # noqa: E402
from query.sentences import content_terms  # noqa: E402

FAMILIES: dict[str, tuple[float, ...]] = {
    "rank": (-0.8, -0.6, -0.4, -0.2, 0.2, 0.4, 0.8),
    "support": (0.25, 0.5, 1.0, 1.5),
    "passage_meaning": (0.25, 0.5, 1.0),
    "top_k": (1, 2, 3, 5),
    "margin": (0.1, 0.2, 0.3, 0.5),
}
"""Each family's constants (0 / off is main's rule, always among the choices)."""


@dataclass(frozen=True, order=True)
class Choice:
    family: str  # "" for main's rule
    value: float
    rule: Rule

    def label(self) -> str:
        return (f"{self.family} {self.value}, " if self.family else "") + self.rule.label()


def _passage_cover(question: str, evidence: Sequence[Evidence]) -> dict[str, float]:
    wanted = content_terms(question)
    if not wanted:
        return {ev.passage_id: 0.0 for ev in evidence}
    return {
        ev.passage_id: len(wanted & content_terms(f"{ev.title} {ev.heading} {ev.text}")) / len(wanted)
        for ev in evidence
    }


def across(
    question: str, ranked: Sequence[Candidate], evidence: Sequence[Evidence], family: str, value: float
) -> list[Candidate]:
    """`ranked` (best first) reordered by the family's use of the passage's evidence."""
    if not family or not ranked:
        return list(ranked)
    if family == "top_k":
        return [c for c in ranked if c.order < value]
    if family == "margin":
        top = min(c.order for c in ranked)
        if ranked[0].order == top:
            return list(ranked)
        i, lead = next((i, c) for i, c in enumerate(ranked) if c.order == top)
        return [lead, *ranked[:i], *ranked[i + 1 :]] if ranked[0].score - lead.score <= value else list(ranked)
    n = max(len(evidence), 1)
    if family == "support":
        by_passage = _passage_cover(question, evidence)
    elif family == "passage_meaning":
        meanings: dict[str, list[float]] = {}
        for c in ranked:
            meanings.setdefault(c.evidence.passage_id, []).append(c.meaning)
        by_passage = {p: sum(m) / len(m) for p, m in meanings.items()}
    out = []
    for c in ranked:
        extra = value * (1 - c.order / n) if family == "rank" else value * by_passage[c.evidence.passage_id]
        out.append(replace(c, score=round(c.score + extra, 6)))
    out.sort(key=lambda c: (-c.score, c.order, c.index))
    return out


@dataclass(frozen=True)
class Across:
    """`across` with one family's constant, as answer_rule's reorder step (frozen: it hashes by value, so
    answer_rule's cache of re-read turns keeps one entry per variant)."""

    family: str
    value: float

    def __call__(self, question: str, ranked: Sequence[Candidate], evidence: Sequence[Evidence]) -> list[Candidate]:
        return across(question, ranked, evidence, self.family, self.value)


def cited(t: Turn, c: Choice) -> list[Candidate]:
    """answer_rule.cited under the choice's rule, with the passage variant between the lead and the name
    rule's fall-through (main's rule: no step at all)."""
    return answer_rule.cited(t, c.rule, Across(c.family, c.value) if c.family else None)


def select(figs: Mapping[str, Mapping[Choice, Figures]], sets: Sequence[str], choices: Sequence[Choice]) -> Choice:
    """bench/answer_rule.select's criterion; ties go to the smaller passage constant, then as there."""
    safe = [c for c in choices if all(figs[s][c].abstained == figs[s][c].abstain for s in sets)]
    if not safe:
        raise Infeasible(f"no choice abstains on every abstain question of {sets}")

    def key(c: Choice) -> tuple[Any, ...]:
        rate = round(sum(figs[s][c].grounded_rate for s in sets) / len(sets), 6)
        return rate, -abs(c.value), c.rule.simplicity(), c.rule

    return max(safe, key=key)


def family_protocol(turns: Mapping[str, Sequence[Turn]], rules: Sequence[Rule], family: str) -> dict[str, Any]:
    values = (0.0, *FAMILIES[family]) if family else (0.0,)
    choices = [Choice(family if v else "", v, r) for v in values for r in rules]
    sets = list(turns)
    figs = {s: {c: tally(turns[s], lambda t, c=c: cited(t, c)) for c in choices} for s in sets}
    tuned, by_set = held_out(sets, lambda train: select(figs, train, choices))
    out: dict[str, Any] = {"tuned_on_all": tuned.label(), "sets": {}}
    for s in sets:
        f = figs[s][by_set[s]]
        out["sets"][s] = {
            "held_out_choice": by_set[s].label(),
            "grounded": f"{f.grounded}/{f.answerable}",
            "grounded_single": round(f.grounded_rate, 4),
            "answered": f"{f.answered}/{f.answerable}",
            "abstain_kept": f"{f.abstained}/{f.abstain}",
            "answered_abstain_questions": list(f.answered_abstain),
        }
    return out


def main() -> None:
    parser = options(__doc__ or "", ("held_out",))
    parser.add_argument("--families", nargs="+", choices=tuple(FAMILIES), default=None)
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    turns = load_turns(args)
    rules = [r for r in grid() if r.top_only or r.weights.off]
    report: dict[str, Any] = {
        "benchmark": "sentence choice across passages (the passage's retrieval evidence), held out",
        "variant": args.variant,
        "families": {k: list(v) for k, v in FAMILIES.items()},
        "results": {},
    }
    for family in ("", *(args.families or FAMILIES)):
        name = family or "main"
        report["results"][name] = family_protocol(turns, rules, family)
        answer_rule._READ.clear()
        rows = report["results"][name]["sets"]
        print(
            name, {s: (v["grounded"], v["abstain_kept"], v["held_out_choice"].split(",")[0]) for s, v in rows.items()}
        )
    base = report["results"]["main"]["sets"]
    for res in report["results"].values():
        res["against_main"] = {
            s: {
                "grounded": int(v["grounded"].split("/")[0]) - int(base[s]["grounded"].split("/")[0]),
                "new_answered_abstain": sorted(
                    set(v["answered_abstain_questions"]) - set(base[s]["answered_abstain_questions"])
                ),
            }
            for s, v in res["sets"].items()
        }
    out = write_report(report, args, "answer-passages", started, load_start)
    print(f"written {out}")


if __name__ == "__main__":
    main()
