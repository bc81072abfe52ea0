"""Records, per question of one evaluation set, what the answering model reads on its first turn (one
permission-filtered search, the configured Retriever) and every quotable sentence's features, so that
answer rules (bench/answer_rule.py) can be replayed and chosen leave-one-set-out without searching or
embedding again.

Per question: its id, type, expectation and gold spans, the question as the model reads it
(query.extractive's `reading`: qualifiers set aside, None when a named thing is unmentioned), and
per candidate sentence (ExtractiveModel.candidates, no threshold): meaning, coverage, evidence order,
passage id, heading, the sentence, whether its passage is gold and whether the sentence holds part
of a gold quote. Cached beside the set's home (build/<variant>/answer-turns.pkl), rebuilt when the
home changes.

Also what the two scripts that replay the turns share (bench/answer_rule.py, bench/answer_reader.py):
their options and loading of the turns (`options`, `load_turns`), the tally of a choice over the
turns (`tally`, `Figures`, `by_type`), the held-out summary per set (leave_one_out.per_set), the
figures of a `--final` run (`evaluated`) and the report file (`write_report`).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibrate_answers import _Capture
from eval_homes import SETS, add_homes_option, embed_model_path, set_paths
from leave_one_out import per_set
from loo_harness import by_type_figures

from query.extractive import Candidate, ExtractiveModel
from query.ports import Evidence
from query.worker import QueryWorker, default_as_of
from ragsync.evaluation import load_questions
from ragsync.evaluation.metrics import matches_gold
from ragsync.evaluation.questions import GoldSpan
from ragsync.settings import Settings
from ragsync.wiring import build_embedded
from schemas._time import to_utc
from schemas.text import normalize


@dataclass(frozen=True)
class Sentence:
    order: int
    passage_id: str
    heading: str
    sentence: str
    meaning: float
    coverage: float
    gold_passage: bool
    gold_sentence: bool
    focus: float = 0.0


@dataclass(frozen=True)
class Turn:
    set: str
    id: str
    type: str
    abstain: bool
    question: str
    read_as: str | None  # None: a name the question is about is unmentioned (abstains whatever the rule)
    evidence: tuple[Evidence, ...]
    sentences: tuple[Sentence, ...]  # best first by the model's current score
    candidates: tuple[Candidate, ...] = ()  # the same, as the model ranks them before query.answer_form's readings


def _gold_sentence(doc_id: str, sentence: str, gold: tuple[GoldSpan, ...]) -> bool:
    """The sentence holds a gold quote, or a gold quote holds the sentence (a quote across sentences)."""
    s = normalize(sentence)
    for span in gold:
        q = normalize(span.quote)
        if span.doc_id == doc_id and q and (q in s or (len(s) > 20 and s in q)):
            return True
    return False


def collect(name: str, base: Path, home: Path, model_path: Path) -> list[Turn]:
    settings = Settings(home=home, embed_model_path=model_path, session_secret="answer-turns-" + "x" * 20)
    components = build_embedded(settings)
    try:
        worker = components.query_worker()
        model = worker.model
        assert isinstance(model, ExtractiveModel)
        model.asks = True  # record each question sentence's cosines too (query.reader's `ask`)
        if model.embedder is None:  # the coverage-only fallback would be recorded as if it were the model
            sys.exit(f"{name}: the embedder did not load (RAGSYNC_EMBED_MODEL_PATH?)")
        out: list[Turn] = []
        for q in load_questions(base / "questions.jsonl"):
            capture = _Capture()
            single = QueryWorker(worker.retriever, capture, "answer-turns", replace(worker.settings, max_searches=1))
            single.ask(q.principal, q.question, to_utc(q.as_of) if q.as_of is not None else default_as_of())
            evidence: tuple[Evidence, ...] = capture.turns[0].evidence if capture.turns else ()
            read_as = model.reading(q.question, evidence) if evidence else None
            rows: list[Sentence] = []
            # The model's candidates before query.answer_form's readings: the answer rule replays those.
            ranked = model.base_candidates(read_as, evidence) if read_as is not None else []
            if read_as is not None:
                for c in ranked:
                    doc_id = c.evidence.passage_id.split("@", 1)[0]
                    rows.append(
                        Sentence(
                            c.order,
                            c.evidence.passage_id,
                            c.evidence.heading,
                            c.sentence,
                            c.meaning,
                            c.coverage,
                            any(matches_gold(doc_id, c.evidence.text, span) for span in q.gold),
                            _gold_sentence(doc_id, c.sentence, tuple(q.gold)),
                            c.focus,
                        )
                    )
            out.append(
                Turn(
                    name, q.id, q.type, q.expect == "abstain", q.question, read_as, evidence, tuple(rows), tuple(ranked)
                )
            )
            print(f"\r{name}: {len(out)}", end="", file=sys.stderr)
        print(file=sys.stderr)
        return out
    finally:
        components.close()


def load_or_collect(name: str, base: Path, home: Path, model_path: Path, refresh: bool = False) -> list[Turn]:
    cache = base / "answer-turns.pkl"
    fresh = cache.is_file() and cache.stat().st_mtime > (home / "state.db").stat().st_mtime
    if not refresh and fresh and cache.stat().st_mtime > Path(__file__).stat().st_mtime:
        with cache.open("rb") as f:
            turns: list[Turn] = pickle.load(f)
        return turns
    turns = collect(name, base, home, model_path)
    with cache.open("wb") as f:
        pickle.dump(turns, f)
    return turns


# ---- what bench/answer_rule.py and bench/answer_reader.py share ---------------------------------

RESULTS = Path(__file__).resolve().parent / "results"


def options(description: str, roles: Sequence[str]) -> argparse.ArgumentParser:
    """The options both scripts take; `roles` are the choices a `--final` run can evaluate."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--variant", choices=("full", "ci"), default="full")
    parser.add_argument("--refresh", action="store_true", help="record the turns again")
    parser.add_argument("--final", action="store_true", help="then run the full evaluation under each choice")
    parser.add_argument("--final-roles", nargs="+", choices=tuple(roles), default=["held_out"])
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/<script>[-ci].json")
    add_homes_option(parser)
    return parser


