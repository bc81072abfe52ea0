"""Pure core: RRF, citation checks, loop rules, tokens, text helpers."""

from __future__ import annotations

import pytest
from conftest import make_passage

from indexer.text import normalize, numbers_in, query_terms
from query.citations import check_claims
from query.loop import InvalidDecision, LoopState, interpret
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, ToolCall
from query.rrf import fuse
from query.tokens import InvalidToken, issue_token, verify_token
from schemas.decisions import AbstainDecision, AnswerDecision, Claim, SearchDecision
from schemas.principal import Principal, acl_allows


def test_rrf_matches_the_seed_example() -> None:
    bm25 = ["P2", "P4", "P7"]
    dense = ["P7", "P2", "P9"]
    fused = dict(fuse([bm25, dense], k=60))
    assert round(fused["P2"] * 1000, 1) == 32.5
    assert round(fused["P7"] * 1000, 1) == 32.3
    assert round(fused["P4"] * 1000, 1) == 16.1
    assert round(fused["P9"] * 1000, 1) == 15.9
    assert [pid for pid, _ in fuse([bm25, dense], k=60)] == ["P2", "P7", "P4", "P9"]
    assert [pid for pid, _ in fuse([bm25, dense], k=60, top=2)] == ["P2", "P7"]


def test_rrf_single_ranking_and_duplicates() -> None:
    assert [p for p, _ in fuse([["a", "b", "a"], []])] == ["a", "b"]
    assert fuse([[], []]) == []


PASSAGE = make_passage(
    "Customers may request a refund within 30 days of purchase. Refunds cost 1,000 EUR at most.", anchor="r-1"
)
RETRIEVED = {PASSAGE.passage_id: PASSAGE}
GOOD = Claim(
    statement="Refunds within 30 days.", passage_id=PASSAGE.passage_id, quote="may request a refund within 30 days"
)


def checks_failed(claim: Claim) -> set[str]:
    return {f.check for f in check_claims([claim], RETRIEVED)}


def test_a_good_claim_passes_every_check() -> None:
    assert checks_failed(GOOD) == set()
    tolerant = GOOD.model_copy(update={"quote": "  MAY request\n a   refund WITHIN 30 days "})
    assert checks_failed(tolerant) == set()
    assert checks_failed(GOOD.model_copy(update={"statement": "At most 1000 EUR."})) == set()


def test_each_citation_check_fails_alone() -> None:
    assert checks_failed(GOOD.model_copy(update={"passage_id": "doc.md@1#other-1"})) == {"retrieved"}
    assert checks_failed(GOOD.model_copy(update={"quote": "within 30 days"})) == {"quote_length"}
    assert checks_failed(GOOD.model_copy(update={"quote": "may request a refund within 60 days"})) == {"quote_match"}
    assert checks_failed(GOOD.model_copy(update={"statement": "Refunds within 45 days."})) == {"numbers"}


def test_quote_match_is_exact_after_normalisation_only() -> None:
    # Punctuation and word changes are not normalised away.
    assert checks_failed(GOOD.model_copy(update={"quote": "may request refund within 30 days"})) == {"quote_match"}
    assert checks_failed(GOOD.model_copy(update={"quote": "may request a refund, within 30 days"})) == {"quote_match"}


def test_loop_budget_and_new_evidence_rule() -> None:
    state = LoopState()
    assert state.offered() == (TOOL_SEARCH, TOOL_SUBMIT)
    assert state.record_search("q1", ["a", "b"]) == ["a", "b"]
    assert state.offered() == (TOOL_SEARCH, TOOL_SUBMIT)
    assert state.record_search("q2", ["b", "c"]) == ["c"]
    assert state.offered() == (TOOL_SEARCH, TOOL_SUBMIT)
    assert state.record_search("q3", ["d"]) == ["d"]
    assert state.offered() == (TOOL_SUBMIT,), "three searches spend the budget"

    stale = LoopState()
    stale.record_search("q1", ["a"])
    assert stale.record_search("q2", ["a"]) == []
    assert stale.offered() == (TOOL_SUBMIT,), "a search with no new IDs ends the budget"


