"""The extractive model's answer rule as pure functions (issue 23 item 4): the name a question gives must
be mentioned by the passage it is answered from, unless most of the evidence mentions it; the focus
coverage weighs a question's words by how rare they are in the evidence; `choose` and `answer` decide
from a ranked candidate list. No I/O, no embedder: the candidates are built by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from query.extractive import Candidate, answer, choose
from query.ports import Evidence
from query.reading import (
    NAME_SUBJECT_SHARE,
    capitalised_words,
    focus_coverage,
    names_unsupported,
    term_weights,
)

QUESTION = "Which locking mechanism does SQLite use on Unix?"


def _ev(pid: str, text: str, heading: str = "Locking") -> Evidence:
    return Evidence(passage_id=pid, heading=heading, text=text, title="SQLite")


def _cand(ev: Evidence, sentence: str, score: float = 2.2, meaning: float = 0.8, order: int = 0) -> Candidate:
    return Candidate(score, meaning, 0.6, order, ev, sentence)


@pytest.mark.parametrize(
    ("question", "words"),
    [
        (QUESTION, ["Unix"]),
        ("In the tutorial, why should Alice commit before pulling from Bob?", ["Alice", "Bob"]),
        ("Which file defines the virtual host in Apache?", ["Apache"]),
        ("What does git stash do?", []),  # the first word's capital is grammar
        ("My app crashed. Do I need to repair the file?", []),  # so is a sentence's first word
        ("Staff work from home: Which VPN is easy to deploy?", []),  # all-capital acronyms are named_terms'
    ],
)
def test_capitalised_words(question: str, words: list[str]) -> None:
    assert capitalised_words(question) == words


def test_a_name_the_cited_passage_never_mentions_is_unsupported() -> None:
    passages = ["sqlite uses reader/writer locks.", "posix advisory locks on unix.", "wal mode", "vacuum"]
    assert names_unsupported(["Unix"], passages[0], passages) == ["Unix"]
    assert names_unsupported(["Unix"], passages[1], passages) == []


def test_a_name_most_passages_mention_is_the_subject() -> None:
    passages = ["sqlite a", "sqlite b", "c", "d"]  # 2 of 4: NAME_SUBJECT_SHARE
    assert NAME_SUBJECT_SHARE == 0.5
    assert names_unsupported(["SQLite"], "c", passages) == []
    assert names_unsupported(["SQLite"], "c", passages[1:]) == ["SQLite"]  # 1 of 3


def test_answer_abstains_when_the_best_sentence_is_about_another_case() -> None:
    faq = _ev("faq@1#p-0", "SQLite uses reader/writer locks to control access to the database.")
    others = [_ev(f"x@1#p-{i}", "Unrelated text about WAL mode.") for i in range(3)]
    unix = _ev("locking@1#p-0", "SQLite uses POSIX advisory locks to implement locking on Unix.")
    readable = [faq, *others, unix]
    ranked = [_cand(faq, faq.text), _cand(unix, unix.text, score=2.0, order=4)]
    assert choose(ranked, 0.4, 1.9, 0.0)  # by score alone it would quote the FAQ
    # Without reading on, the FAQ's passage (no Unix) ends the answer.
    assert answer(QUESTION, ranked, readable, 0.4, 1.9, 0.0, fall_through=False) == []
    # Reading on, the best sentence of the passage that names Unix is the answer (a second claim, as before,
    # is any other passage's sentence within SECOND_CLAIM_MARGIN).
    assert answer(QUESTION, ranked, readable, 0.4, 1.9, 0.0)[0].evidence is unix
    # ... when it is good enough by itself: below the threshold the model abstains.
    assert answer(QUESTION, ranked, readable, 0.4, 2.1, 0.0) == []
    # Without the Unix passage in the evidence (the asker may not read it) nothing names Unix: abstain.
    assert answer(QUESTION, ranked[:1], readable[:-1], 0.4, 1.9, 0.0) == []
    # The passage that names Unix ranked first is answered from.
    assert answer(QUESTION, ranked[::-1], readable, 0.4, 1.9, 0.0)[0].evidence is unix
    # Without the name in the question, the FAQ sentence stands.
    plain = "Which locking mechanism does SQLite use?"
    assert answer(plain, ranked, readable, 0.4, 1.9, 0.0)[0].evidence is faq


def test_choose_thresholds() -> None:
    ev = _ev("a@1#p-0", "Text.")
    best = _cand(ev, "It is answered here in full.", score=1.95, meaning=0.5)
    assert choose([best], 0.4, 1.9, 0.0) == [best]
    assert choose([best], 0.4, 2.0, 0.0) == []  # score
    assert choose([best], 0.6, 1.9, 0.0) == []  # meaning
    assert choose([], 0.4, 1.9, 0.0) == []


def test_choose_adds_a_second_claim_from_another_passage_within_the_margin() -> None:
    a, b = _ev("a@1#p-0", "A."), _ev("b@1#p-0", "B.")
    best = _cand(a, "The first passage answers it.", score=2.4)
    near = _cand(b, "The second passage answers it too.", score=2.0, order=1)
    far = _cand(b, "The second passage answers it too.", score=1.8, order=1)
    assert choose([best, near], 0.4, 1.9, 0.0) == [best, near]
    assert choose([best, far], 0.4, 1.9, 0.0) == [best]


def test_term_weights_favour_what_the_evidence_lacks() -> None:
    passages = [{"sqlite", "lock"}, {"sqlite", "wal"}, {"sqlite"}]
    w = term_weights({"sqlite", "lock", "unix"}, passages)
    assert w["unix"] > w["lock"] > w["sqlite"]
    assert focus_coverage(w, {"sqlite"}) < focus_coverage(w, {"lock"}) < focus_coverage(w, {"unix"})


@given(
    st.sets(st.sampled_from("abcdefgh"), min_size=1),
    st.lists(st.sets(st.sampled_from("abcdefgh")), max_size=6),
    st.sets(st.sampled_from("abcdefgh")),
)
def test_focus_coverage_is_a_share(wanted: set[str], passages: list[set[str]], covered: set[str]) -> None:
    w = term_weights(wanted, passages)
    f = focus_coverage(w, covered)
    assert 0.0 <= f <= 1.0 + 1e-9
    assert focus_coverage(w, wanted) == pytest.approx(1.0)
    assert focus_coverage(w, set()) == 0.0
