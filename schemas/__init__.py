"""Typed boundary models shared by every layer: events, passages, principals, decisions."""

from schemas.decisions import (
    GENERIC_ABSTENTION,
    AbstainDecision,
    AnswerDecision,
    Claim,
    ModelDecision,
    ReasonCode,
    SearchDecision,
    SearchTrace,
    Trace,
)
from schemas.events import (
    AclPayload,
    DeletePayload,
    Event,
    EventKind,
    UpsertPayload,
    doc_path,
    make_event_id,
    qualify_doc_id,
    split_doc_id,
)
from schemas.passages import Passage, make_passage_id, split_passage_id
from schemas.principal import AccessFilter, Principal, acl_allows

__all__ = [
    "GENERIC_ABSTENTION",
    "AbstainDecision",
    "AccessFilter",
    "AclPayload",
    "AnswerDecision",
    "Claim",
    "DeletePayload",
    "Event",
    "EventKind",
    "ModelDecision",
    "Passage",
    "Principal",
    "ReasonCode",
    "SearchDecision",
    "SearchTrace",
    "Trace",
    "UpsertPayload",
    "acl_allows",
    "doc_path",
    "make_event_id",
    "make_passage_id",
    "qualify_doc_id",
    "split_doc_id",
    "split_passage_id",
]
