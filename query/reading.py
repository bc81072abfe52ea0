"""How a careful reader takes a question apart before looking for the sentence that answers it.

Three habits of a person answering from documents, which a word-matching model lacks:

* **Taking a name as one name.** "Rocket Boots" is not "Rocket Skates": `proper_names` finds the
  capitalised phrases a question names, which the evidence must mention whole.

* **Setting a qualifier aside.** "What does Rocket Skates cost for order 3-4?" asks what Rocket Skates
  cost; the order number says why the asker wants it. A price list never mentions the order, and that
  must not count as "the documents are about something else". `set_aside` removes such qualifiers: a
  reference number (digits, maybe a short prefix: 3-4, 9-9, #512, PO-2024-7) named by a noun in a
  phrase at the edge of the question (", ticket 9-9", "for order 3-4", "(case 12)", "On invoice 7-1,
  ..."). Only a reference number whose phrase is at the edge goes: a version ("Python 3.12"), a
  quantity ("16 KB of memory"), a year ("the 2018 world cup") or an identifier (yy_scan_bytes) is what
  the question is about, and evidence that never mentions it still means abstention.
* **Knowing what kind of answer is asked for.** "What is the refund window?" is answered by "within 45
  days of purchase", which never says "window": the word asks for a period, and a sentence stating one
  supplies it. `answer_kinds_met` names the question's type words (window, deadline, cost, fee, how
  many, ...) that a sentence satisfies by holding a value of that kind: a duration, an amount of money,
  a count. It only ever credits a word the sentence does not contain, so literal matches are unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from query.sentences import content_terms, stem

_DETERMINERS = r"(?:(?:my|our|the|a|an|this|that|your|his|her|their)\s+)?"
_NOUNS = r"(?:[A-Za-z][A-Za-z.]*\s+){1,2}(?:(?:no\.?|number|nr\.?)\s*)?#?\s*"
_PREPOSITIONS = r"(?:for|on|in|from|under|per|regarding|re|about|with|concerning)"
_REFERENCE = re.compile(r"#?(?:[A-Za-z]{1,4}[-#/]?)?\d+(?:[-/][A-Za-z0-9]+)*")
_VERSIONISH = re.compile(r"\d\.\d")


def is_reference(name: str) -> bool:
    """A reference number (3-4, 9-9, #512, A-17, PO-2024-7), not a version or decimal (3.12, 2.5)."""
    return _REFERENCE.fullmatch(name) is not None and _VERSIONISH.search(name) is None


_PROPER = re.compile(r"(?<![\w-])[A-Z][a-z]+(?:[ \t]+[A-Z][a-z0-9]+)+")


def proper_names(question: str) -> list[str]:
    """Capitalised phrases of two or more words inside the question ("Rocket Boots", "Project Hermes").

    Such a phrase names one thing: evidence about "Rocket Skates" does not answer what "Rocket Boots"
    cost, though it shares a word and nearly all its meaning. The question's first word is capitalised
    for grammar, not as a name, so a phrase starting there starts at its second word.
    """
    names = []
    for match in _PROPER.finditer(question):
        words = match.group().split()
        if match.start() == len(question) - len(question.lstrip()):
            words = words[1:]
        if len(words) >= 2:
            names.append(" ".join(words))
    return list(dict.fromkeys(names))


def _qualifier_patterns(name: str) -> list[re.Pattern[str]]:
    """The qualifier patterns for one name (the reference form; `_strip_qualifier` is what runs)."""
    ref = re.escape(name.lstrip("#"))
    return [
        # "(order 3-4)", "(ticket #9-9)"
        re.compile(rf"\s*\(\s*{_DETERMINERS}{_NOUNS}{ref}\s*\)", re.IGNORECASE),
        # "..., ticket 9-9?" / "... for order 3-4?" at the end
        re.compile(
            rf"(?:\s*,\s*(?:{_PREPOSITIONS}\s+)?|\s+{_PREPOSITIONS}\s+){_DETERMINERS}{_NOUNS}{ref}(?=\s*[?.!]*\s*$)",
            re.IGNORECASE,
        ),
        # "For order 3-4, ..." / "Ticket 9-9: ..." at the start
        re.compile(rf"^\s*(?:{_PREPOSITIONS}\s+)?{_DETERMINERS}{_NOUNS}{ref}\s*[,:;-]\s*", re.IGNORECASE),
    ]


# The same three patterns compiled once: the name is written before the question, after a NUL, and
# matched by a back-reference where the literal stood. Compiling three patterns per name cost 3.4 ms
# of CPU per question holding a reference number. A lazy `.*?` before a pattern finds its leftmost
# match as a search of the question would; the third is anchored right after the NUL (the `^`).
_REF = r"\A(?P<ref>[^\x00]*)\x00"
_COMPILED = [
    re.compile(rf"{_REF}.*?(?P<m>\s*\(\s*{_DETERMINERS}{_NOUNS}(?P=ref)\s*\))", re.IGNORECASE | re.DOTALL),
    re.compile(
        rf"{_REF}.*?(?P<m>(?:\s*,\s*(?:{_PREPOSITIONS}\s+)?|\s+{_PREPOSITIONS}\s+){_DETERMINERS}{_NOUNS}(?P=ref)"
        r"(?=\s*[?.!]*\s*$))",
        re.IGNORECASE | re.DOTALL,
    ),
    re.compile(
        rf"{_REF}(?P<m>\s*(?:{_PREPOSITIONS}\s+)?{_DETERMINERS}{_NOUNS}(?P=ref)\s*[,:;-]\s*)",
        re.IGNORECASE | re.DOTALL,
    ),
]


def _strip_qualifier(question: str, name: str) -> str | None:
    """The question without the first qualifier phrase naming `name` (as the first of
    `_qualifier_patterns(name)` that matches would remove it), or None when none does."""
    ref = name.lstrip("#")
    subject = f"{ref}\x00{question}"
    for pattern in _COMPILED:
        found = pattern.search(subject)
        if found is not None:
            offset = len(ref) + 1
            return question[: found.start("m") - offset] + question[found.end("m") - offset :]
    return None


def set_aside(question: str, missing: list[str]) -> str | None:
    """The question without the qualifiers that hold the `missing` names, or None when a missing name
    is not a reference number in such a qualifier (then it is what the question is about)."""
    core = question
    for name in missing:
        if not is_reference(name):
            return None
        stripped = _strip_qualifier(core, name)
        if stripped is None:
            return None
        core = stripped
    core = core.strip()
    if not core or not content_terms(core):
        return None
    return core if core.endswith(("?", ".", "!")) else core + "?"


_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|"
    r"sixty|ninety|hundred|a few|several"
)
_AMOUNT = rf"(?:\d[\d,.]*|{_NUMBER_WORDS})"
_DURATION = re.compile(
    rf"\b{_AMOUNT}(?:\s*(?:-|to|or)\s*{_AMOUNT})?[\s-]*(?:business\s+|working\s+|calendar\s+)?"
    r"(?:second|minute|hour|day|night|week|month|quarter|year)s?\b",
    re.IGNORECASE,
)
_MONEY = re.compile(
    r"(?:[$€£¥]\s*\d[\d,.]*|\b\d[\d,.]*\s*(?:EUR|USD|GBP|CHF|JPY|SEK|NOK|DKK|euros?|dollars?|pounds?|cents?|francs?)\b)",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z]+")
