#!/usr/bin/env python3
"""A sentence pair scorer trained on weak supervision, as the answer gate, leave one set out (issue 23).

The answer step's largest class of misses held out (bench/answer_misses.py) is the score gate: the model
abstains with the gold sentence, or another sentence of the gold passage, as its best candidate, because
the threshold that keeps every training abstain question abstaining sits above it. This measures whether a
scorer of "does this sentence answer this query", trained on documentation no evaluation set uses, tells
those apart from the abstain questions' best sentences, where the hand-set score cannot.

* **pairs**: rerank9's heading -> passage pairs (bench/weak_pairs.py, 15 Debian documentation packages,
  bench/weak_manifest.json). The query is the heading (with its context when generic); the positive is the
  first quotable sentence of the passage under it (what a manual says first about its heading); the
  negatives are the first sentences of up to four other headings of the same page (else the same package):
  sentences on the same topic that do not answer that heading, as a denied question's readable neighbours.
* **scorers**, both on MiniLM's vectors (query through `embed_query`, sentence as the model embeds it):
  `diag`, a logistic regression on the elementwise product q * s (a re-weighted cosine), and `lowrank`,
  a * cos(q, s) + (U q) . (V s) + b with U, V rank 16, trained by Adam on the balanced logistic loss. Pages
  are split by a hash (one in three held out) to report the scorer's own AUC against the plain cosine.
* **use**: the scorer's standardised logit z of the model's best sentence either lifts its score
  (`beta` 0 / 0.1 / 0.2 / 0.3, as query.answer_form's readings lift it: the best sentence only) or vetoes the
  answer (z below -1.5 / -1 / -0.5 / 0), chosen leave one set out with the answer rule's constants
  (bench/answer_rule.py's selection: every training abstain question abstains, then the best mean
  single-search grounded rate; ties to no scorer).

    python3 bench/answer_pair_gate.py pairs --pairs /var/tmp/weak/pairs.jsonl --out /var/tmp/weak/sentences.npz
    python3 bench/answer_pair_gate.py train --vectors /var/tmp/weak/sentences.npz --out /var/tmp/weak/scorer.npz
    python3 bench/answer_pair_gate.py eval --scorer /var/tmp/weak/scorer.npz --variant ci
    # -> bench/results/answer-pair-gate-ci.json (without --variant: the full sets, answer-pair-gate.json)

Needs each set's home and recorded turns (bench/answer_turns.py) for `eval`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

Option = tuple[Any, float, float | None]
BETAS = (0.0, 0.1, 0.2, 0.3)
VETOES = (-1.5, -1.0, -0.5, 0.0)
RANK = 16


def _embedder() -> Any:
    from indexer.embedder import FastEmbedder

    return FastEmbedder(Path(os.environ["RAGSYNC_EMBED_MODEL_PATH"]))


def _unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-12), dtype=np.float32)


def pairs(path: Path, out: Path) -> None:
    from query.sentences import is_pointer, sentences

    items = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        quotable = [
            s for s in sentences(r["body"]) if not is_pointer(s) and len(s.split()) >= 4 and not s.startswith("|")
        ]
        if quotable:
            items.append((r["package"], r["page"], r["query"], quotable[0]))
    e = _embedder()
    q = np.vstack([np.asarray(e.embed_query(i[2]), dtype=np.float32).reshape(1, -1) for i in items])
    s = np.asarray(e.embed([i[3] for i in items]), dtype=np.float32)
    np.savez(out, q=_unit(q), s=_unit(s), package=[i[0] for i in items], page=[i[1] for i in items])
    print(f"{len(items)} heading -> first sentence pairs -> {out}")


def _training(v: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(query index, sentence index, label, held-out page) over the pairs and their in-page negatives."""
    pages, packages = list(v["page"]), list(v["package"])
    by_page: dict[str, list[int]] = defaultdict(list)
    by_package: dict[str, list[int]] = defaultdict(list)
    for i, (page, package) in enumerate(zip(pages, packages, strict=True)):
        by_page[page].append(i)
        by_package[package].append(i)
    rng = np.random.default_rng(0)
    rows: list[tuple[int, int, float]] = []
    for i, (page, package) in enumerate(zip(pages, packages, strict=True)):
        rows.append((i, i, 1.0))
        near = [j for j in by_page[page] if j != i]
        pool = [j for j in by_package[package] if j != i and j not in near]
        if len(near) < 4 and pool:
            near += [int(j) for j in rng.choice(pool, size=min(4 - len(near), len(pool)), replace=False)]
        rows += [(i, int(j), 0.0) for j in rng.permutation(near)[:4]]
    a = np.asarray(rows)
    test = np.asarray([int(hashlib.sha1(p.encode()).hexdigest(), 16) % 3 == 0 for p in pages])
    return a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2], test[a[:, 0].astype(int)]


