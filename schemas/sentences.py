"""Sentence splitting: where the indexer may cut a passage that is too long, and the units the
answering models quote (query.sentences, query.anthropic_citations), so both agree."""

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


def split_sentences(text: str) -> list[str]:
    """Sentences as substrings of the text (stripped), not cut at "e.g.", initials or "3.11"."""
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
