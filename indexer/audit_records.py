"""Deletion and purge records, and the bodies the audit chain hashes. Shared by every audit adapter.

Instants are epoch milliseconds, so a body read back from any store hashes exactly as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from indexer.audit_chain import ChainRecord
from schemas._time import from_epoch_ms, to_epoch_ms


@dataclass(frozen=True)
class DeletionRecord:
    """A deletion as applied: when each store and cache dropped the document (logical removal).

    `details` holds what else the deletion removed (embedding-cache entries, dead letters, the
    deny entry), as counts and IDs; never text.
    """

    event_id: str
    tenant: str
    doc_id: str
    version: int
    received_at: datetime
    removed_at: dict[str, datetime]
    cache_invalidated_at: datetime
    passages_removed: int
    erase: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    seq: int | None = field(default=None, compare=False)
    """Position in the audit chain, once appended."""


@dataclass(frozen=True)
class PurgeRecord:
    """A physical purge of one store: every deletion recorded up to `covers_seq` is gone from its files.

    Logical removal makes a document unfindable; the purge is what makes its bytes leave the store
    (FTS5 merge, segment vacuum, expunged Lucene deletes, log records rewritten, WAL truncated).
    """

    store: str
    at: datetime
    covers_seq: int
    details: dict[str, Any] = field(default_factory=dict)
    seq: int | None = field(default=None, compare=False)


KIND_DELETION = "deletion"
KIND_PURGE = "purge"


def deletion_body(record: DeletionRecord) -> dict[str, Any]:
    return {
        "event_id": record.event_id,
        "tenant": record.tenant,
        "doc_id": record.doc_id,
        "version": record.version,
        "received_ms": to_epoch_ms(record.received_at),
        "removed_ms": {store: to_epoch_ms(at) for store, at in record.removed_at.items()},
        "cache_invalidated_ms": to_epoch_ms(record.cache_invalidated_at),
        "passages_removed": record.passages_removed,
        "erase": record.erase,
        "details": record.details,
    }


def purge_body(record: PurgeRecord) -> dict[str, Any]:
    return {
        "store": record.store,
        "at_ms": to_epoch_ms(record.at),
        "covers_seq": record.covers_seq,
        "details": record.details,
    }


def deletion_of(link: ChainRecord) -> DeletionRecord:
    b = link.body
    return DeletionRecord(
        event_id=str(b["event_id"]),
        tenant=str(b["tenant"]),
        doc_id=str(b["doc_id"]),
        version=int(b["version"]),
        received_at=from_epoch_ms(int(b["received_ms"])),
        removed_at={store: from_epoch_ms(int(ms)) for store, ms in dict(b["removed_ms"]).items()},
        cache_invalidated_at=from_epoch_ms(int(b["cache_invalidated_ms"])),
        passages_removed=int(b["passages_removed"]),
        erase=bool(b.get("erase", False)),
        details=dict(b.get("details") or {}),
        seq=link.seq,
    )


def purge_of(link: ChainRecord) -> PurgeRecord:
    b = link.body
    return PurgeRecord(
        store=str(b["store"]),
        at=from_epoch_ms(int(b["at_ms"])),
        covers_seq=int(b["covers_seq"]),
        details=dict(b.get("details") or {}),
        seq=link.seq,
    )
