"""Quotable sentences of a passage and the question's content terms, shared by the sentence
reranker and the extractive model.

Both embed exactly the same texts ("heading: sentence"), so a sentence embedded while ranking is a
cache hit when the model reads it, and the model quotes what the reranker scored. Both match the
question's words the same way (`content_terms`), so "covers the question" means one thing.
"""

from __future__ import annotations

import re

from schemas._memo import TextMemo
from schemas.sentences import split_sentences
from schemas.text import STOPWORDS, query_terms, word_count

QUESTION_WORDS = frozenset({"what", "which", "who", "when", "where", "why", "how", "does", "do", "is", "can", "tell"})
"""Words that say a question is a question, not what it is about."""

MIN_QUOTE_WORDS = 4
"""As the citation checks require: a shorter quote can never be cited."""


_SENTENCES: TextMemo[str, tuple[str, ...]] = TextMemo(max_entries=4096)
_TERMS: TextMemo[str, frozenset[str]] = TextMemo(max_entries=32768)
"""Each text's sentences and content terms, worked out once per process while in use (schemas._memo
says why that can widen nothing and keeps no text for long). The reranker reads every sentence and
heading of the fused top 50 and the answering model those of the evidence again; the work is pure
Python, holds the GIL, and was most of an answer's CPU when redone per request. Bounded: a passage
of ~500 characters costs ~19 KB in these memos and the reranker's together (measured on the Python
manual), so 4,096 passages and 32,768 sentences or headings at most (a few tens of MB)."""


def sentences(text: str) -> list[str]:
    """Citable units (see _sentences)."""
    return list(_SENTENCES.get(text, lambda: tuple(_sentences(text))))


def _sentences(text: str) -> list[str]:
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


_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "s")
"""Tried in this order: the longest form of each ending first."""


def stem(word: str) -> str:
    """A light suffix stripper: enough to match refund/refunds/refunded without a dependency.

    A final "e" goes too, so that change/changes/changed (and rule/rules, generate/generated) are
    one term: without it "change" and "changes" never matched.
    """
    if word.endswith(_SUFFIXES):  # one C-level test first: most words end in none of them
        for suffix in _SUFFIXES:
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
                break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def _terms(text: str) -> set[str]:
    return {stem(t) for t in query_terms(text) if t not in STOPWORDS and t not in QUESTION_WORDS}


def content_terms(text: str) -> frozenset[str]:
    """Stemmed words that say what a text is about: no stopwords, no question words."""
    return _TERMS.get(text, lambda: frozenset(_terms(text)))


_TOKEN = re.compile(r"[A-Za-z0-9_%<>.:+#-]*[A-Za-z0-9_>+#]")
_NAME_LIKE = re.compile(r"[_0-9]|^-|[a-z][A-Z]|^[A-Z]{2,}|[.%<>:+#]")


def named_terms(question: str) -> list[str]:
    """The question's names: identifiers (yy_scan_bytes, heapq.heappop, --keep-index, %option, C++20),
    mixed-case product names (PostgreSQL, GitHub) and acronyms (TCP, UUID).

    A name is the one word a question cannot be paraphrased around: evidence that never mentions it
    is about something else, however close its sentences come in meaning.
    """
    names = []
    for token in _TOKEN.findall(question):
        token = token.lstrip(".:")
        if len(token) >= 2 and _NAME_LIKE.search(token):
            names.append(token)
    return list(dict.fromkeys(names))


_POINTER = re.compile(r"^\(?(see|refer to)\b", re.IGNORECASE)


def is_pointer(sentence: str) -> bool:
    """A cross-reference ("See git-shell(1) for ...", "Refer to ..."): it says where an answer is, so it
    never is one, and it shares the question's words by construction."""
    return _POINTER.match(sentence.lstrip()) is not None
