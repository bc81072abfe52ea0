#!/usr/bin/env python3
"""A learned overlap reader for the extractive model, leave one set out (issue 23 items 2 and 4).

query.reader scores each candidate sentence as `bias + weights . features` (meaning, the best cosine to
one sentence of the question, word and focus coverage, the passage's rank, the question kind against the
sentence's form, the focus as subject, the meaning gap to the closest sentence). For each evaluation set,
the weights are learned on the other sets' recorded first turns (bench/answer_turns.py) by an L2-regularised
logistic regression (Newton steps, deterministic): a sentence holding part of a gold quote is a positive,
every other candidate of an answerable question and every candidate of an abstain question a negative, each
question's positives and negatives weighing one each. The threshold and `min_meaning` are then chosen on the
same training sets as bench/answer_rule.py chooses its constants: every training abstain question
(unanswerable or denied) abstains, then the best mean single-search grounded rate, ties to the stricter
choice. The replay is the model's own code (query.extractive.reader_rank, lead_to_answers, named_first,
choose), and `--final` runs `ragsync eval`'s harness (loop of up to 3 searches, the four citation checks,
permissions, leaks) per set under the held-out reader, the reader learned on all sets ("tuned"), and the
model's current defaults ("current").

    python3 bench/answer_reader.py --variant ci [--final]   # -> bench/results/answer-reader-ci.json

Needs each set's home (eval/<set>/run.sh [--ci]); turns are cached in eval/<set>/build/<variant>/.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from answer_turns import (  # noqa: E402
    Figures,
    Infeasible,
    Turn,
    evaluated,
    held_out_per_set,
    load_turns,
    options,
    tally,
    write_report,
)
from answer_turns import by_type as by_type_of  # noqa: E402
from loo_harness import held_out, run_final  # noqa: E402

from query.extractive import (  # noqa: E402
    READINGS,
    Candidate,
    ExtractiveModel,
    choose,
    lead_to_answers,
    named_first,
    reader_rank,
    reread,
)
from query.reader import FEATURES, ReaderWeights, features, question_context  # noqa: E402
from query.sentences import content_terms  # noqa: E402

THRESHOLDS = tuple(round(-4.0 + 0.1 * i, 1) for i in range(81))
MEANINGS = (0.3, 0.35, 0.4, 0.45)
L2 = 1.0
"""The regulariser on the standardised weights (a design constant: about one question's weight)."""


@dataclass(frozen=True, order=True)
class Choice:
    """A reader (weights learned on some sets) with its threshold and meaning gate."""

    threshold: float
    min_meaning: float
    weights: tuple[float, ...]
    bias: float
    decide_only: bool = False
    """The reader decides whether the best sentence of the current model (its base score and readings) answers,
    and quotes nothing of its own choosing (a lever; the model's code reorders by the reader)."""

    @property
    def reader(self) -> ReaderWeights:
        return ReaderWeights(self.weights, self.bias, self.threshold)

    def label(self) -> str:
        w = ", ".join(f"{n} {v:+.2f}" for n, v in zip(FEATURES, self.weights, strict=True) if v)
        mode = ", decides only" if self.decide_only else ""
        return f"threshold {self.threshold}, meaning>={self.min_meaning}{mode}, bias {self.bias:+.2f}, {w}"


def _whole(t: Turn) -> list[frozenset[str]]:
    return [content_terms(f"{ev.title} {ev.heading} {ev.text}") for ev in t.evidence]


def training_rows(turns: Sequence[Turn], by_passage: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, labels, sample weights) over every candidate sentence of `turns`; a positive is a sentence
    holding part of a gold quote (`by_passage`: any sentence of a gold passage)."""
    xs: list[tuple[float, ...]] = []
    ys: list[float] = []
    ws: list[float] = []
    for t in turns:
        if t.read_as is None or not t.candidates:
            continue
        kinds, focus = question_context(t.read_as, _whole(t))
        rows = features(t.candidates, len(t.evidence), kinds, focus)
        labels = [0.0 if t.abstain else float(s.gold_passage if by_passage else s.gold_sentence) for s in t.sentences]
        pos = sum(labels)
        neg = len(labels) - pos
        for row, y in zip(rows, labels, strict=True):
            xs.append(row)
            ys.append(y)
            ws.append(1.0 / pos if y else 1.0 / neg)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys), np.asarray(ws)


def fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, mask: Sequence[bool]) -> tuple[tuple[float, ...], float]:
    """L2-regularised logistic regression by Newton steps on standardised features (those `mask` keeps);
    returned as raw weights (0 for a dropped feature) and bias, so the score needs no standardising."""
    keep = np.asarray(mask, dtype=bool)
    xk = x[:, keep]
    mu, sd = xk.mean(axis=0), xk.std(axis=0) + 1e-9
    z = np.hstack([(xk - mu) / sd, np.ones((len(xk), 1))])
    beta = np.zeros(z.shape[1])
    reg = np.full(z.shape[1], L2)
    reg[-1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(z @ beta)))
        grad = z.T @ (w * (p - y)) + reg * beta
        hess = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    raw = beta[:-1] / sd
    bias = float(beta[-1] - (raw * mu).sum())
    full = np.zeros(len(mask))
    full[keep] = raw
    return tuple(round(float(v), 4) for v in full), round(bias, 4)


def fit_listwise(turns: Sequence[Turn], mask: Sequence[bool], steps: int = 400) -> tuple[tuple[float, ...], float]:
    """The same features fitted to pick the gold sentence among each answerable question's candidates: a
    conditional logit (softmax over a question's candidates; the positives' share is the likelihood), L2 on
    standardised weights, plain gradient steps (deterministic). No bias: a softmax cannot see one, so the
    threshold is chosen on the scores' own scale."""
    keep = np.asarray(mask, dtype=bool)
    blocks: list[tuple[np.ndarray, np.ndarray]] = []
    for t in turns:
        if t.abstain or t.read_as is None or not t.candidates:
            continue
        y = np.asarray([float(x.gold_sentence) for x in t.sentences])
        if y.sum() == 0 or y.sum() == len(y):
            continue
        kinds, focus = question_context(t.read_as, _whole(t))
        blocks.append((np.asarray(features(t.candidates, len(t.evidence), kinds, focus))[:, keep], y))
    x = np.vstack([b for b, _ in blocks])
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    zs = [((b - mu) / sd, y) for b, y in blocks]
    beta = np.zeros(x.shape[1])
    for _ in range(steps):
        grad = L2 * beta
        for z, y in zs:
            s = z @ beta
            e = np.exp(s - s.max())
            p = e / e.sum()
            r = e * y / (e * y).sum()
            grad += z.T @ (p - r)
        beta -= 0.5 * grad / len(zs)
    raw = beta / sd
    full = np.zeros(len(mask))
    full[keep] = raw
    return tuple(round(float(v), 4) for v in full), 0.0


_RANKED: dict[tuple[str, str, tuple[float, ...], float, bool], tuple[list[Candidate], bool]] = {}


def ranked(t: Turn, reader: ReaderWeights, decide_only: bool = False) -> tuple[list[Candidate], bool]:
    """The turn's candidates as the model with this reader ranks them, and whether the best one's passage
    names the question's names (query.extractive.answer: otherwise it abstains). `decide_only`: in the
    current model's order (base score, lead, names first, readings), each scored by the reader."""
    key = (t.set, t.id, reader.weights, reader.bias, decide_only)
    if key not in _RANKED:
        assert t.read_as is not None
        scored = reader_rank(t.read_as, t.candidates, t.evidence, reader)
        if decide_only:
            by_pos = {(c.order, c.index): c.score for c in scored}
            base = lead_to_answers(t.candidates, t.evidence)
            first = named_first(t.read_as, base, t.evidence)
            order = reread(t.read_as, first if first is not None else base, t.evidence, READINGS)
            order = [replace(c, score=by_pos[(c.order, c.index)]) for c in order]
        else:
            order = lead_to_answers(scored, t.evidence)
            first = named_first(t.read_as, order, t.evidence)
            order = first if first is not None else order
        _RANKED[key] = (order, first is not None)
    return _RANKED[key]


def cited(t: Turn, c: Choice) -> list[Candidate]:
    """What the model with the choice's reader quotes on the turn (nothing: it abstains)."""
    if t.read_as is None or not t.candidates:
        return []
    order, named = ranked(t, c.reader, c.decide_only)
    return choose(order, c.min_meaning, c.threshold, 0.0) if named else []


def figures(turns: Sequence[Turn], c: Choice) -> Figures:
    return tally(turns, lambda t: cited(t, c))


@dataclass(frozen=True)
class Variant:
    """How a reader is learned and used (the design; each measured held out)."""

    mask: tuple[bool, ...] = (True,) * len(FEATURES)
    by_passage: bool = False
    decide_only: bool = False
    listwise: bool = False


def learn(turns: Mapping[str, Sequence[Turn]], train: Sequence[str], v: Variant) -> Choice:
    """Weights learned on `train`, then the threshold and meaning gate chosen there."""
    if v.listwise:
        weights, bias = fit_listwise([t for s in train for t in turns[s]], v.mask)
        thresholds = _scale(turns, train, ReaderWeights(weights, bias, 0.0), v.decide_only)
    else:
        x, y, w = training_rows([t for s in train for t in turns[s]], v.by_passage)
        weights, bias = fit(x, y, w, v.mask)
        thresholds = THRESHOLDS
    best: tuple[Any, ...] | None = None
    for meaning in MEANINGS:
        for threshold in thresholds:
            c = Choice(threshold, meaning, weights, bias, v.decide_only)
            figs = [figures(turns[s], c) for s in train]
            if any(f.abstained != f.abstain for f in figs):
                continue
            key = (round(sum(f.grounded_rate for f in figs) / len(figs), 6), threshold, meaning)
            if best is None or key > best[0]:
                best = (key, c)
    if best is None:
        raise Infeasible(f"no threshold abstains on every abstain question of {list(train)}")
    chosen: Choice = best[1]
    return chosen


def _scale(
    turns: Mapping[str, Sequence[Turn]], train: Sequence[str], r: ReaderWeights, decide: bool
) -> tuple[float, ...]:
    """Thresholds on a listwise reader's own scale: every percentile of the training questions' best scores."""
    tops = [ranked(t, r, decide)[0][0].score for s in train for t in turns[s] if t.read_as is not None and t.candidates]
    return tuple(sorted({round(float(q), 3) for q in np.percentile(tops, np.arange(0, 101))}))


def by_type(turns: Sequence[Turn], c: Choice) -> dict[str, Any]:
    return by_type_of(turns, lambda some: figures(some, c))


def protocol(turns: Mapping[str, Sequence[Turn]], v: Variant) -> dict[str, Any]:
    sets = list(turns)
    tuned, held = held_out(sets, lambda train: learn(turns, train, v))
    out: dict[str, Any] = {"tuned_on_all": tuned.label(), "tuned": tuned, "sets": {}}
    for s in sets:
        out["sets"][s] = {
            "held_out_reader": held[s].label(),
            "held_out_choice": held[s],
            "held_out": figures(turns[s], held[s]).as_dict(),
            "tuned": figures(turns[s], tuned).as_dict(),
            "held_out_by_type": by_type(turns[s], held[s]),
        }
    return out


def final(variant: str, sets: Sequence[str], homes: Path | None, chosen: Mapping[str, Mapping[str, Any]]) -> Any:
    """`ragsync eval`'s harness per set: the model with each role's reader, or the current defaults (None)."""

    def evaluate(components: Any, ctx: Any, questions: Any, c: Choice | str) -> dict[str, Any]:
        if isinstance(c, Choice):
            model = ExtractiveModel(ctx.model.embedder, min_meaning=c.min_meaning, reader=c.reader)
        else:
            model = ExtractiveModel(ctx.model.embedder, reader=None)
        return evaluated(ctx, questions, model, "miss_stages")

    return run_final(
        variant,
        sets,
        homes,
        chosen,
        secret="answer-reader-",
        evaluate=evaluate,
        describe=lambda c: {"reader": c.label() if isinstance(c, Choice) else c},
        shown="loop",
    )


def main() -> None:
    parser = options(__doc__ or "", ("held_out", "tuned", "current"))
    parser.add_argument("--listwise", action="store_true", help="the conditional logit as the design")
    parser.add_argument("--no-levers", action="store_true", help="skip the per-feature levers")
    args = parser.parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()
    turns = load_turns(args)
    proto = protocol(turns, Variant(listwise=args.listwise))
    variants = {
        f"without {name}": Variant(mask=tuple(j != i for j in range(len(FEATURES)))) for i, name in enumerate(FEATURES)
    }
    variants["labels: every sentence of a gold passage"] = Variant(by_passage=True)
    variants["the reader decides only (the current model chooses the quote)"] = Variant(
        decide_only=True, listwise=args.listwise
    )
    variants["pointwise logistic" if args.listwise else "listwise (conditional logit)"] = Variant(
        listwise=not args.listwise
    )
    if args.no_levers:
        variants = {k: v for k, v in variants.items() if "decides only" in k}
    levers: dict[str, Any] = {}
    for name, variant in variants.items():
        try:
            p = protocol(turns, variant)
        except Infeasible as e:
            levers[name] = {"infeasible": str(e)}
            continue
        levers[name] = held_out_per_set(p, "reader")
        print(
            f"{name}: "
            + ", ".join(
                f"{s} {v['held_out']['grounded_single']} ({v['held_out']['abstained']})" for s, v in p["sets"].items()
            )
        )
    report: dict[str, Any] = {
        "benchmark": "a learned overlap reader (query.reader) chosen leave one set out (single search replay)",
        "variant": args.variant,
        "features": list(FEATURES),
        "selection": "weights: logistic regression on the training sets' candidate sentences (gold quote: "
        "positive), L2 1.0 on standardised features; threshold and min_meaning: every training abstain "
        "question abstains, max mean single-search grounded rate, ties to the stricter",
        "tuned_on_all": proto["tuned_on_all"],
        "tuned_reader": {"weights": list(proto["tuned"].weights), "bias": proto["tuned"].bias,
                         "threshold": proto["tuned"].threshold, "min_meaning": proto["tuned"].min_meaning},
        "sets": {s: {k: v for k, v in d.items() if k != "held_out_choice"} for s, d in proto["sets"].items()},
        "held_out_levers": levers,
    }  # fmt: skip
    for s, v in report["sets"].items():
        print(f"{s:16s} held out {v['held_out']} | tuned {v['tuned']['grounded_single']}  [{v['held_out_reader']}]")
    if args.final:
        roles = {
            "held_out": lambda s: proto["sets"][s]["held_out_choice"],
            "tuned": lambda s: proto["tuned"],
            "current": lambda s: "current defaults",
        }
        chosen = {s: {role: roles[role](s) for role in args.final_roles} for s in args.sets}
        report["final"] = final(args.variant, args.sets, args.homes, chosen)
    out = write_report(report, args, "answer-reader", started, load_start)
    print(f"written {out}")


if __name__ == "__main__":
    main()
