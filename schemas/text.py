"""Text helpers connectors, indexer and query share: query terms, normalisation, numbers, HTML safe to parse."""

from __future__ import annotations

import re
from typing import Literal

_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
    ]
)

LexicalAnalyzer = Literal["standard", "english"]
"""How both lexical stores cut and normalise words, index and query alike, so the two profiles rank
the same tokens. "standard": Unicode word breaks, lower case, no stemming (FTS5 `unicode61`,
Elasticsearch `standard`). "english": the same words Porter-stemmed (FTS5 `porter unicode61`,
Elasticsearch `english`, which needs its `analysis-common` module). eval/README.md measures both."""

DEFAULT_LEXICAL_ANALYZER: LexicalAnalyzer = "standard"

MAX_QUERY_TERMS = 64
"""Bounds the work a hostile 10 KB query can cause in any ranker."""


def query_terms(query: str) -> list[str]:
    """Distinct lower-case words, stopwords dropped unless nothing else is left."""
    words = [w.lower() for w in _WORD.findall(query)]
    content = [w for w in words if w not in STOPWORDS]
    chosen = content or words
    seen: dict[str, None] = {}
    for word in chosen:
        seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]


def normalize(text: str) -> str:
    """Whitespace folded and case dropped: the only liberty a quote may take with its passage."""
    return _SPACE.sub(" ", text).strip().casefold()


def numbers_in(text: str) -> set[str]:
    """Numbers as written, with thousands separators removed ("1,000" == "1000")."""
    found: set[str] = set()
    for raw in _NUMBER.findall(text):
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", raw):
            raw = raw.replace(",", "")
        found.add(raw.rstrip(".,"))
    return found


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def html_for_parser(text: str) -> str:
    """HTML that the standard library's HTMLParser reads in linear time, with what it would show.

    HTMLParser rescans to the end of the input from every construct that is still open there, so
    300 KB of "<!--" or "<a b='" took minutes (issue 8 item 7). Open constructs at the end are
    what a browser shows as nothing (an unclosed comment runs to the end) or as text: drop an
    unclosed comment with everything after it, and write each "<" after the last ">" as "&lt;".
    """
    pos = 0
    while (start := text.find("<!--", pos)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:
            text = text[:start]
            break
        pos = end + 3
    last = text.rfind(">")
    if text.find("<", last + 1) >= 0:
        text = text[: last + 1] + text[last + 1 :].replace("<", "&lt;")
    return text
