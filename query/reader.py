"""An overlap reader: one learned score per candidate sentence, saying how far it reads as the answer.

The extractive model's base score (query.extractive) adds meaning, word coverage and the passage's rank
with weights set by hand on two sets long ago, and the readings of query.answer_form lift the best
sentence by constants chosen on five. The reader weighs the same evidence, and two things the base score
does not see, with weights *learned* from labelled sentences of evaluation sets (bench/answer_reader.py,
a logistic regression; leave one set out, so every set's figure is reported with weights and threshold
learned on the others):

* **meaning**: the cosine of the question and "heading: sentence" (the base score's);
* **ask**: the best cosine of the sentence to any one sentence of a question of two or more ("The next
  order gets the same number again. How do I stop ids being reused?"): the ask, not the situation
  around it, is what the answer must be close to; the whole question's cosine for a question of one;
* **coverage** and **focus**: the share of the question's content words the sentence (and its heading)
  holds, plain and weighted by their rarity in the evidence (query.reading.focus_coverage);
* **prior**: the passage's place in the fused ranking (1 for the first, falling to 0);
* **form** and **subject**: query.answer_form's readings (the question's kind against the sentence's
  form; the question's focus among the sentence's first words), for every candidate, not the best only;
* **gap**: the sentence's meaning minus the best meaning among the candidates (0 for the closest
  sentence, negative below it): an answer stands out from the sentences merely on the topic.

All are pure functions of the question, the candidates and the cosines the model already has (the ask
cosines cost one query embedding per extra question sentence). The score is `bias + weights . features`,
a log-odds that the sentence holds the answer; the model answers when the best sentence's score reaches
the reader's `threshold` (chosen with the weights: every abstain question of the training sets abstains,
then the best grounded rate), and every other rule of the model (the name rule, the lead from a restated
question, the four citation checks the worker runs) stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from query.answer_form import focus_terms, form_match, question_kinds, subject_match
from query.reading import term_weights
from query.sentences import content_terms

FEATURES = ("meaning", "ask", "coverage", "focus", "prior", "form", "subject", "gap")


@dataclass(frozen=True, slots=True)
class ReaderWeights:
    """A learned reader: `bias + sum(weights[i] * feature[i])` over FEATURES, answering at `threshold`."""

    weights: tuple[float, ...]
    bias: float
    threshold: float

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a reader needs {len(FEATURES)} weights ({', '.join(FEATURES)})")

    def score(self, features: Sequence[float]) -> float:
        return self.bias + sum(w * f for w, f in zip(self.weights, features, strict=True))


class Sighting(Protocol):
    """What the reader needs of one candidate sentence (query.extractive.Candidate carries all of it)."""

    @property
    def sentence(self) -> str: ...
    @property
    def meaning(self) -> float: ...
    @property
    def ask(self) -> float: ...
    @property
    def coverage(self) -> float: ...
    @property
    def focus(self) -> float: ...
    @property
    def order(self) -> int: ...


def question_context(question: str, passages: Sequence[AbstractSet[str]]) -> tuple[frozenset[str], frozenset[str]]:
    """(the question's kinds, its focus terms) over the evidence's content terms (one set per passage)."""
    weights = term_weights(content_terms(question), passages)
    present: frozenset[str] = frozenset().union(*passages) if passages else frozenset()
    return question_kinds(question), focus_terms(weights, present)


def features(
    items: Sequence[Sighting], n_evidence: int, kinds: frozenset[str], focus: frozenset[str]
) -> list[tuple[float, ...]]:
    """Each candidate's FEATURES, in the order of `items`."""
    if not items:
        return []
    n = max(n_evidence, 1)
    best = max(c.meaning for c in items)
    return [
        (
            c.meaning,
            max(c.ask, c.meaning),
            c.coverage,
            c.focus,
            1.0 - c.order / n,
            form_match(kinds, c.sentence),
            subject_match(focus, c.sentence),
            c.meaning - best,
        )
        for c in items
    ]


def scores(
    reader: ReaderWeights, items: Sequence[Sighting], n_evidence: int, kinds: frozenset[str], focus: frozenset[str]
) -> list[float]:
    """The reader's score of each candidate, in the order of `items`."""
    return [round(reader.score(f), 6) for f in features(items, n_evidence, kinds, focus)]
