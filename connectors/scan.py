"""Turn a connector's listing into events: change detection and emission, separate from any source.

Per document: an unchanged fingerprint and ACL costs no read; otherwise the content is fetched and
hashed, and only a real content change becomes an upsert, only an ACL change an ACL event. State
for a document is written after `publish` returned, so a failed publish (which propagates) leaves
the document to be re-emitted by the next run. Under a new version: the failed event may have
reached the log anyway (an acknowledgement lost in a broker restart), and two different events
under one version would let the stale one win (ConnectorState.next_version says how).

Deletes are the dangerous part: a document missing from the listing is deleted only when the
listing is known to be complete (no connector error, no failed fetch). A permission hiccup or an
unmounted share must never wipe an index.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from pydantic import ValidationError

from connectors.base import Skipped, SourceConnector, SourceDocument
from connectors.formats import BinaryContent, Content, Unreadable, read_content
from connectors.state import ConnectorState, DocRecord
from schemas._time import utcnow
from schemas.events import (
    MAX_EVENT_BYTES,
    AclPayload,
    DeletePayload,
    Event,
    EventKind,
    UpsertPayload,
    make_event_id,
    qualify_doc_id,
    shown,
)


class _ContentError(Exception):
    """A failure already phrased for the report ("cannot read: ...")."""


def _describe(doc: SourceDocument, exc: Exception) -> str:
    """ValueErrors carry messages meant for people; anything else is named by its type."""
    name = shown(doc.doc_id)  # one line, even for a file named with a newline
    if isinstance(exc, ValidationError):
        first = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        return f"{name}: invalid document: {exc.error_count()} error(s): {first}"
    if isinstance(exc, ValueError):
        return f"{name}: {exc}"
    return f"{name}: cannot index: {type(exc).__name__}: {exc}"


@dataclass
class ScanReport:
    upserts: int = 0
    acl_changes: int = 0
    deletes: int = 0
    unchanged: int = 0
    errors: list[str] = field(default_factory=list)
    deletes_skipped: bool = False
    locked: int = 0  # ACL events that made documents under a broken manifest readable by nobody
    skipped: list[Skipped] = field(default_factory=list)  # files seen and not indexed, with why
    decoded: list[str] = field(default_factory=list)  # documents that were not UTF-8, with the encoding used


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


async def scan(
    connector: SourceConnector,
    state: ConnectorState,
    publish: Callable[[Event], None],
    *,
    progress: Callable[[int], None] | None = None,
    now: Callable[[], datetime] = utcnow,
    force: bool = False,
    publish_many: Callable[[Sequence[Event]], None] | None = None,
    batch: int = 256,
    allow_deletes: bool = True,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> ScanReport:
    """`force` re-emits every document as an upsert (after a chunker change); deletes are unaffected.

    With `publish_many` (durable when it returns, like `publish`), events are published `batch` at a
    time and their state rows written after each batch: a scan of many small files costs one log sync
    per batch, not one per file, and a crash loses at most an unpublished batch, which the next scan
    re-emits with the same versions. `allow_deletes=False` is a pass that may only add and change
    (a watcher's change-driven pass); deletions then wait for a full pass.
    """
    report = ScanReport()
    source = connector.name
    state.claim(source, connector.location)  # SourceConflict: the name already namespaces another source
    seen: set[tuple[str, str]] = set()
    own_errors: list[str] = []
    fetch_failed = False
    pending: list[tuple[Event, DocRecord]] = []

    def issued(rows: Sequence[tuple[Event, DocRecord]]) -> None:
        """Spend the versions before publishing (state rows are keyed by the unqualified doc_id)."""
        state.issue(source, [(row.tenant, row.doc_id, event.version) for event, row in rows])

    def emit(event: Event, row: DocRecord) -> None:
        if publish_many is None:
            issued([(event, row)])
            publish(event)
            state.put(source, row)
            return
        pending.append((event, row))
        if len(pending) >= batch:
            flush()

    def flush() -> None:
        if pending and publish_many is not None:
            issued(pending)
            publish_many([event for event, _ in pending])
            for _, row in pending:
                state.put(source, row)
            pending.clear()

    def delete(record: DocRecord, reason: str) -> None:
        version = state.next_version(source, record.tenant, record.doc_id, record.version)
        event = build_event(source, record.tenant, record.doc_id, version, DeletePayload(reason=reason), now())
        emit(event, replace(record, version=version, deleted=True))
        report.deletes += 1

    def lock(doc: SourceDocument) -> None:
        """Readable by nobody, under every tenant it is indexed for; never deleted for being unreadable."""
        for record in state.live_elsewhere(source, doc.doc_id, ""):
            seen.add((record.tenant, record.doc_id))
            if record.acl == ():
                report.unchanged += 1
                continue
            version = state.next_version(source, record.tenant, record.doc_id, record.version)
            locked = build_event(source, record.tenant, record.doc_id, version, AclPayload(acl=()), now())
            issued([(locked, record)])
            publish(locked)
            state.put(source, replace(record, version=version, acl=()))
            report.acl_changes += 1
            report.locked += 1

    async for doc in connector.documents():
        if progress is not None:
            progress(1)
        if doc.locked:
            lock(doc)
            continue
        seen.add((doc.tenant, doc.doc_id))
        # Seen under a new tenant: the old tenant loses it now, whether or not this scan completes.
        for moved in state.live_elsewhere(source, doc.doc_id, doc.tenant):
            delete(moved, "moved to another tenant")
        acl = tuple(sorted(set(doc.acl)))
        record = state.get(source, doc.tenant, doc.doc_id)
        if record is not None and record.deleted:
            record_live: DocRecord | None = None
        else:
            record_live = record
        if (
            record_live is not None
            and not force
            and record_live.fingerprint == doc.fingerprint
            and record_live.acl == acl
        ):
            report.unchanged += 1
            continue
        next_version = state.next_version(source, doc.tenant, doc.doc_id, record.version if record else 0)
        acl_changed = record_live is not None and record_live.acl != acl
        event: Event | None = None
        content_hash: str | None = None
        try:
            try:
                data = await doc.fetch()
            except Exception as exc:  # any source failure: report it, and keep this scan from deleting
                fetch_failed = True
                raise _ContentError(f"cannot read: {exc}") from exc
            content_hash = hashlib.sha256(data).hexdigest()
            if record_live is None or force or record_live.content_hash != content_hash:
                try:
                    content = await asyncio.to_thread(read_content, doc.content_type, data)
                except BinaryContent as exc:
                    report.skipped.append(Skipped(doc.doc_id, "binary", str(exc)))
                    raise
                except Unreadable as exc:
                    report.skipped.append(Skipped(doc.doc_id, "unreadable", str(exc)))
                    raise
                if content.encoding is not None:
                    report.decoded.append(f"{doc.doc_id}: decoded as {content.encoding}")
                payload = upsert_payload(doc, data, content_hash, acl, content=content)
                event = build_event(source, doc.tenant, doc.doc_id, next_version, payload, now())
                size = len(event.model_dump_json().encode())
                if size > max_event_bytes:
                    # Published, it would fail in the log (Kafka refuses it) and stop every later scan.
                    detail = f"its text makes a {size}-byte event, limit {max_event_bytes}"
                    report.skipped.append(Skipped(doc.doc_id, "too large", detail))
                    raise _ContentError(f"too large to index: {detail}")
        except Exception as exc:
            # One document's bad content (an unreadable file, an impossible date, a parser bug) is
            # that document's error, never a stopped scan. It is seen, so it is not deleted, and it
            # keeps its last good content; but a new ACL does not depend on the content and is
            # applied now: a revocation must never wait for someone to fix a typo in the text.
            own_errors.append(f"{doc.doc_id}: {exc}" if isinstance(exc, _ContentError) else _describe(doc, exc))
            if not acl_changed or record_live is None:
                continue
            content_hash = None
        if event is not None:
            report.upserts += 1
        elif acl_changed and record_live is not None:
            event = build_event(source, doc.tenant, doc.doc_id, next_version, AclPayload(acl=acl), now())
            report.acl_changes += 1
        else:
            assert record_live is not None
            state.put(source, replace(record_live, fingerprint=doc.fingerprint))
            report.unchanged += 1
            continue
        if content_hash is None and record_live is not None:
            # Only the ACL moved: the old content (and its fingerprint, so the next scan reads the
            # file again and reports it again until it is fixed) stays as the last good one.
            emit(event, replace(record_live, version=event.version, acl=acl))
        else:
            assert content_hash is not None
            emit(
                event,
                DocRecord(doc.tenant, doc.doc_id, event.version, content_hash, acl, doc.fingerprint, deleted=False),
            )

    flush()
    report.errors = [*connector.errors, *own_errors]
    report.skipped = [*connector.skipped, *report.skipped]
    if connector.errors or fetch_failed:
        report.deletes_skipped = True
        # Deletes wait for a complete listing, but a document gone from under a broken manifest
        # must not keep its old readers meanwhile: it is locked like the documents still there.
        locked_folders: tuple[str, ...] = getattr(connector, "locked_folders", ())
        for record in state.live(source):
            gone = (record.tenant, record.doc_id) not in seen
            if gone and any(f == "" or record.doc_id.startswith(f + "/") for f in locked_folders):
                lock(SourceDocument(record.doc_id, record.tenant, (), "", "text", "", "", _no_fetch, locked=True))
        return report
    if not allow_deletes:
        return report
    for record in state.live(source):
        if (record.tenant, record.doc_id) not in seen:
            delete(record, "removed at source")
    flush()
    return report


async def _no_fetch() -> bytes:
    raise RuntimeError("a locked document is never read")


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
