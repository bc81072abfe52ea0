"""The pure rules of applying an event (indexer.apply_rules), checked alone: no store is touched.

The sink's integration tests (test_indexing, test_order_property) cover these through the writes; here
each rule of the deletion's state transition is pinned where it is decided.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from indexer.apply_rules import is_stale, state_after_delete, tombstone_of
from indexer.ports import DocState
from schemas.events import DeletePayload, Event, EventKind, UpsertPayload, make_event_id

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def event(kind: EventKind, version: int, payload: DeletePayload | UpsertPayload) -> Event:
    return Event(
        event_id=make_event_id("t", "acme", "t:p.md", version, kind),
        kind=kind,
        tenant="acme",
        doc_id="t:p.md",
        version=version,
        source="t",
        payload=payload,
    )


def delete(version: int) -> Event:
    return event(EventKind.DELETE, version, DeletePayload())


def upsert(version: int) -> Event:
    payload = UpsertPayload(
        content="x",
        content_type="markdown",
        content_hash=f"{version:016x}",
        acl=("group:staff",),
        source_url="file:///t/p.md",
    )
    return event(EventKind.UPSERT, version, payload)


def live(content: int, acl: int | None) -> DocState:
    return DocState(
        tenant="acme",
        doc_id="t:p.md",
        applied_version=max(content, acl or 0),
        acl=("group:staff",),
        content_version=content,
        acl_version=acl,
        acl_since={"group:staff": T0},
        acl_since_version={"group:staff": 1},
        acl_changed_at=T0,
    )


def test_a_delete_of_a_live_document_leaves_a_tombstone_and_keeps_the_grants_for_the_record() -> None:
    state = live(content=3, acl=3)
    kept = state_after_delete(delete(5), state, recreated=False)
    assert kept.deleted and kept.tombstone_version == 5 and kept.applied_version == 5
    assert kept.acl == ("group:staff",) and kept.acl_since == {"group:staff": T0}
    assert kept.acl_version is None  # the ACL is older than the delete: the re-created document starts over
    assert kept.content_version is None and kept.passage_ids == []


def test_a_delete_overtaken_by_the_recreated_content_only_adds_its_tombstone() -> None:
    state = live(content=9, acl=9)
    kept = state_after_delete(delete(5), state, recreated=True)
    assert not kept.deleted and kept.content_version == 9 and kept.tombstone_version == 5
    assert kept.applied_version == 9 and kept.acl_version == 9  # the newer ACL is the re-created document's


def test_the_state_given_is_not_changed() -> None:
    state = live(content=9, acl=9)
    state_after_delete(delete(5), state, recreated=True)
    state_after_delete(delete(11), state, recreated=False)
    assert state == live(content=9, acl=9)


@given(
    content=st.integers(1, 20), acl=st.none() | st.integers(1, 20), deleted=st.integers(1, 20), later=st.integers(1, 30)
)
def test_after_a_delete_no_upsert_at_or_below_it_applies(
    content: int, acl: int | None, deleted: int, later: int
) -> None:
    """The tombstone rule holds whatever the state before: a late upsert can never resurrect deleted content."""
    state = live(content, acl)
    kept = state_after_delete(delete(deleted), state, recreated=content > deleted)
    assert tombstone_of(kept) == deleted
    assert kept.applied_version >= deleted
    if later <= deleted:
        assert is_stale(upsert(later), kept)
    assert is_stale(delete(deleted), kept)  # a replayed delete is a no-op
