"""The learned overlap reader (query.reader) and how the extractive model uses it: its features are the
model's own cosines and readings, it reorders the candidates by its score, its threshold decides whether
the model answers, and the ask cosine reads each sentence of a longer question on its own. A bag-of-words
embedder stands in for MiniLM, so every cosine here is a word overlap."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import pytest

from query.extractive import Candidate, ExtractiveModel, reader_rank
from query.ports import Evidence
from query.reader import FEATURES, ReaderWeights, features

DIM = 256


class WordsEmbedder:
    """Unit vectors of hashed lowercase words: the cosine of two texts is their word overlap."""

    model_name = "words"
    dim = DIM
    cache = None

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(DIM, dtype=np.float32)
        for w in re.findall(r"[a-z]+", text.lower()):
            v[int(hashlib.sha1(w.encode()).hexdigest(), 16) % DIM] += 1.0
        n = float(np.linalg.norm(v))
        return v / n if n else v

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._one(text)


def _weights(**named: float) -> tuple[float, ...]:
    return tuple(named.get(f, 0.0) for f in FEATURES)


def _ev(pid: str, text: str, heading: str = "") -> Evidence:
    return Evidence(passage_id=pid, heading=heading, text=text, title="Manual")


def test_a_reader_needs_one_weight_per_feature() -> None:
    with pytest.raises(ValueError, match="weights"):
        ReaderWeights((1.0,), 0.0, 0.0)
    r = ReaderWeights(_weights(meaning=2.0, prior=1.0), -1.0, 0.5)
    assert r.score([0.5, 0, 0, 0, 1.0, 0, 0, 0]) == pytest.approx(1.0)


def test_features_are_the_models_cosines_and_readings() -> None:
    ev = _ev("a@1#1", "x")
    close = Candidate(2.0, 0.7, 0.5, 0, ev, "Run apt-mark auto to mark the package.", 0.4, 0, ask=0.9)
    far = Candidate(1.0, 0.5, 0.25, 1, ev, "Packages are kept.", 0.1, 1, ask=0.2)
    rows = features([close, far], 4, frozenset({"procedure"}), frozenset({"apt-mark"}))
    by_name = [dict(zip(FEATURES, row, strict=True)) for row in rows]
    assert by_name[0]["ask"] == 0.9 and by_name[1]["ask"] == 0.5  # never below the whole question's cosine
    assert by_name[0]["gap"] == 0.0 and by_name[1]["gap"] == pytest.approx(-0.2)
    assert by_name[0]["prior"] == 1.0 and by_name[1]["prior"] == 0.75
    assert by_name[0]["form"] == 1.0 and by_name[1]["form"] == 0.0  # a command and an instruction verb
    assert by_name[0]["coverage"] == 0.5 and by_name[0]["focus"] == 0.4


def test_the_reader_reorders_by_its_score() -> None:
    first, second = _ev("a@1#1", "one"), _ev("b@1#1", "two")
    base = [
        Candidate(2.5, 0.8, 0.1, 0, first, "A sentence close in meaning only."),
        Candidate(1.5, 0.5, 0.9, 1, second, "A sentence holding the question's words."),
    ]
    by_words = reader_rank("q?", base, [first, second], ReaderWeights(_weights(coverage=4.0), 0.0, 1.0))
    assert [c.evidence.passage_id for c in by_words] == ["b@1#1", "a@1#1"]
    assert by_words[0].score == pytest.approx(3.6)
    by_meaning = reader_rank("q?", base, [first, second], ReaderWeights(_weights(meaning=4.0), 0.0, 1.0))
    assert [c.evidence.passage_id for c in by_meaning] == ["a@1#1", "b@1#1"]


EVIDENCE = (
    _ev("ids@1#1", "The next rowid is chosen as one more than the largest rowid in use.", "Rowids"),
    _ev("sort@1#1", "Numbers stored as text sort as text, so ten comes before two.", "Sorting"),
)
QUESTION = (
    "Yesterday my colleague and I cleaned up old customers from our shop late at night. How is the next rowid chosen?"
)


def test_the_ask_cosine_reads_each_sentence_of_a_longer_question() -> None:
    model = ExtractiveModel(WordsEmbedder(), reader=ReaderWeights(_weights(ask=1.0), 0.0, 0.0))
    cands = model.base_candidates(QUESTION, EVIDENCE)
    assert cands and all(c.ask >= c.meaning for c in cands)
    assert any(c.ask > c.meaning + 1e-6 for c in cands)
    one = model.base_candidates("How is the next rowid chosen?", EVIDENCE)
    assert all(c.ask == c.meaning for c in one)  # one sentence: the ask is the question
    plain = ExtractiveModel(WordsEmbedder())  # no reader: no extra embedding, the ask is the meaning
    assert all(c.ask == c.meaning for c in plain.base_candidates(QUESTION, EVIDENCE))


@pytest.mark.parametrize(("threshold", "answers"), [(0.1, True), (5.0, False)])
def test_the_readers_threshold_decides_whether_the_model_answers(threshold: float, answers: bool) -> None:
    reader = ReaderWeights(_weights(meaning=1.0, coverage=1.0), 0.0, threshold)
    model = ExtractiveModel(WordsEmbedder(), reader=reader, min_meaning=0.0)
    cited = model.cite("How is the next rowid chosen?", EVIDENCE)
    assert bool(cited) is answers
    if answers:
        assert cited[0].evidence.passage_id == "ids@1#1"
        assert cited[0].score >= threshold
