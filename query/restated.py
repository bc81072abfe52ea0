"""A restated question leads to its answer (issue 23: the `not_cited` stage).

FAQs and troubleshooting pages restate the reader's question before answering it: "(12) I deleted
a lot of data but the database file did not get any smaller. Is this a bug?" followed by "No. When
you delete information from an SQLite database, the unused disk space is added to an internal
free-list ...". The restatement is the sentence closest to a user's question in words and meaning,
so it outscores every answer, yet it claims nothing: quoted, it is not an answer, and below the
threshold it drags the decision down with it. A careful reader takes it as a pointer to what follows.

So a sentence that is a question (it ends with "?"), or a statement whose next sentence is a short
question (its second half, "Is this a bug?", at most TAG_QUESTION_WORDS words), is never quoted; its
score and its closeness in meaning pass to the first sentence after it that is not a question: in
its own passage, or, when the passage ends with the question, in the passage that follows it in the
same document (anchor `<slug>-<n+1>`, indexer.chunking.anchors) when the asker may read that one too
(it is in the evidence). No answer is moved across a permission: a passage the asker cannot see is
not in the evidence.

Pure functions over (passage order, sentence index, sentence) positions; query.extractive applies them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from schemas.passages import make_passage_id, split_passage_id

Position = tuple[int, int]
"""(the passage's order in the evidence, the sentence's index in the passage)."""

TAG_QUESTION_WORDS = 6
"""A design constant, not tuned: the SQLite FAQ's tails are 3-6 words, its own questions 7-20."""
_ORDINAL = re.compile(r"^(.*)-(\d+)$")


def is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith("?")


def next_passage_id(passage_id: str) -> str | None:
    """The ID of the passage after this one in its document, or None when the ID has no ordinal."""
    try:
        doc_id, version, anchor = split_passage_id(passage_id)
    except ValueError:
        return None
    m = _ORDINAL.match(anchor)
    if m is None:
        return None
    return make_passage_id(doc_id, version, f"{m.group(1)}-{int(m.group(2)) + 1}")


def leads(
    sentences: Mapping[Position, str], passage_ids: Sequence[str]
) -> tuple[set[Position], dict[Position, list[Position]]]:
    """Which sentences are restated questions (never quoted), and for each answer the restatements
    that lead to it: `(restated, {answer: [restatement, ...]})`; the caller gives the answer the best
    of their scores."""
    per_passage: dict[int, list[int]] = {}
    for order, index in sorted(sentences):
        per_passage.setdefault(order, []).append(index)
    order_of = {pid: order for order, pid in enumerate(passage_ids)}
    restated: set[Position] = set()
    lead: dict[Position, list[Position]] = {}
    for order, indices in per_passage.items():
        for i, index in enumerate(indices):
            text = sentences[(order, index)]
            nxt = sentences[(order, indices[i + 1])] if i + 1 < len(indices) else ""
            tail = bool(nxt) and _is_tag_question(nxt) and indices[i + 1] == index + 1
            if not (is_question(text) or tail):
                continue
            restated.add((order, index))
            answer = _first_answer(order, indices[i + 1 :], sentences)
            if answer is None:
                following = next_passage_id(passage_ids[order]) if order < len(passage_ids) else None
                after = order_of.get(following) if following is not None else None
                if after is not None:
                    answer = _first_answer(after, per_passage.get(after, []), sentences)
            if answer is not None:
                lead.setdefault(answer, []).append((order, index))
    return restated, lead


def _is_tag_question(sentence: str) -> bool:
    """A short question that finishes the statement before it ("Is this a bug?", "How can I recover
    it?"), not a question of its own (the next FAQ entry, which follows its predecessor's answer)."""
    return is_question(sentence) and len(sentence.split()) <= TAG_QUESTION_WORDS


def _first_answer(order: int, indices: Sequence[int], sentences: Mapping[Position, str]) -> Position | None:
    for index in indices:
        if not is_question(sentences[(order, index)]):
            return (order, index)
    return None
