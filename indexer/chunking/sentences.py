"""Cutting text that is too long: code by lines, prose by sentences, then words, then characters.

Prose is cut where schemas.sentences splits it, the same units the answering model quotes, so the
passage boundaries and the quotable units agree.
"""

from __future__ import annotations

import re

from schemas.sentences import split_sentences as sentences  # re-export (schemas.sentences)

_WORD = re.compile(r"\S+")


def pack(segments: list[str], sep: str, budget: int) -> list[str]:
    out: list[str] = []
    current = ""
    for seg in segments:
        if current and len(current) + len(sep) + len(seg) <= budget:
            current = f"{current}{sep}{seg}"
        else:
            if current:
                out.append(current)
            current = seg
    if current:
        out.append(current)
    return out


def split_part(text: str, code: bool, budget: int) -> list[str]:
    """Cut one over-long part: code by lines, prose by sentences, then words, then characters."""
    if len(text) <= budget:
        return [text]
    if code:
        out: list[str] = []
        for line in pack(text.split("\n"), "\n", budget):
            out.extend(_split_words(line, budget) if len(line) > budget else [line])
        return out
    out = []
    for sentence in pack(sentences(text), " ", budget):
        out.extend(_split_words(sentence, budget) if len(sentence) > budget else [sentence])
    return out


def _split_words(text: str, budget: int) -> list[str]:
    out: list[str] = []
    start = end = -1
    for match in _WORD.finditer(text):
        if start >= 0 and match.end() - start <= budget:
            end = match.end()
            continue
        if start >= 0:
            out.append(text[start:end])
        start, end = match.start(), match.end()
        while end - start > budget:
            out.append(text[start : start + budget])
            start += budget
    if start >= 0 and end > start:
        out.append(text[start:end])
    return out