def test_interpret_valid_and_invalid_decisions() -> None:
    both = (TOOL_SEARCH, TOOL_SUBMIT)
    assert interpret(ToolCall(TOOL_SEARCH, {"query": "x"}), both) == SearchDecision(query="x")
    answer = interpret(ToolCall(TOOL_SUBMIT, {"claims": [GOOD.model_dump()]}), both)
    assert isinstance(answer, AnswerDecision) and answer.claims == (GOOD,)
    assert isinstance(interpret(ToolCall(TOOL_SUBMIT, {"abstain": True}), both), AbstainDecision)
    invalid = [
        (ToolCall(TOOL_SEARCH, {"query": "x"}), (TOOL_SUBMIT,)),  # tool not offered
        (ToolCall("delete_everything", {}), both),
        (ToolCall(TOOL_SEARCH, {"query": "x", "tenant": "globex"}), both),  # no scope fields, ever
        (ToolCall(TOOL_SEARCH, {}), both),
        (ToolCall(TOOL_SUBMIT, {"claims": []}), both),
        (ToolCall(TOOL_SUBMIT, {"claims": [{"statement": "x"}]}), both),
        (ToolCall(TOOL_SUBMIT, {"claims": [GOOD.model_dump()], "groups": ["admin"]}), both),
        (ToolCall(TOOL_SUBMIT, {"abstain": True, "claims": [GOOD.model_dump()]}), both),
    ]
    for call, offered in invalid:
        with pytest.raises(InvalidDecision):
            interpret(call, offered)


def test_tokens_round_trip_and_refuse_tampering() -> None:
    p = Principal(tenant="acme", user="ann", groups=("staff", "hr"))
    token = issue_token("secret", p, ttl_s=60, now=1000)
    assert verify_token("secret", token, now=1030) == p
    with pytest.raises(InvalidToken, match="expired"):
        verify_token("secret", token, now=1091)  # exp 1060 plus the 30 s leeway for clock skew
    with pytest.raises(InvalidToken, match="signature"):
        verify_token("other", token, now=1030)
    header, _body, sig = token.split(".")
    forged = issue_token("attacker", Principal(tenant="acme", user="ann", groups=("admin",)), now=1000).split(".")[1]
    with pytest.raises(InvalidToken):
        verify_token("secret", f"{header}.{forged}.{sig}", now=1030)
    for junk in ["", "abc", ".", "a.b.c"]:
        with pytest.raises(InvalidToken):
            verify_token("secret", junk, now=1030)


def test_acl_semantics_fail_closed() -> None:
    ann = Principal(tenant="acme", user="ann", groups=("staff",))
    assert acl_allows(ann, "acme", ["group:staff"])
    assert acl_allows(ann, "acme", ["user:ann"])
    assert not acl_allows(ann, "acme", [])
    assert not acl_allows(ann, "globex", ["group:staff"])
    assert not acl_allows(ann, "acme", ["group:ann", "user:staff"])


def test_text_helpers() -> None:
    assert query_terms("What is the refund policy for Refunds?") == ["refund", "policy", "refunds"]
    assert query_terms("the of") == ["the", "of"]
    assert normalize("  A\n\tB  c ") == "a b c"
    assert numbers_in("1,000 and 3.11 and 45.") == {"1000", "3.11", "45"}


@pytest.mark.parametrize("version", ["²", "١", "５", "1_0", " 1", "-1", ""])
def test_a_passage_id_version_is_ascii_digits_only(version: str) -> None:
    """int() reads '١' as 1: "d@١#a" would have parsed as the passage d@1#a, which nothing ever writes."""
    from schemas.passages import make_passage_id, split_passage_id

    assert split_passage_id(make_passage_id("drive:a@b#c.md", 12, "s0")) == ("drive:a@b#c.md", 12, "s0")
    with pytest.raises(ValueError, match="not a passage id"):
        split_passage_id(f"drive:d.md@{version}#s0")
