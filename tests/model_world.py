"""What the model adapters' tests share (Anthropic, OpenAI-compatible): one turn to decide, and a real
embedded store behind a worker where an asker of one group sees the refunds and shipping passages."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from conftest import make_passage

from indexer.sqlite_fts import SqliteLexicalIndex
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, Evidence, ModelTurn
from schemas.passages import Passage
from schemas.principal import Principal

TURN = ModelTurn(
    question="How long do refunds take?",
    evidence=(
        Evidence("refunds.md@1#root-1", "Refunds", "Refunds are paid within 14 days of the request."),
        Evidence("shipping.md@1#root-1", "Shipping", "Orders ship from the Lisbon warehouse every weekday."),
    ),
    tools=(TOOL_SEARCH, TOOL_SUBMIT),
    queries=("How long do refunds take?",),
)

ASKER = Principal(tenant="zeta-tenant", user="omega-user", groups=("kappa-group",))
ASKER_ACL = ("group:kappa-group",)
QUESTION = "How long do refunds take?"
REFUNDS = "Refunds are paid within 14 days of the request. Store credit never expires."
SHIPPING = "Orders ship from the Lisbon warehouse every weekday morning."


def asker_passage(text: str, doc_id: str, heading: str) -> Passage:
    """A passage of the asker's tenant that the asker's group may read."""
    return make_passage(text, tenant="zeta-tenant", doc_id=doc_id, acl=ASKER_ACL, heading_path=(heading,))


@contextlib.contextmanager
def refund_store(tmp_path: Path, *more: Passage) -> Iterator[SqliteLexicalIndex]:
    """The lexical store with the refunds and shipping passages (and `more`), closed afterwards."""
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    try:
        lexical.upsert(
            [asker_passage(REFUNDS, "refunds.md", "Refunds"), asker_passage(SHIPPING, "shipping.md", "Shipping"), *more]
        )
        yield lexical
    finally:
        lexical.close()
