#!/usr/bin/env python3
"""Why an answerable question whose gold passage is in the evidence's top 10 is not grounded, held out
(issue 23): the answer step's misses by class, per set, under the answer rule chosen leave one set out.

The answer rule's constants are chosen exactly as bench/answer_rule.py chooses them (its `protocol`, the
design grid: the readings lift the best sentence only); each set is read under the rule chosen on the
other sets ("held out") and under the rule chosen on all ("tuned"). Every answerable question's recorded
first turn (bench/answer_turns.py: one permission-filtered search, the model's own candidates) is put in
one class:

    grounded                 the quote is from a gold passage
    gold not in top 10       retrieval's miss, not the answer step's (left out of the answer step's misses)
    abstain: unmentioned name     the question names something no passage mentions (query.extractive.reading)
    abstain: name rule            no readable passage mentions the question's names (query.extractive.named_first)
    abstain: meaning gate         the best sentence's cosine is below `min_meaning`
    abstain: score gate           the best sentence's score (after the readings) is below `min_score`
    wrong sentence                it answered, and no quote is from a gold passage

`best_sentence_from_gold_passage` counts the answerable questions whose best sentence (before any gate) is from
a gold passage: what a perfect gate on the current sentence choice would ground. The two abstain gates and
the wrong sentence are split by what the best sentence is: a gold sentence
(part of a gold quote), another sentence of a gold passage, or a sentence of another passage; and by
where the best gold sentence ranks among the candidates. The four citation checks are not replayed:
the extractive model quotes whole sentences of retrieved passages, and no `ragsync eval` report of the
five sets holds a check failure (bench/results/eval-<set>[-ci].json: every unanswered question's reason
is `model_abstained`); `--evals` counts them from those reports.

    python3 bench/answer_misses.py --variant ci      # -> bench/results/answer-misses-ci.json
    python3 bench/answer_misses.py                   # full sets -> bench/results/answer-misses.json
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from answer_rule import Rule, _read, cited, grid, protocol  # noqa: E402
from answer_turns import Turn, load_turns, options, write_report  # noqa: E402

TOP = 10


def _gold_in_top(t: Turn) -> bool:
    gold = {s.passage_id for s in t.sentences if s.gold_passage}
    return any(ev.passage_id in gold for ev in t.evidence[:TOP])


def _what(c: Any, t: Turn) -> str:
    """What a candidate is: a gold sentence, another sentence of a gold passage, or another passage's."""
    row = next((s for s in t.sentences if s.passage_id == c.evidence.passage_id and s.sentence == c.sentence), None)
    if row is None:
        return "other passage"
    return "gold sentence" if row.gold_sentence else "gold passage" if row.gold_passage else "other passage"


def _gold_rank(ranked: Sequence[Any], t: Turn) -> int | None:
    """1-based rank of the best gold sentence (else the best sentence of a gold passage) among the candidates."""
    for want in ("gold sentence", "gold passage"):
        for i, c in enumerate(ranked):
            if _what(c, t) == want:
                return i + 1
    return None


def _band(rank: int | None) -> str:
    return "none" if rank is None else "1" if rank == 1 else "2-3" if rank <= 3 else "4+"


def classify(t: Turn, rule: Rule) -> dict[str, Any]:
    """The class of an answerable turn under `rule`, with the best sentence's figures."""
    if not _gold_in_top(t):
        return {"class": "gold not in top 10"}
    quoted = cited(t, rule)
    gold = {s.passage_id for s in t.sentences if s.gold_passage}
    if quoted and any(c.evidence.passage_id in gold for c in quoted):
        return {"class": "grounded"}
    if t.read_as is None:
        return {"class": "abstain: unmentioned name"}
    ranked, named = _read(t, rule.weights, rule.lead, rule.names and rule.fall)
    if not ranked:
        return {"class": "abstain: no candidate"}
    best = ranked[0]
    info = {
        "best": _what(best, t),
        "best_score": round(best.score, 3),
        "best_meaning": round(best.meaning, 3),
        "gold_rank": _gold_rank(ranked, t),
    }
    if quoted:
        return {"class": "wrong sentence"} | info
    if rule.names and not named:
        return {"class": "abstain: name rule"} | info
    if best.meaning < rule.min_meaning:
        return {"class": "abstain: meaning gate"} | info
    return {"class": "abstain: score gate"} | info


