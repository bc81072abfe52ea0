"""The embedded profile's model: deterministic, extractive, no network.

It answers with whole sentences of the evidence, so its quotes are verbatim by construction,
and it abstains when no sentence covers enough of the question. When evidence is thin it asks
for one rewritten search (the question's content words plus the best passage's heading).
"""

from __future__ import annotations

from indexer.chunker import split_sentences
from indexer.text import STOPWORDS, query_terms, word_count
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, Evidence, ModelTurn, ToolCall

_QUESTION_WORDS = frozenset({"what", "which", "who", "when", "where", "why", "how", "does", "do", "is", "can", "tell"})


def stem(word: str) -> str:
    """A light suffix stripper: enough to match refund/refunds/refunded without a dependency."""
    for suffix in ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _terms(text: str) -> set[str]:
    return {stem(t) for t in query_terms(text) if t not in STOPWORDS and t not in _QUESTION_WORDS}


def sentences(text: str) -> list[str]:
    """Citable units: each line (table rows, list items) cut into sentences, at least 4 words."""
    return [s for line in text.split("\n") for s in split_sentences(line) if word_count(s) >= 4]


class ExtractiveModel:
    name = "extractive"

    def __init__(self, min_coverage: float = 0.6, max_claims: int = 2) -> None:
        self.min_coverage = min_coverage
        self.max_claims = max_claims

    def _ranked(self, question: str, evidence: tuple[Evidence, ...]) -> list[tuple[float, int, Evidence, str]]:
        wanted = _terms(question)
        if not wanted:
            return []
        ranked = []
        for order, ev in enumerate(evidence):
            heading_terms = _terms(ev.heading)
            for sentence in sentences(ev.text):
                own = _terms(sentence)
                if not own & wanted:
                    continue
                coverage = len(wanted & (own | heading_terms)) / len(wanted)
                ranked.append((coverage, order, ev, sentence))
        ranked.sort(key=lambda r: (-r[0], r[1]))
        return ranked

    def decide(self, turn: ModelTurn) -> ToolCall:
        ranked = self._ranked(turn.question, turn.evidence)
        good = [r for r in ranked if r[0] >= self.min_coverage]
        if good:
            # Further claims must cover the question nearly as well as the best one, so a
            # neighbouring table row or sentence that merely shares words is not cited.
            good = [r for r in good if r[0] >= good[0][0] * 0.9]
        if good:
            claims = []
            used: set[str] = set()
            for _, _, ev, sentence in good:
                if sentence in used:
                    continue
                used.add(sentence)
                claims.append({"statement": sentence, "passage_id": ev.passage_id, "quote": sentence})
                if len(claims) >= self.max_claims:
                    break
            return ToolCall(TOOL_SUBMIT, {"claims": claims})
        if TOOL_SEARCH in turn.tools and len(turn.queries) < 2 and turn.evidence:
            rewrite = self._rewrite(turn)
            if rewrite and rewrite not in turn.queries:
                return ToolCall(TOOL_SEARCH, {"query": rewrite})
        return ToolCall(TOOL_SUBMIT, {"abstain": True, "reason": "no passage answers the question"})

    def _rewrite(self, turn: ModelTurn) -> str:
        words = [w for w in query_terms(turn.question) if w not in _QUESTION_WORDS]
        best = turn.evidence[0]
        heading = [w for w in query_terms(best.heading) if w not in words]
        return " ".join(words + heading[:4])