def auc(score: np.ndarray, y: np.ndarray) -> float:
    order = np.argsort(score)
    rank = np.empty(len(score))
    rank[order] = np.arange(len(score))
    pos = y == 1
    return float((rank[pos].mean() - (pos.sum() - 1) / 2) / (~pos).sum())


def _adam(params: list[np.ndarray], grad: Callable[[], list[np.ndarray]], steps: int, lr: float) -> None:
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for it in range(1, steps + 1):
        for k, g in enumerate(grad()):
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            params[k] -= lr * (m[k] / (1 - 0.9**it)) / (np.sqrt(v[k] / (1 - 0.999**it)) + 1e-8)


def fit(kind: str, q: np.ndarray, s: np.ndarray, y: np.ndarray, steps: int = 600) -> dict[str, np.ndarray]:
    """The scorer's parameters on the balanced logistic loss (a fixed seed: deterministic)."""
    sw = np.where(y == 1, 0.5 / y.sum(), 0.5 / (1 - y).sum())
    cos = (q * s).sum(1)
    if kind == "diag":
        w, b = np.ones(q.shape[1]), np.zeros(1)

        def grad_diag() -> list[np.ndarray]:
            g = (1 / (1 + np.exp(-((q * s) @ w + b[0]))) - y) * sw
            return [(q * s).T @ g + 1e-4 * w, np.array([g.sum()])]

        _adam([w, b], grad_diag, steps, 0.05)
        return {"w": w, "b": b}
    rng = np.random.default_rng(0)
    u, v, a, b = (
        rng.normal(0, 0.01, (RANK, q.shape[1])),
        rng.normal(0, 0.01, (RANK, q.shape[1])),
        np.ones(1),
        np.zeros(1),
    )

    def grad_lowrank() -> list[np.ndarray]:
        uq, vs = q @ u.T, s @ v.T
        g = (1 / (1 + np.exp(-(a[0] * cos + (uq * vs).sum(1) + b[0]))) - y) * sw
        return [
            (g[:, None] * vs).T @ q + 1e-3 * u,
            (g[:, None] * uq).T @ s + 1e-3 * v,
            np.array([g @ cos]),
            np.array([g.sum()]),
        ]

    _adam([u, v, a, b], grad_lowrank, steps, 0.02)
    return {"u": u, "v": v, "a": a, "b": b}


def logit(p: dict[str, np.ndarray], q: np.ndarray, s: np.ndarray) -> np.ndarray:
    if "w" in p:
        return np.asarray((q * s) @ p["w"] + p["b"][0])
    return np.asarray(p["a"][0] * (q * s).sum(-1) + ((q @ p["u"].T) * (s @ p["v"].T)).sum(-1) + p["b"][0])


