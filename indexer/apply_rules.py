"""The pure rules of applying an event, apart from the writes (indexer.sink does those).

Whether an event is older than what it would change, where a document's tombstone stands, what the
stores filter on, and what a deletion leaves in the document's state: no I/O here, so the ordering and
tombstone rules can be tested (and reasoned about) alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum

from indexer.grants import Grants
from indexer.ports import DocState
from schemas.events import Event, EventKind


class Outcome(StrEnum):
    APPLIED = "applied"
    STALE = "stale"


@dataclass
class ApplyResult:
    outcome: Outcome
    event: Event
    passages_written: int = 0
    passages_embedded: int = 0
    cache_bumped: bool = False
    lag_s: float = 0.0
    timings_ms: dict[str, float] = field(default_factory=dict)
    applied_at: dict[str, datetime] = field(default_factory=dict)
    """Per store (adapter name): when its write for this event returned (propagation tracking)."""
    cache_invalidated_at: datetime | None = None


def is_stale(event: Event, state: DocState | None) -> bool:
    """Whether the event is older than what it would change. Pure, so the rules are testable alone.

    A tombstone stops everything at or before the deletion, for good (even once the document is
    re-created); an upsert is stale against the current content, an ACL event against the current
    ACL (upserts carry an ACL too). A deletion is stale only against an older-or-equal deletion:
    one that arrives after events newer than itself (an ACL change of the re-created document
    overtook it) still removes the content it deleted.
    """
    if state is None:
        return False
    tombstone = tombstone_of(state)
    if tombstone is not None and event.version <= tombstone:
        return True
    if event.kind is EventKind.UPSERT:
        return state.content_version is not None and event.version <= state.content_version
    if event.kind is EventKind.ACL:
        return state.acl_version is not None and event.version <= state.acl_version
    return False


def access_of(grants: Grants) -> tuple[tuple[str, ...], tuple[tuple[str, datetime], ...]]:
    """What the stores filter on: the ACL and its grant instants (not the watermark)."""
    return tuple(sorted(grants.acl)), tuple(sorted(grants.since.items()))


def tombstone_of(state: DocState) -> int | None:
    """The newest delete applied (states written before the field: a tombstone's applied version)."""
    if state.tombstone_version is not None:
        return state.tombstone_version
    return state.applied_version if state.deleted else None


def state_after_delete(event: Event, state: DocState | None, *, recreated: bool) -> DocState:
    """The document's state once a deletion applied: a tombstone at its version, for good.

    When the document was re-created (its newer content overtook this delete), that content and its
    state stay and only the tombstone is added; an ACL newer than the delete belongs to the re-created
    document and is kept; otherwise the document is deleted, its grants kept for the record.
    """
    newer_acl = state is not None and state.acl_version is not None and state.acl_version > event.version
    if recreated and state is not None:
        kept = replace(state, tombstone_version=event.version)
    else:
        kept = DocState(
            tenant=event.tenant,
            doc_id=event.doc_id,
            applied_version=event.version,
            deleted=True,
            acl=state.acl if state else (),
            tombstone_version=event.version,
            acl_since=dict(state.acl_since) if state else {},
            acl_since_version=dict(state.acl_since_version) if state else {},
            acl_changed_at=state.acl_changed_at if state else None,
        )
    if state is not None:  # an ACL newer than the delete belongs to the re-created document: keep it
        kept.applied_version = max(event.version, state.applied_version)
        kept.acl_version = state.acl_version if newer_acl else None
    return kept
