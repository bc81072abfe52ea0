"""Passage <-> store document mapping shared by the Qdrant and Elasticsearch adapters.

Elasticsearch stores the whole passage (it is the cluster's store of record for text); the Qdrant
adapters store `passage_to_point`, IDs and filter fields only (see indexer.ports.VectorHit).

Dates are stored as ISO-8601 UTC strings (both stores index them as datetimes) and an open
validity is stored as an absent `superseded_on`, which both stores can test for.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from indexer.ports import StoredPassage, VectorHit
from schemas._time import to_epoch_ms, to_utc
from schemas.passages import Passage
from schemas.principal import AccessFilter, since_key

_POINT_NAMESPACE = uuid.UUID("6f1c1f2e-8d1b-4a8e-9a57-0d3c2b7f5e10")


def point_id(tenant: str, passage_id: str) -> str:
    """Stable UUID per (tenant, passage): stores that want UUID keys get one, re-upserts overwrite."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{tenant}\x00{passage_id}"))


def iso(value: datetime) -> str:
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def since_ms(passage_since: Mapping[str, datetime]) -> dict[str, int]:
    """Grant instants keyed by `since_key(entry)` (epoch ms): what a vector store's filter compares."""
    return {since_key(e): to_epoch_ms(t) for e, t in sorted(passage_since.items())}


SINCE_OFFSET = 2**53
"""Added to epoch ms before they are written as fixed-width text, so instants before 1970 still sort."""


def since_text(passage_since: Mapping[str, datetime]) -> dict[str, str]:
    """Grant instants keyed by `since_key(entry)`, as fixed-width text that sorts as the instants do
    (Elasticsearch's `flattened` type compares its values as keywords)."""
    return {since_key(e): since_token(to_epoch_ms(t)) for e, t in sorted(passage_since.items())}


def since_token(ms: int) -> str:
    return f"{ms + SINCE_OFFSET:017d}"


def passage_to_doc(passage: Passage) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "passage_id": passage.passage_id,
        "doc_id": passage.doc_id,
        "version": passage.version,
        "anchor": passage.anchor,
        "tenant": passage.tenant,
        "acl": list(passage.acl),
        "acl_since": since_text(passage.acl_since),
        "acl_entries_since": {e: iso(t) for e, t in sorted(passage.acl_since.items())},
        "effective_from": iso(passage.effective_from),
        "heading_path": list(passage.heading_path),
        "title": passage.title,
        "text": passage.text,
        "source_url": passage.source_url,
        "chunker_version": passage.chunker_version,
    }
    if passage.superseded_on is not None:
        doc["superseded_on"] = iso(passage.superseded_on)
    return doc


def passage_to_point(passage: Passage) -> dict[str, Any]:
    """A vector store's payload: IDs and the fields of the permission filter, no text (see VectorHit)."""
    doc: dict[str, Any] = {
        "passage_id": passage.passage_id,
        "doc_id": passage.doc_id,
        "version": passage.version,
        "tenant": passage.tenant,
        "acl": list(passage.acl),
        "acl_since": since_ms(passage.acl_since),
        "effective_from": iso(passage.effective_from),
    }
    if passage.superseded_on is not None:
        doc["superseded_on"] = iso(passage.superseded_on)
    return doc


def granted_as_of(payload: Mapping[str, Any], access: AccessFilter) -> bool:
    """The grant-instant clause of both Qdrant adapters' filters, on a point's payload: one of the asker's
    entries is in its ACL with no grant instant, or one not later than the instant asked about.

    The instants are keyed by entry (`acl_since.<key>`), so no payload index can hold them and a filter
    holding them made Qdrant read every candidate point's payload. The adapters search on the indexed
    conditions and check this on the hits instead (a hit failing it means: search again with the whole
    filter), so it must admit exactly what the filter's clause admits (schemas.principal.grants_allow)."""
    acl = payload.get("acl") or []
    since = payload.get("acl_since") or {}
    as_of_ms = float(to_epoch_ms(access.as_of))
    for entry in access.entries:
        if entry in acl:
            instant = since.get(since_key(entry)) if isinstance(since, Mapping) else None
            if instant is None or float(instant) <= as_of_ms:
                return True
    return False


def stored_passage(payload: Mapping[str, Any]) -> StoredPassage:
    """What a vector store holds for a point's permission filter, for `ragsync verify`."""
    acl = sorted(payload.get("acl") or [])
    since = payload.get("acl_since") or {}
    pairs = tuple((e, int(since[since_key(e)])) for e in acl if since_key(e) in since)
    return StoredPassage(str(payload["passage_id"]), int(payload["version"]), tuple(acl), pairs)


def point_to_hit(payload: dict[str, Any], score: float) -> VectorHit:
    return VectorHit(str(payload["passage_id"]), str(payload["doc_id"]), int(payload["version"]), score)


def doc_to_passage(doc: dict[str, Any]) -> Passage:
    return Passage.model_validate(
        {
            "passage_id": doc["passage_id"],
            "doc_id": doc["doc_id"],
            "version": doc["version"],
            "anchor": doc["anchor"],
            "tenant": doc["tenant"],
            "acl": doc.get("acl") or [],
            "acl_since": {e: t for e, t in (doc.get("acl_entries_since") or {}).items() if e in (doc.get("acl") or [])},
            "effective_from": doc["effective_from"],
            "superseded_on": doc.get("superseded_on"),
            "heading_path": doc.get("heading_path") or [],
            "title": doc.get("title", ""),
            "text": doc["text"],
            "source_url": doc["source_url"],
            "chunker_version": doc["chunker_version"],
        }
    )
