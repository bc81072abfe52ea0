"""Cutting text that is too long: code by lines, prose by sentences, then words, then characters.

`sentences` is also what the answering model quotes, so the passage boundaries and the quotable
units agree.
"""

from __future__ import annotations

import itertools
import re

# Linear on any input: a match may only start where a run of terminators starts (the lookbehind),
# and every quantifier is possessive, so a 1 MB run of dots is read once, not once per dot.
_SENTENCE_END = re.compile(r"""(?<![.!?])([.!?]++)["'”’)\]]*+\s++(?=["'“‘(\[]?[A-Z0-9])""")
_ABBREVIATIONS = frozenset(
    {"e.g.", "i.e.", "cf.", "vs.", "viz.", "al.", "mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "no.", "fig.",
     "approx.", "inc.", "ltd.", "jr.", "sr.", "resp.", "ca.", "eq.", "sec.", "vol.", "p.", "pp."}
)  # fmt: skip
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")
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


def sentences(text: str) -> list[str]:
    cuts = [0]
    floor = 0  # the word before a terminator never reaches back past the previous match
    for match in _SENTENCE_END.finditer(text):
        if match.group(1) == ".":
            begin = match.start(1)
            while begin > floor and not text[begin - 1].isspace():
                begin -= 1
            word = text[begin : match.end(1)].lstrip("(\"'“‘[").lower()
            if word in _ABBREVIATIONS or _INITIALS.match(word):
                floor = match.end()
                continue
        floor = match.end()
        cuts.append(match.end())
    cuts.append(len(text))
    return [s for s in (text[a:b].strip() for a, b in itertools.pairwise(cuts)) if s]


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
