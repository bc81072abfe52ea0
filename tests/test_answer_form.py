"""query.answer_form: the question's kind against the sentence's form, the focus as the sentence's
subject, and a sentence read with its neighbours, as pure functions, and query.extractive.reread that
applies them to the model's candidates: candidates built by hand, and the model with the real embedder."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from conftest import make_passage
from hypothesis import given
from hypothesis import strategies as st

from indexer.chunker import chunk_document
from query.answer_form import (
    LIFT_MEANING,
    FormWeights,
    bonuses,
    focus_terms,
    form_match,
    passage_support,
    question_kinds,
    subject_match,
    window_meanings,
)
from query.citations import check_claims
from query.extractive import READINGS, Candidate, ExtractiveModel, reread
from query.ports import TOOL_SUBMIT, Evidence, ModelTurn
from schemas.decisions import Claim


def test_question_kinds() -> None:
    assert question_kinds("How do I get it to come up on boot?") == {"procedure"}
    assert "procedure" in question_kinds("It keeps disappearing. How do I make the system keep it?")
    assert question_kinds("How often does logcheck monitor the log files by default?") == {"frequency"}
    assert question_kinds("Why are my numbers behaving like words?") == {"cause"}
    assert question_kinds("Which command should be used to edit /etc/sudoers?") == {"name"}
    assert question_kinds("Can DROP COLUMN remove any column?") == {"yesno"}
    assert "yesno" in question_kinds("Our app crashed. Do I need to repair the file?")  # the second sentence
    assert question_kinds("What is OpenVPN based on?") == frozenset()


def test_a_how_do_i_question_wants_an_instruction() -> None:
    kinds = question_kinds("How do I get the service to start on boot?")
    instruction = "To make it start on boot, use systemctl enable servicename.service."
    related = "A service that is started on boot is said to be enabled."
    log_line = "Mar 31 17:30:36 mirtuel systemd[1]: Unit ssh.service entered failed state."
    assert form_match(kinds, instruction) == 1.0
    assert form_match(kinds, related) == 0.0
    assert form_match(kinds, log_line) == 0.5  # names, but no instruction verb


def test_value_cause_and_rule_forms() -> None:
    assert form_match(question_kinds("How often does logcheck run?"), "It runs every hour.") == 1.0
    assert form_match(question_kinds("How often does logcheck run?"), "It reads the log files.") == 0.0
    why = question_kinds("Why is the file not smaller?")
    assert form_match(why, "The space is kept because it is reused by later inserts.") == 1.0
    assert form_match(why, "The file holds the database.") == 0.0
    yesno = question_kinds("Can a WAL database be opened read-only?")
    assert form_match(yesno, "It is not possible to open read-only WAL databases.") == 1.0


def test_the_focus_is_the_rarest_term_the_evidence_holds() -> None:
    weights = {"logcheck": 2.0, "log": 0.5, "myself": 3.0}
    assert focus_terms(weights, {"logcheck", "log"}) == {"logcheck"}  # "myself" is in no passage
    assert focus_terms(weights, set()) == frozenset()
    assert subject_match(frozenset({"logcheck"}), "The logcheck program monitors log files every hour.") == 1.0
    assert subject_match(frozenset({"logcheck"}), "Many programs read the log files, such as logcheck.") == 0.0


@given(st.lists(st.floats(-1.0, 1.0), max_size=12))
def test_a_window_never_lowers_a_meaning_nor_exceeds_the_better_neighbour(meanings: list[float]) -> None:
    out = window_meanings(meanings)
    assert len(out) == len(meanings)
    for i, (m, w) in enumerate(zip(meanings, out, strict=True)):
        near = meanings[max(0, i - 1) : i + 2]
        assert m <= w <= max(near)


def _cand(ev: Evidence, sentence: str, score: float, meaning: float, order: int, index: int) -> Candidate:
    return Candidate(score, meaning, 0.5, order, ev, sentence, 0.0, index)


def test_reread_prefers_the_instruction_and_is_the_identity_when_off() -> None:
    ev = Evidence(passage_id="boot@1#p-0", heading="Services", text="", title="Handbook")
    question = "I started it by hand but after a reboot it is down. How do I get it to come up on boot?"
    related = _cand(ev, "Services started by hand are not started again after a reboot.", 1.80, 0.60, 0, 0)
    answer = _cand(ev, "To start it on boot, run systemctl enable name.service.", 1.75, 0.55, 0, 1)
    ranked = [related, answer]
    assert reread(question, ranked, [ev], FormWeights()) == ranked
    assert bonuses(question, [(0, 0, 0.6, related.sentence)], {}, set(), FormWeights()) == [0.0]
    reread_ = reread(question, ranked, [ev], FormWeights(form=0.15))
    assert reread_[0].sentence == answer.sentence
    assert reread_[0].score == 1.9  # 1.75 + 0.15 * 1.0
    # The window lifts the sentence beside a closer one, by half the gap times the weight.
    windowed = reread(question, ranked, [ev], FormWeights(window=1.0))
    assert {c.sentence: c.score for c in windowed}[answer.sentence] == 1.775


def test_the_model_answers_an_instruction_the_plain_score_left_just_below_the_threshold(embedder: Any) -> None:
    """The readings lift the best sentence over a threshold it missed, quote that same sentence (the four
    citation checks pass), and leave a best sentence of the wrong form below it: the model as it was
    (no readings) abstains on both."""
    question = "My service is down after every reboot. How do I get it to come up on boot?"
    texts = {
        "instruction": "To control whether a service is started on boot, use systemctl enable name.service. "
        "Services are units managed by systemd.",
        "related": "Units managed by systemd may fail for many reasons. Some of them depend on the hardware.",
    }
    for kind, text in texts.items():
        chunks = chunk_document(f"# System boot\n\n{text}\n", "markdown")
        passages = {
            f"boot.md@1#{c.anchor}": make_passage(c.text, anchor=c.anchor, heading_path=c.heading_path) for c in chunks
        }
        evidence = tuple(Evidence(pid, " > ".join(p.heading_path), p.text) for pid, p in passages.items())
        base = ExtractiveModel(embedder, form=FormWeights()).candidates(question, evidence)[0]
        threshold = base.score + 0.01  # just above what the plain score reaches
        before = ExtractiveModel(embedder, min_score=threshold, min_meaning=0.0, form=FormWeights())
        now = ExtractiveModel(embedder, min_score=threshold, min_meaning=0.0)
        assert now.form == READINGS and READINGS.top_only
        assert before.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,))).input.get("abstain") is True
        call = now.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,)))
        if kind == "instruction":
            claims = [Claim.model_validate(c) for c in call.input["claims"]]
            assert [c.quote for c in claims] == [base.sentence]
            assert check_claims(claims, passages) == []
        else:
            assert call.input.get("abstain") is True, call


REFUNDS = Evidence(
    "refunds.md@1#root-1", "Refunds", "Refunds are paid within 14 days of the request. Store credit never expires."
)
SHIPPING = Evidence("shipping.md@1#root-1", "Shipping", "Orders ship from the Lisbon warehouse every weekday morning.")


def test_a_value_shaped_sentence_about_another_subject_is_not_lifted(embedder: Any) -> None:
    """The sentence "Refunds are paid within 14 days" has the value form a "within how many days" question
    asks for, but asked about executive bonuses (a passage the asker may not read) it is about something
    else: the readings must not lift it, and the model abstains, as it did before them. Asked about
    refunds, the same sentence is lifted and answers (contract: a question only a denied passage answers)."""
    model = ExtractiveModel(embedder)
    for evidence in ((REFUNDS, SHIPPING), (REFUNDS,), (SHIPPING, REFUNDS)):
        other = "Within how many days are executive bonuses paid after the board vote?"
        best = model.candidates(other, evidence)[0]
        assert best.sentence == "Refunds are paid within 14 days of the request."
        assert best.meaning < LIFT_MEANING
        assert best.score == model.base_candidates(other, evidence)[0].score  # not lifted
        assert model.decide(ModelTurn(other, evidence, (TOOL_SUBMIT,))).input.get("abstain") is True
        own = "Within how many days are refunds paid after the request?"
        lifted, plain = model.candidates(own, evidence)[0], model.base_candidates(own, evidence)[0]
        assert lifted.sentence == plain.sentence == best.sentence
        assert lifted.score == round(plain.score + READINGS.form + READINGS.subject, 6)


def test_reread_lifts_only_a_sentence_about_the_question() -> None:
    ev = Evidence(passage_id="refunds@1#p-0", heading="Refunds", text="", title="Policies")
    question = "Within how many days are executive bonuses paid after the board vote?"
    value = "Refunds are paid within 14 days of the request."
    about = Candidate(1.7, LIFT_MEANING, 0.5, 0, ev, value, 0.0, 0)
    elsewhere = replace(about, meaning=LIFT_MEANING - 0.01)
    assert reread(question, [about], [ev], READINGS)[0].score > about.score
    assert reread(question, [elsewhere], [ev], READINGS) == [elsewhere]


def test_how_often_wants_a_frequency_not_any_number() -> None:
    """The handbook's denied `denied-logcheck-interval`: "How often does logcheck monitor the log files by
    default?" asked by someone who may not read the logcheck page; the readable "... create 644 root adm
    (instead of the default 640 permissions)" has a number and "default", which read as a value and lifted
    it over the threshold. A frequency is what "how often" asks for."""
    question = "How often does logcheck monitor the log files by default?"
    kinds = question_kinds(question)
    assert kinds == frozenset({"frequency"})
    assert form_match(kinds, "The logcheck program monitors log files every hour by default.") == 1.0
    assert form_match(kinds, "The logrotate program is executed daily by the cron scheduling program.") == 1.0
    wrong = (
        "This is ensured by changing /etc/logrotate.d/apache2 to include create 644 root adm "
        "(instead of the default 640 permissions)."
    )
    assert form_match(kinds, wrong) == 0.0
    assert question_kinds("What is the default size of the buffer?") == frozenset({"value"})


def test_a_yes_or_no_question_after_a_leading_clause() -> None:
    assert "yesno" in question_kinds("When two records compare equal while sorting, do they keep their order?")
    assert "yesno" in question_kinds("If I delete the branch, does git remove its commits?")
    # A comma inside a wh-question does not make it a yes-or-no one.
    assert "yesno" not in question_kinds("Which file, if any, does the daemon read first?")


def test_what_happens_wants_a_condition_and_its_outcome() -> None:
    kinds = question_kinds("What happens if I don't write my own yywrap()?")
    assert "consequence" in kinds
    both = "If you do not supply your own version of yywrap(), then you must link with -lfl."
    assert form_match(kinds, both) == 1.0
    assert form_match(kinds, "The yywrap() function is called at the end of the input.") == 0.0
    assert form_match(kinds, "Unless you changed the state, this will result in an endless loop.") == 1.0
    assert question_kinds("What does the -Ca option do?") == frozenset()


def test_a_multiple_is_a_value() -> None:
    kinds = question_kinds("How much bigger can -Ca make the scanner tables?")
    assert form_match(kinds, "This option can quadruple the size of the tables.") == 1.0
    assert form_match(kinds, "This option controls the tables.") == 0.0


def test_passage_support_needs_most_of_the_best_five_and_a_passage_that_is_not_half_the_evidence() -> None:
    assert passage_support([3, 3, 1, 3, 3, 0, 1, 2, 2, 4, 5, 6])
    assert not passage_support([3, 3, 1, 2, 3, 0, 1, 2, 2, 4, 5, 6])  # three of five
    assert not passage_support([3, 3, 3, 3, 3, 3, 3, 1, 2])  # the passage is most of the evidence
    assert not passage_support([0, 0, 0, 0])  # fewer than five candidates


def test_support_lifts_the_best_sentence_only_and_only_when_weighted() -> None:
    evs = [Evidence(f"d@1#p-{i}", "H", f"text {i}") for i in range(4)]
    orders = [0, 0, 1, 0, 0, 2, 3, 1, 2, 3, 1, 2]
    ranked = [Candidate(2.0 - i / 100, 0.5, 0.2, o, evs[o], f"sentence {i}", index=i) for i, o in enumerate(orders)]
    lifted = reread("what is it?", ranked, evs, FormWeights(support=0.3, top_only=True))
    assert lifted[0].score == round(ranked[0].score + 0.3, 6)
    assert lifted[1:] == ranked[1:]
    assert reread("what is it?", ranked, evs, FormWeights(top_only=True)) == ranked