def train(vectors: Path, out: Path, report: Path) -> None:
    load_start = os.getloadavg()
    v = np.load(vectors)
    qi, si, y, test = _training(v)
    q, s = v["q"][qi], v["s"][si]
    figures: dict[str, Any] = {
        "pairs": len(v["q"]),
        "rows": len(y),
        "cosine_auc_held_out_pages": auc((q * s).sum(1)[test], y[test]),
    }
    saved: dict[str, np.ndarray] = {}
    for kind in ("diag", "lowrank"):
        p = fit(kind, q[~test], s[~test], y[~test])
        figures[f"{kind}_auc_held_out_pages"] = auc(logit(p, q[test], s[test]), y[test])
        figures[f"{kind}_auc_training_pages"] = auc(logit(p, q[~test], s[~test]), y[~test])
        for k, val in fit(kind, q, s, y).items():  # the scorer used: trained on every page
            saved[f"{kind}_{k}"] = val
        print(kind, {k: round(x, 3) for k, x in figures.items() if isinstance(x, float)})
    np.savez(out, **saved)
    figures |= {"loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    report.write_text(json.dumps(figures, indent=2) + "\n")


def _scorer(path: Path, kind: str) -> dict[str, np.ndarray]:
    z = np.load(path)
    return {k.split("_", 1)[1]: z[k] for k in z.files if k.startswith(kind + "_")}


def evaluate(args: argparse.Namespace) -> None:
    import answer_rule
    from answer_misses import _what
    from answer_turns import load_turns, tally, write_report
    from loo_harness import held_out

    from query.extractive import choose
    from query.sentences import embedding_text

    started, load_start = time.perf_counter(), os.getloadavg()
    turns = load_turns(args)
    rules = [
        r
        for r in answer_rule.grid(form=(0.3, 0.5), subject=(0.15, 0.3), min_meaning=(0.4, 0.45))
        if r.top_only and r.lead
    ]
    e = _embedder()
    best: dict[tuple[str, str], tuple[Any, np.ndarray, np.ndarray]] = {}
    for s, ts in turns.items():  # the best sentence is the same under every rule of the grid (top only, lead)
        for t in ts:
            if t.read_as is None:
                continue
            ranked, named = answer_rule._read(t, rules[0].weights, True, True)
            if ranked and named:
                text = embedding_text(ranked[0].evidence.heading, ranked[0].sentence)
                q = _unit(np.asarray(e.embed_query(t.read_as), dtype=np.float32).reshape(-1))
                best[(s, t.id)] = (ranked[0], q, _unit(np.asarray(e.embed([text]), dtype=np.float32).reshape(-1)))
    report: dict[str, Any] = {
        "benchmark": "a weak-supervision pair scorer as the answer gate or lift, leave one set out "
        "(single-search replay)",
        "variant": args.variant,
        "scorers": {},
    }
    for kind in ("diag", "lowrank"):
        p = _scorer(args.scorer, kind)
        raw = {k: float(logit(p, q, sv)) for k, (_, q, sv) in best.items()}
        mu, sd = float(np.mean(list(raw.values()))), float(np.std(list(raw.values())) + 1e-9)
        z = {k: (x - mu) / sd for k, x in raw.items()}

        def cited(t: Any, o: Option, z: dict[tuple[str, str], float] = z) -> list[Any]:
            rule, beta, veto = o
            if t.read_as is None:
                return []
            ranked, named = answer_rule._read(t, rule.weights, rule.lead, rule.names and rule.fall)
            if not ranked or not named:
                return []
            zz = z.get((t.set, t.id), 0.0)
            if veto is not None and zz < veto:
                return []
            if beta:
                ranked = [replace(ranked[0], score=ranked[0].score + beta * zz), *ranked[1:]]
            return choose(ranked, rule.min_meaning, rule.min_score, rule.min_focus)

        options: list[Option] = [(r, b, None) for r in rules for b in BETAS] + [
            (r, 0.0, v) for r in rules for v in VETOES
        ]
        figs = {s: {o: tally(ts, lambda t, o=o: cited(t, o)) for o in options} for s, ts in turns.items()}

        def select(train: Sequence[str], options: list[Option] = options, figs: Any = figs) -> Option:
            safe = [o for o in options if all(figs[s][o].abstained == figs[s][o].abstain for s in train)]
            return max(
                safe,
                key=lambda o: (
                    round(sum(figs[s][o].grounded_rate for s in train) / len(train), 6),
                    o[1] == 0 and o[2] is None,
                    o[0].simplicity(),
                    o[0],
                ),
            )

        tuned, held = held_out(list(turns), select)
        band: dict[str, list[float]] = defaultdict(list)
        for (s, qid), (c, _, _) in best.items():
            t = next(t for t in turns[s] if t.id == qid)
            if 1.5 <= c.score < 2.4:
                label = "abstain question" if t.abstain else f"answerable, best is {_what(c, t)}"
                band[label].append(round(z[(s, qid)], 2))
        label = lambda o: f"{o[0].label()}; lift {o[1]}; veto {o[2]}"  # noqa: E731
        report["scorers"][kind] = {
            "tuned_on_all": label(tuned),
            "sets": {
                s: {
                    "held_out_choice": label(held[s]),
                    "held_out": figs[s][held[s]].as_dict(),
                    "tuned": figs[s][tuned].as_dict(),
                    "rule_alone_held_out": figs[s][
                        select([o for o in turns if o != s], [o for o in options if o[1] == 0 and o[2] is None])
                    ].as_dict(),
                }
                for s in turns
            },
            "z_of_best_sentence_scoring_1.5_to_2.4": {k: sorted(v) for k, v in band.items()},
        }
        for s, v in report["scorers"][kind]["sets"].items():
            h, alone = v["held_out"], v["rule_alone_held_out"]
            print(
                f"{kind} {s:16s} held out {h['grounded_single']} {h['abstained']} rule alone {alone['grounded_single']}"
            )
    print(f"written {write_report(report, args, 'answer-pair-gate', started, load_start)}")


def main() -> None:
    from answer_turns import options

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pairs")
    p.add_argument("--pairs", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("train")
    t.add_argument("--vectors", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--report", type=Path, default=ROOT / "bench" / "results" / "answer-pair-scorer-train.json")
    sub.add_parser("eval", add_help=False)
    args, rest = parser.parse_known_args()
    if args.cmd == "pairs":
        pairs(args.pairs, args.out)
    elif args.cmd == "train":
        train(args.vectors, args.out, args.report)
    else:
        ev = options(__doc__ or "", ("held_out",))
        ev.add_argument("--scorer", type=Path, required=True)
        evaluate(ev.parse_args(rest))


if __name__ == "__main__":
    main()
