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

    A prose line too short to quote alone is joined to the lines after it until the quote is long
    enough; the quote check folds the line break into a space, so it still matches. Table lines are
    never joined: a passage repeats the header above each row, so header and row are adjacent in the
    passage but not in the file the reader opens, and a quote must be found there too.
    """
    out: list[str] = []
    pending = ""
    for line in text.split("\n"):
        if line.lstrip().startswith("|"):
            pending = ""
            if word_count(line) >= MIN_QUOTE_WORDS:
                out.append(line.strip())
            continue
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
