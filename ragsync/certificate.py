"""Deletion certificates: per copy of a deleted document, what was checked, when the document left
it logically and physically, and how many remnants are found now.

"Now" means the check runs when the certificate is made, against the live stores: passages still
stored, vector points still held, log records still carrying a value, embedding-cache entries
still present, deny-set entries left, connector state not marked deleted. "Logically" comes from
the deletion's audit record (when each store's write returned), "physically" from the first purge
record of that store covering it (FTS5 merged and WAL truncated, segments vacuumed, Lucene deletes
expunged, log records erased and checkpointed). The audit chain is verified too, so a certificate
for a trail that was tampered with says so. Everything here reads IDs, counts and hashes; no text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.audit_chain import verify
from indexer.ports import DeletionRecord, PurgeRecord
from indexer.sink import EMBEDDING_CACHE
from ragsync.purge import EVENT_LOG
from ragsync.wiring import Components
from schemas.events import doc_path, split_doc_id


class CertificateError(ValueError):
    """The document cannot be certified as named (unknown, ambiguous, not deleted)."""


class NoDeletionRecorded(CertificateError):
    """No deletion of the document is recorded: an answer (it was never deleted), not a usage error."""


@dataclass(frozen=True)
class Target:
    tenant: str
    doc_id: str
    record: DeletionRecord
    earlier: list[DeletionRecord]


def find_deletion(records: list[DeletionRecord], name: str, tenant: str | None) -> Target:
    """The latest deletion of the document named `name`: a full doc ID, or its path as users know it
    (`ragsync audit deletions` lists both). Pure."""
    matching = [
        r
        for r in records
        if (tenant is None or r.tenant == tenant) and (r.doc_id == name or doc_path(r.doc_id) == name)
    ]
    if not matching:
        where = f" in tenant {tenant}" if tenant else ""
        raise NoDeletionRecorded(f"no deletion of {name!r} is recorded{where} (see `ragsync audit deletions`)")
    docs = sorted({(r.tenant, r.doc_id) for r in matching})
    if len(docs) > 1:
        names = ", ".join(f"{t}/{d}" for t, d in docs)
        raise CertificateError(f"{name!r} names several documents ({names}): pass --tenant or the full doc ID")
    ordered = sorted(matching, key=lambda r: r.seq or 0)
    latest = ordered[-1]
    return Target(latest.tenant, latest.doc_id, latest, ordered[:-1])


def _physical(purges: list[PurgeRecord], store: str, seq: int) -> PurgeRecord | None:
    covering = [p for p in purges if p.store == store and p.covers_seq >= seq]
    return min(covering, key=lambda p: p.covers_seq) if covering else None


def _copy(
    name: str,
    checked: str,
    remnants: int | None,
    logical: Any = None,
    physical: PurgeRecord | None = None,
    *,
    physical_applies: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "copy": name,
        "checked": checked,
        "removed_logically_at": logical.isoformat() if logical is not None else None,
        "removed_physically_at": (physical.at.isoformat() if physical else None) if physical_applies else "n/a",
        "remnants": remnants,
    }
    if physical is not None:
        out["purge_seq"] = physical.seq
    out.update(extra)
    return out


def certificate(components: Components, name: str, tenant: str | None = None) -> dict[str, Any]:
    """Check every copy of the deleted document now; see the module docstring."""
    audit = components.audit
    target = find_deletion(audit.records(tenant), name, tenant)
    record, seq = target.record, target.record.seq or 0
    purges = audit.purges()
    details = record.details
    copies: list[dict[str, Any]] = []

    lexical = components.lexical
    left = lexical.count(target.tenant, target.doc_id)
    pending = lexical.purge_pending()
    unmerged: dict[str, Any] = {"unmerged_indexes": pending} if pending is not None else {}
    copies.append(
        _copy(
            lexical.name,
            "passages of every version stored now (any ACL or date); deletions not yet merged out of the index",
            left,
            record.removed_at.get(lexical.name),
            _physical(purges, lexical.name, seq),
            **unmerged,
        )
    )

    vector = components.vector
    if vector is not None:
        ids = list(details.get("point_ids", []))
        held = vector.held(ids)
        deleted_vectors = vector.deleted_vectors()
        awaiting: dict[str, Any] = {}
        if deleted_vectors is not None:
            awaiting["deleted_vectors_awaiting_vacuum"] = deleted_vectors
        copies.append(
            _copy(
                vector.name,
                f"points of the document (count) and the {len(ids)} removed points (by ID); the store holds no text",
                vector.count(target.tenant, target.doc_id) + held,
                record.removed_at.get(vector.name),
                _physical(purges, vector.name, seq),
                **awaiting,
            )
        )
    elif vector is None and any(store.startswith("qdrant") for store in record.removed_at):
        copies.append(_copy("vector", "not checked: no embedding model loaded in this process", None))

    embedder = components.embedder
    keys = [bytes.fromhex(k) for k in details.get("embedding_keys", [])]
    if embedder is not None:
        copies.append(
            _copy(
                EMBEDDING_CACHE,
                f"entries keyed by the removed passages' text hashes ({len(keys)} keys)",
                embedder.present(keys),
                record.removed_at.get(EMBEDDING_CACHE),
                _physical(purges, EMBEDDING_CACHE, seq),
                physical_applies=any(p.store == EMBEDDING_CACHE for p in purges) or not keys,
            )
        )
    else:
        copies.append(_copy(EMBEDDING_CACHE, "not checked: no embedding model loaded in this process", None))

    copies.append(
        _copy(
            "result cache",
            "entries hold passage IDs and ranks only, never text; a hit is re-read from the lexical store"
            " with the asker's filter, so no entry can return the document; the tenant's generation was bumped",
            0,
            record.cache_invalidated_at,
            physical_applies=False,
        )
    )

    deny_left = components.deny.lookup(target.tenant, [target.doc_id])
    copies.append(
        _copy(
            "deny set",
            "entries of the document left after every store confirmed the deletion",
            len(deny_left),
            record.removed_at.get(lexical.name),
            physical_applies=False,
        )
    )

    events = components.events
    # Every version: a record above the deleted one (a dead-lettered upsert) holds the document's text too.
    found = events.remnants(target.tenant, target.doc_id, None)
    kafka = events.removal == "compaction"
    for copy, topic, checked in (
        ("event log", "documents", "upsert records of the document, at any version, carrying content"),
        ("dead-letter topic", "dlq", "dead letters of the document still carrying its bytes"),
    ):
        left = int(found.get(topic, 0))
        extra: dict[str, Any] = {}
        if kafka:
            # Read from the broker now: none left means compaction removed them from its files.
            extra["compaction_bound_s"] = found.get("compaction_bound_s")
            extra["observed_compacted"] = left == 0
        copies.append(
            _copy(
                copy,
                checked + (" (every record of the key's partition, read now)" if kafka else ""),
                left,
                None,
                _physical(purges, EVENT_LOG, seq),
                physical_applies=not kafka,
                **extra,
            )
        )

    copies.append(_connector_copy(components, target))

    state = components.docs.get(target.tenant, target.doc_id)
    copies.append(
        _copy(
            "document state",
            "the indexer's record of the document: a tombstone (version, ACL entries, no content)",
            0 if state is not None and state.deleted else 1,
            None,
            physical_applies=False,
            tombstone_version=state.applied_version if state is not None and state.deleted else None,
        )
    )

    links, head = audit.chain()
    problems = verify(links, head)
    known = [c["remnants"] for c in copies if c["remnants"] is not None]
    physical_pending = [
        c["copy"] for c in copies if c["removed_physically_at"] is None or (c.get("observed_compacted") is False)
    ]
    unchecked = [c["copy"] for c in copies if c["remnants"] is None]
    return {
        "tenant": target.tenant,
        "doc_id": target.doc_id,
        "path": doc_path(target.doc_id),
        "deletion": {
            "event_id": record.event_id,
            "version": record.version,
            "versions_removed": details.get("versions", []),
            "passages_removed": record.passages_removed,
            "received_at": record.received_at.isoformat(),
            "erase": record.erase,
            "audit_seq": seq,
        },
        "earlier_deletions": [r.event_id for r in target.earlier],
        "copies": copies,
        "remnants": sum(known),
        "unchecked": unchecked,
        "physical_pending": physical_pending,
        "complete": not sum(known) and not unchecked and not physical_pending and not problems,
        # Counted and identified as `ragsync audit verify` does, from the committed trail.
        "audit_trail": {
            "records": len(links),
            "head": f"{links[-1].seq}:{links[-1].hash}" if links else None,
            "intact": not problems,
            "problems": len(problems),
        },
    }


def _connector_copy(components: Components, target: Target) -> dict[str, Any]:
    try:
        source, path = split_doc_id(target.doc_id)
    except ValueError:
        return _copy("connector state", "not checked: the doc ID names no source", None)
    db = components.settings.home / "connectors.db"
    if not Path(db).exists():
        return _copy("connector state", "no connector state in this home (published by another host)", 0)
    from connectors.state import ConnectorState

    state = ConnectorState(db)
    try:
        row = state.get(source, target.tenant, path)
    finally:
        state.close()
    return _copy(
        "connector state",
        f"source {source!r}: the document's row is marked deleted (it keeps a version and hashes, no content)",
        0 if row is None or row.deleted else 1,
        None,
        physical_applies=False,
    )
