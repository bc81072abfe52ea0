"""A restated question leads to its answer (query.restated, issue 23's `not_cited` stage).

The SQLite FAQ restates the reader's question and answers it in the next paragraph, which the
chunker may put in the next passage: "(12) I deleted a lot of data but the database file did not
get any smaller. Is this a bug?" ends one passage, "No. When you delete information from an SQLite
database, the unused disk space is added to an internal free-list ..." starts the next. The
restatement outscores every answer and claims nothing; the model quotes the answer instead, and
only when the asker may read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexer.chunker import chunk_document
from query.extractive import ExtractiveModel, lead_to_answers
from query.ports import TOOL_SUBMIT, Evidence, ModelTurn
from query.restated import is_question, leads, next_passage_id

FAQ = Path("/usr/share/doc/sqlite3/faq.html")


def test_positions_a_restatement_leads_to_within_and_across_passages() -> None:
    sentences = {
        (0, 0): "SQLite has limited ALTER TABLE support.",
        (0, 1): "(12) I deleted a lot of data but the file did not get any smaller.",
        (0, 2): "Is this a bug?",
        (1, 0): "No. The unused disk space is added to a free-list.",
        (1, 1): "(13) Can I use SQLite in my commercial product?",
        (1, 2): "Yes. SQLite is in the public domain.",
        (2, 0): "Why would anyone do that?",
    }
    ids = ["faq.html@1#faq-15", "faq.html@1#faq-16", "other.html@1#root-3"]
    restated, lead = leads(sentences, ids)
    assert restated == {(0, 1), (0, 2), (1, 1), (2, 0)}
    assert lead == {(1, 0): [(0, 1), (0, 2)], (1, 2): [(1, 1)]}
    # The answer's passage is not in the evidence (the asker may not read it): nothing is lifted.
    restated, lead = leads({k: v for k, v in sentences.items() if k[0] == 0}, ids[:1])
    assert restated == {(0, 1), (0, 2)} and lead == {}
    assert next_passage_id("corpus:a/faq.html@3#frequently-asked-questions-15") == (
        "corpus:a/faq.html@3#frequently-asked-questions-16"
    )
    assert next_passage_id("not an id") is None
    assert is_question("Is this a bug? ") and not is_question("No.")


def _faq_evidence(*numbers: int) -> tuple[Evidence, ...]:
    chunks = {c.anchor: c for c in chunk_document(FAQ.read_text(encoding="utf-8"), "html")}
    out = []
    for n in numbers:
        c = chunks[f"frequently-asked-questions-{n}"]
        out.append(Evidence(f"corpus:sqlapp/guides/faq.html@1#{c.anchor}", " > ".join(c.heading_path), c.text))
    return tuple(out)


@pytest.mark.skipif(not FAQ.exists(), reason="sqlite3-doc not installed")
def test_the_model_quotes_the_answer_not_the_restated_question(embedder: Any) -> None:
    question = "I deleted half of the rows but the database file is exactly as big as before. Is something broken?"
    evidence = _faq_evidence(15, 16)
    before = ExtractiveModel(embedder, lead=False)
    best = before.candidates(question, evidence)[0]
    assert best.sentence.startswith("(12) I deleted a lot of data"), best
    quoted = before.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,))).input["claims"][0]["quote"]
    assert quoted.startswith("(12) I deleted a lot of data"), "before: the question quoted as its own answer"

    now = ExtractiveModel(embedder, lead=True)
    ranked = lead_to_answers(before.base_candidates(question, evidence), evidence)
    assert not any(c.sentence.startswith("(12)") or c.sentence.endswith("?") for c in ranked)
    call = now.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,)))
    claims = call.input.get("claims")
    assert claims, call
    assert claims[0]["passage_id"].endswith("#frequently-asked-questions-16")
    assert claims[0]["quote"].startswith("No. When you delete information from an SQLite database")

    # The asker may read the restatement but not the answer (passage 16 denied): it abstains.
    only_question = _faq_evidence(15)
    assert now.decide(ModelTurn(question, only_question, (TOOL_SUBMIT,))).input.get("abstain") is True
