"""Passage <-> store document mapping shared by the Qdrant and Elasticsearch adapters.

Elasticsearch stores the whole passage (it is the cluster's store of record for text); the Qdrant
adapters store `passage_to_point`, IDs and filter fields only (see indexer.ports.VectorHit).

Dates are stored as ISO-8601 UTC strings (both stores index them as datetimes) and an open
validity is stored as an absent `superseded_on`, which both stores can test for.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from indexer.ports import VectorHit
from schemas._time import to_utc
from schemas.passages import Passage

_POINT_NAMESPACE = uuid.UUID("6f1c1f2e-8d1b-4a8e-9a57-0d3c2b7f5e10")


def point_id(tenant: str, passage_id: str) -> str:
    """Stable UUID per (tenant, passage): stores that want UUID keys get one, re-upserts overwrite."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{tenant}\x00{passage_id}"))


def iso(value: datetime) -> str:
    return to_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def passage_to_doc(passage: Passage) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "passage_id": passage.passage_id,
        "doc_id": passage.doc_id,
        "version": passage.version,
        "anchor": passage.anchor,
        "tenant": passage.tenant,
        "acl": list(passage.acl),
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
        "effective_from": iso(passage.effective_from),
    }
    if passage.superseded_on is not None:
        doc["superseded_on"] = iso(passage.superseded_on)
    return doc


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
            "effective_from": doc["effective_from"],
            "superseded_on": doc.get("superseded_on"),
            "heading_path": doc.get("heading_path") or [],
            "title": doc.get("title", ""),
            "text": doc["text"],
            "source_url": doc["source_url"],
            "chunker_version": doc["chunker_version"],
        }
    )
