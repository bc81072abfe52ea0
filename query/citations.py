"""The four deterministic citation checks. Each can fail on its own; any failure abstains."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schemas.decisions import CheckFailure, Claim
from schemas.passages import Passage
from schemas.text import normalize, numbers_in, word_count

MIN_QUOTE_WORDS = 4


def check_retrieved(claim: Claim, retrieved: Mapping[str, Passage]) -> bool:
    """Retrieved for this principal in this run: the map holds nothing else."""
    return claim.passage_id in retrieved


def check_quote_length(claim: Claim) -> bool:
    return word_count(claim.quote) >= MIN_QUOTE_WORDS


def check_quote_match(claim: Claim, passage: Passage) -> bool:
    quote = normalize(claim.quote)
    return bool(quote) and quote in normalize(passage.text)


def check_numbers(claim: Claim, passage: Passage) -> bool:
    return numbers_in(claim.statement) <= numbers_in(passage.text)


def check_claims(claims: Sequence[Claim], retrieved: Mapping[str, Passage]) -> list[CheckFailure]:
    failures: list[CheckFailure] = []
    for index, claim in enumerate(claims):

        def fail(check: str, claim: Claim = claim, index: int = index) -> None:
            failures.append(CheckFailure(claim_index=index, check=check, passage_id=claim.passage_id))  # type: ignore[arg-type]

        if not check_quote_length(claim):
            fail("quote_length")
        passage = retrieved.get(claim.passage_id)
        if passage is None or not check_retrieved(claim, retrieved):
            fail("retrieved")
            continue
        if not check_quote_match(claim, passage):
            fail("quote_match")
        if not check_numbers(claim, passage):
            fail("numbers")
    return failures
