"""Quotable sentences of a passage, shared by the sentence ranker and the extractive model.

Both embed exactly the same texts ("heading: sentence"), so a sentence embedded while ranking is a
cache hit when the model reads it, and the model quotes what the ranker scored.
"""

from __future__ import annotations

from indexer.chunker import split_sentences
from indexer.text import word_count

MIN_QUOTE_WORDS = 4
"""As the citation checks require: a shorter quote can never be cited."""


def sentences(text: str) -> list[str]:
    """Citable units: each line (table rows, list items) cut into sentences, at least 4 words.

    A line too short to quote alone ("| Default: | None |") is joined to the lines after it until
    the quote is long enough; the quote check folds the line break into a space, so it still matches.
    """
    out: list[str] = []
    pending = ""
    for line in text.split("\n"):
        for sentence in split_sentences(line):
            candidate = f"{pending}\n{sentence}" if pending else sentence
            if word_count(candidate) >= MIN_QUOTE_WORDS:
                out.append(candidate)
                pending = ""
            else:
                pending = candidate
    return out


def embedding_text(heading: str, sentence: str) -> str:
    """The heading says what "it" is in a sentence such as "It is removed on close."."""
    return f"{heading}: {sentence}" if heading else sentence
