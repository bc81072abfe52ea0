"""The events a source publishes, built alike by the pull scanner (connectors.scan) and the push
sources (connectors.webhook): one envelope rule, so an event's ID is the same whichever path made
it, and one way of reading fetched content into an upsert, so both read titles and dates alike.
"""

from __future__ import annotations

from datetime import datetime

from connectors.base import SourceDocument
from connectors.formats import Content, read_content
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id, qualify_doc_id


def build_event(
    source: str,
    tenant: str,
    path: str,
    version: int,
    payload: UpsertPayload | AclPayload | DeletePayload,
    occurred_at: datetime,
) -> Event:
    """The envelope with its deterministic ID; shared with push sources so their IDs follow the same rule.

    `path` is the document's name within `source`; the event carries it namespaced, `<source>:<path>`.
    """
    kind = EventKind(payload.kind)
    doc_id = qualify_doc_id(source, path)
    return Event(
        event_id=make_event_id(source, tenant, doc_id, version, kind),
        kind=kind,
        tenant=tenant,
        doc_id=doc_id,
        version=version,
        occurred_at=occurred_at,
        source=source,
        payload=payload,
    )


def upsert_payload(
    doc: SourceDocument, data: bytes, content_hash: str, acl: tuple[str, ...], *, content: Content | None = None
) -> UpsertPayload:
    """The upsert for fetched content; shared with push sources (connectors.webhook) so both read metadata alike.

    `content` is `data` already read (connectors.formats); otherwise it is read here: decoded
    without replacement characters, or extracted for PDF and DOCX. A ValueError (BinaryContent,
    Unreadable, a bad effective date) means the document is not to be indexed.
    """
    if content is None:
        content = read_content(doc.content_type, data)
    return UpsertPayload(
        title=content.title or doc.title,
        content=content.text,
        content_type=doc.content_type,
        content_hash=content_hash,
        acl=acl,
        source_url=doc.source_url,
        effective_from=doc.effective_from or content.effective_from,
        extracted=content.extracted,
    )