def load_turns(args: argparse.Namespace) -> dict[str, list[Turn]]:
    """Each set's recorded first turns (recorded now if the home changed or `--refresh`)."""
    turns = {}
    for s in args.sets:
        base, home = set_paths(s, args.variant, args.homes)
        turns[s] = load_or_collect(s, base, home, embed_model_path(), args.refresh)
    return turns


@dataclass(frozen=True)
class Figures:
    answerable: int
    grounded: int
    answered: int  # answerable questions answered (grounded or not)
    abstain: int
    abstained: int
    answered_abstain: tuple[str, ...]  # the abstain questions answered: they must be none

    @property
    def grounded_rate(self) -> float:
        return self.grounded / self.answerable if self.answerable else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "grounded_single": round(self.grounded_rate, 4),
            "answered_single": round(self.answered / self.answerable, 4) if self.answerable else 0.0,
            "abstained": f"{self.abstained}/{self.abstain}",
            "answered_abstain_questions": list(self.answered_abstain),
        }


def tally(turns: Sequence[Turn], cited: Callable[[Turn], Sequence[Candidate]]) -> Figures:
    """A choice's single-search figures over `turns`, given what it cites for each (nothing: abstains)."""
    grounded = answered = abstained = 0
    wrong: list[str] = []
    for t in turns:
        quoted = cited(t)
        if t.abstain:
            if quoted:
                wrong.append(t.id)
            else:
                abstained += 1
            continue
        if quoted:
            answered += 1
            gold = {s.passage_id for s in t.sentences if s.gold_passage}
            grounded += any(c.evidence.passage_id in gold for c in quoted)
    n = sum(1 for t in turns if not t.abstain)
    return Figures(n, grounded, answered, len(turns) - n, abstained, tuple(wrong))


def by_type(turns: Sequence[Turn], figures: Callable[[Sequence[Turn]], Figures]) -> dict[str, Any]:
    """`figures` per question type of the answerable questions."""
    types = sorted({t.type for t in turns if not t.abstain})
    return {ty: figures([t for t in turns if t.type == ty]).as_dict() for ty in types}


class Infeasible(Exception):
    """No choice makes every training abstain question abstain."""


def held_out_per_set(protocol: Mapping[str, Any], choice: str) -> dict[str, dict[str, Any]]:
    """Each set's held-out choice (the protocol's `held_out_<choice>`) with all its held-out figures."""
    return per_set(protocol, choice, None)


def evaluated(ctx: Any, questions: Any, model: ExtractiveModel, *keep: str) -> dict[str, Any]:
    """`ragsync eval`'s harness with `model` answering: the summary, per type figures and the abstain
    rate (no ranking times: they are not this run's to measure), plus the report's `keep` entries."""
    from ranking import summary

    from ragsync.evaluation import Gates, run_eval

    report = run_eval(replace(ctx, model=model), questions, Gates(k=10))
    out: dict[str, Any] = summary(report, [0.0]) | {
        "by_type": by_type_figures(report, ("n", "fused", "grounded_loop", "grounded_single")),
        "abstain_rate": report["overall"]["loop"]["abstain_rate"],
    }
    out |= {k: report.get(k) for k in keep}
    for k in ("rank_ms_p50", "rank_ms_p95"):
        out.pop(k, None)
    return out


def write_report(
    report: dict[str, Any], args: argparse.Namespace, name: str, started: float, load_start: tuple[float, ...]
) -> Path:
    """The load averages at start and end and the elapsed time, into `--out` or bench/results/<name>[-ci].json."""
    report["loadavg_start"] = load_start
    report["loadavg_end"] = os.getloadavg()
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    out: Path = args.out or RESULTS / f"{name}{'-ci' if args.variant == 'ci' else ''}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    return out