def tally(turns: Sequence[Turn], rule: Rule) -> dict[str, Any]:
    answerable = [t for t in turns if not t.abstain]
    rows = {t.id: classify(t, rule) | {"type": t.type} for t in answerable}
    classes = Counter(r["class"] for r in rows.values())
    in_top = [r for r in rows.values() if r["class"] != "gold not in top 10"]
    misses = [r for r in in_top if r["class"] != "grounded"]
    detail = Counter(f"{r['class']} / best is {r['best']}" for r in misses if "best" in r)
    ranks = Counter(f"{r['class']} / gold sentence rank {_band(r['gold_rank'])}" for r in misses if "best" in r)
    by_type = Counter(f"{r['type']}: {r['class']}" for r in misses)
    ceiling = 0
    for t in answerable:  # a perfect gate on the current order: answer exactly when the best sentence is gold's
        ranked = _read(t, rule.weights, rule.lead, rule.names and rule.fall)[0] if t.read_as is not None else []
        ceiling += bool(ranked) and _what(ranked[0], t) != "other passage"
    return {
        "answerable": len(answerable),
        "best_sentence_from_gold_passage": ceiling,
        "gold_in_top10": len(in_top),
        "grounded": classes["grounded"],
        "answer_step_misses": len(misses),
        "classes": dict(classes.most_common()),
        "by_best_sentence": dict(detail.most_common()),
        "by_gold_rank": dict(ranks.most_common()),
        "by_type": dict(by_type.most_common()),
        "questions": rows,
    }


def eval_reasons(variant: str, sets: Sequence[str]) -> dict[str, Any]:
    """The loop's reasons for every unanswered or ungrounded answerable question in the committed eval reports."""
    out = {}
    for s in sets:
        path = ROOT / "bench" / "results" / f"eval-{s}{'-ci' if variant == 'ci' else ''}.json"
        if not path.is_file():
            continue
        report = json.loads(path.read_text())
        c = Counter(
            f"{r['stage']}: {r['loop'].get('reason') or 'answered, not grounded'}"
            for r in report["results"]
            if r["expect"] == "answer" and not r["loop"]["grounded"]
        )
        out[s] = dict(c.most_common())
    return out


def main() -> None:
    parser = options(__doc__ or "", ("held_out",))
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    turns = load_turns(args)
    rules = [r for r in grid() if r.top_only or r.weights.off]
    proto = protocol(turns, rules)
    report: dict[str, Any] = {
        "benchmark": "answer-step misses of answerable questions with the gold passage in the top 10, held out",
        "variant": args.variant,
        "tuned_on_all": proto["tuned_on_all"],
        "sets": {},
        "eval_reasons": eval_reasons(args.variant, args.sets),
    }
    for s in args.sets:
        held = proto["sets"][s]["held_out_choice"]
        report["sets"][s] = {
            "held_out_rule": held.label(),
            "held_out": tally(turns[s], held),
            "tuned": {k: v for k, v in tally(turns[s], proto["tuned"]).items() if k != "questions"},
        }
    out = write_report(report, args, "answer-misses", started, load_start)
    for s, v in report["sets"].items():
        h = v["held_out"]
        print(f"{s}: {h['grounded']}/{h['answerable']} grounded, gold in top 10 {h['gold_in_top10']}: {h['classes']}")
        print(f"   {h['by_best_sentence']}")
    print(f"written {out}")


if __name__ == "__main__":
    main()
