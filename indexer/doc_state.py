"""What the indexer has applied for one document, and the one JSON value its grants are stored as.

Beside the ports (indexer/ports.py: DocStateStore) rather than in them: every doc-state adapter and
the sink's pure decisions read and write this record, and the grant instants must round-trip the
same way through SQLite and Elasticsearch, so a state read back admits exactly what was written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime

from indexer.grants import Grants
from schemas._time import from_epoch_ms, to_epoch_ms


@dataclass
class DocState:
    """What the indexer has applied for one document; written last, after every store confirmed.

    Content and ACL carry separate versions because they travel on separate topics: an ACL event
    may overtake older upserts (revocations have priority), and those upserts must still land,
    with the newer ACL. `applied_version` is the highest version applied of any kind; when
    `deleted`, it is the tombstone's version.
    """

    tenant: str
    doc_id: str
    applied_version: int
    deleted: bool = False
    acl: tuple[str, ...] = ()
    content_version: int | None = None
    acl_version: int | None = None
    content_hash: str | None = None
    chunker_version: str | None = None
    passage_ids: list[str] = field(default_factory=list)
    tombstone_version: int | None = None
    """The newest delete applied: every version at or below it is dead for good, even once the
    document is re-created, so a late upsert of deleted content can never bring it back."""
    acl_since: dict[str, datetime] = field(default_factory=dict)
    """When each entry of `acl` was granted without a break since (indexer.grants)."""
    acl_since_version: dict[str, int] = field(default_factory=dict)
    acl_changed_at: datetime | None = None
    """When the document's ACL last changed: no later grant may take effect before it."""

    def grants(self) -> Grants:
        return Grants(
            tuple(self.acl),
            dict(self.acl_since),
            dict(self.acl_since_version),
            self.acl_changed_at,
            self.acl_version or 0,
        )

    def with_grants(self, grants: Grants) -> DocState:
        return replace(
            self,
            acl=grants.acl,
            acl_since=dict(grants.since),
            acl_since_version=dict(grants.since_version),
            acl_changed_at=grants.changed_at,
        )


def grants_json(state: DocState) -> str:
    """The grant instants of a state as the doc-state stores keep them (one JSON value)."""
    return json.dumps(
        {
            "since": {e: to_epoch_ms(t) for e, t in sorted(state.acl_since.items())},
            "since_version": dict(sorted(state.acl_since_version.items())),
            "changed_at": to_epoch_ms(state.acl_changed_at) if state.acl_changed_at is not None else None,
        },
        separators=(",", ":"),
    )


def with_grants_json(state: DocState, raw: str | None) -> DocState:
    """A state read back with its grants. One written before grants existed has none: its stores
    admit its entries from the beginning, as before, until the document's next event grants each
    entry from that event's instant (indexer.grants.regrant), which only narrows."""
    if not raw:
        return state
    data = json.loads(raw)
    state.acl_since = {str(e): from_epoch_ms(int(ms)) for e, ms in data.get("since", {}).items()}
    state.acl_since_version = {str(e): int(v) for e, v in data.get("since_version", {}).items()}
    changed = data.get("changed_at")
    state.acl_changed_at = from_epoch_ms(int(changed)) if changed is not None else None
    return state
