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
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from calibrate_answers import _Capture

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