_COUNT = re.compile(rf"\b(?:\d[\d,.]*|{_NUMBER_WORDS})\b", re.IGNORECASE)

KIND_WORDS: dict[str, frozenset[str]] = {
    # Exact words, not stems: "Windows" (the system) must not ask for a period.
    "duration": frozenset({"window", "period", "periods", "deadline", "deadlines", "timeframe", "duration", "long"}),
    "money": frozenset({"cost", "costs", "price", "prices", "fee", "fees", "charge", "charges", "much", "tariff"}),
    "count": frozenset({"many", "number"}),
}
KIND_VALUES: dict[str, re.Pattern[str]] = {"duration": _DURATION, "money": _MONEY, "count": _COUNT}


def asked_kinds(question: str) -> dict[str, set[str]]:
    """Per kind of value, the question's type words asking for it, as content_terms spells them."""
    words = {w.lower() for w in _WORD.findall(question)}
    return {kind: {stem(w) for w in words & typed} for kind, typed in KIND_WORDS.items() if words & typed}


def answer_kinds_met(asked: dict[str, set[str]], sentence: str) -> set[str]:
    """The type words of `asked` (asked_kinds) that `sentence` answers with a value of their kind."""
    met: set[str] = set()
    for kind, words in asked.items():
        if KIND_VALUES[kind].search(sentence):
            met |= words
    return met


def term_weights(wanted: AbstractSet[str], passages: Sequence[AbstractSet[str]]) -> dict[str, float]:
    """How much each of the question's content terms says, read against the evidence it came with.

    A careful reader knows which words of a question carry it: a word every passage of the evidence
    holds ("sqlite" over SQLite's manual) is what the search already matched on, a word none of them
    holds (numpy, goto, megabytes) is what the question is about and the evidence lacks. The weight is
    an inverse document frequency over the evidence passages only, so it needs no corpus statistics
    and means the same on any manual: ln((n + 1) / (df + 0.5)).
    """
    n = len(passages)
    return {t: math.log((n + 1) / (sum(1 for p in passages if t in p) + 0.5)) for t in wanted}


def focus_coverage(weights: dict[str, float], covered: AbstractSet[str]) -> float:
    """The share of the question's weight (term_weights) that a sentence covers, 0..1.

    Plain coverage counts "use" as much as "numpy"; this counts what the question is about. A sentence
    that covers only the words every passage shares, and none of those that set the question apart,
    is related to the question, not an answer to it.
    """
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in covered) / total if total > 0 else 0.0


_CAPITALISED = re.compile(r"(?<![\w-])[A-Z][a-z]+[A-Za-z0-9]*")
NAME_SUBJECT_SHARE = 0.5
"""A name at least this share of the evidence passages mention is what the documents are about (SQLite
in SQLite's manual): a sentence need not repeat it. A design constant (a majority), not tuned."""


def capitalised_words(question: str) -> list[str]:
    """Single capitalised words inside a sentence of the question (Unix, Alice, Apache), not the word
    that starts a sentence, where the capital is grammar."""
    lead = len(question) - len(question.lstrip())
    found = []
    for match in _CAPITALISED.finditer(question):
        before = question[: match.start()].rstrip()
        if match.start() != lead and not before.endswith((".", "?", "!", ":")):
            found.append(match.group())
    return list(dict.fromkeys(found))


def names_unsupported(names: list[str], cited: str, passages: list[str]) -> list[str]:
    """The names the cited passage does not mention, among those fewer than NAME_SUBJECT_SHARE of the
    evidence passages mention (all texts case-folded by the caller).

    "Which locking mechanism does SQLite use on Unix?" is not answered by "SQLite uses reader/writer
    locks" from a passage that never says Unix, even when another passage of the evidence does: the
    name says which case the question is about, and the quote must be about that case. A name most
    passages mention is the documents' subject and needs no repeating.
    """
    missing = []
    for name in names:
        key = name.casefold()
        if key in cited:
            continue
        if passages and sum(1 for p in passages if key in p) / len(passages) >= NAME_SUBJECT_SHARE:
            continue
        missing.append(name)
    return missing
