"""Turn a connector's listing into events: change detection and emission, separate from any source.

Per document: an unchanged fingerprint and ACL costs no read; otherwise the content is fetched and
hashed, and only a real content change becomes an upsert, only an ACL change an ACL event. State
for a document is written after `publish` returned, so a failed publish (which propagates) leaves
the document to be re-emitted by the next run. Under a new version: the failed event may have
reached the log anyway (an acknowledgement lost in a broker restart), and two different events
under one version would let the stale one win (ConnectorState.next_version says how).

Revocations never wait for content (issue 18): a scan is two passes. The listing pass publishes
everything the listing decides on its own, at once: ACL changes (narrowed to the readers both the
old and the new ACL admit while the document's content changed too and is not read yet), moves to
another tenant, locks under broken manifests and deletions. The content pass then fetches and reads
each changed document, one at a time, each within the budget `extract` enforces, and publishes
upserts and the ACL widenings that had to wait for their content.

Deletes are the dangerous part: a document missing from the listing is deleted only when the
listing is known to be complete (no connector error). A permission hiccup or an unmounted share
must never wipe an index. A listed document whose bytes cannot be fetched is seen, so never
deleted; it keeps its last good content.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from pydantic import ValidationError

from connectors.base import ContentType, Skipped, SourceConnector, SourceDocument
from connectors.extract import OverBudget
from connectors.formats import BinaryContent, Content, Unreadable, read_content
from connectors.source_events import build_event, upsert_payload
from connectors.state import ConnectorState, DocRecord
from schemas._time import utcnow
from schemas.events import MAX_EVENT_BYTES, AclPayload, DeletePayload, Event, UpsertPayload, shown


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
    narrowed: list[str] = field(default_factory=list)  # documents whose ACL is stricter than the source's, with why
    bounded: list[str] = field(default_factory=list)  # documents whose older revisions were left out, with the bound
    fetch_failed: bool = False  # the source did not deliver some listed document's bytes

    @property
    def complete(self) -> bool:
        """The listing was complete and every listed document was fetched (its content may still be bad)."""
        return not self.deletes_skipped and not self.fetch_failed


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
    extract: Callable[[ContentType, bytes], Content] = read_content,
    max_batch_delay_s: float = 2.0,
) -> ScanReport:
    """`force` re-emits every document as an upsert (after a chunker change); deletes are unaffected.

    Two passes, so that no content ever delays a revocation (issue 18): the listing pass decides
    everything the listing alone decides (ACL narrowings, documents moved to another tenant, locks,
    deletions) and publishes it at once; only then is any content fetched and read. `extract` reads
    fetched bytes (connectors.extract reads them within a time and memory budget; a file over it is
    that file's error).

    With `publish_many` (durable when it returns, like `publish`), events are published `batch` at a
    time, or `max_batch_delay_s` after the first of a batch, and their state rows written after each
    batch: a scan of many small files costs one log sync per batch, not one per file, and a crash
    loses at most an unpublished batch, which the next scan re-emits with the same versions.
    `allow_deletes=False` is a pass that may only add and change (a watcher's change-driven pass);
    deletions then wait for a full pass.
    """
    state.claim(connector.name, connector.location)  # SourceConflict: the name already namespaces another source
    emitter = _Emitter(state, connector.name, publish, publish_many, batch, max_batch_delay_s)
    run = _Scan(connector, state, emitter, now, force, allow_deletes, extract, max_event_bytes)
    to_read = await run.listing_pass(progress)
    run.settle_missing()
    await run.content_pass(to_read)
    return run.finish()


class _Emitter:
    """Publishes events and writes their state rows after the log has them, one at a time or in batches.

    Versions are spent (`state.issue`) before publishing: a publish that fails after reaching the log
    never lets another event reuse its version.
    """

    def __init__(
        self,
        state: ConnectorState,
        source: str,
        publish: Callable[[Event], None],
        publish_many: Callable[[Sequence[Event]], None] | None,
        batch: int,
        max_batch_delay_s: float,
    ) -> None:
        self.state, self.source = state, source
        self.publish, self.publish_many = publish, publish_many
        self.batch, self.max_batch_delay_s = batch, max_batch_delay_s
        self.pending: list[tuple[Event, DocRecord]] = []
        self.pending_since = 0.0

    def issued(self, rows: Sequence[tuple[Event, DocRecord]]) -> None:
        """Spend the versions before publishing (state rows are keyed by the unqualified doc_id)."""
        self.state.issue(self.source, [(row.tenant, row.doc_id, event.version) for event, row in rows])

    def publish_now(self, event: Event, row: DocRecord) -> None:
        """Published at once, whatever the batching: what must not wait behind a batch (a lock)."""
        self.issued([(event, row)])
        self.publish(event)

    def emit(self, event: Event, row: DocRecord) -> None:
        if self.publish_many is None:
            self.issued([(event, row)])
            self.publish(event)
            self.state.put(self.source, row)
            return
        if not self.pending:
            self.pending_since = time.monotonic()
        self.pending.append((event, row))
        if len(self.pending) >= self.batch or time.monotonic() - self.pending_since >= self.max_batch_delay_s:
            self.flush()

    def flush(self) -> None:
        if self.pending and self.publish_many is not None:
            self.issued(self.pending)
            self.publish_many([event for event, _ in self.pending])
            for _, row in self.pending:
                self.state.put(self.source, row)
            self.pending.clear()


@dataclass(frozen=True)
class _ToRead:
    """A listed document whose content the content pass must read: new, changed, or forced."""

    doc: SourceDocument
    live: DocRecord | None  # its indexed state, None when new or deleted
    last_version: int  # the version its next event follows
    acl: tuple[str, ...]  # what the listing says, sorted


class _Scan:
    """One scan's decisions, step by step: `listing_pass`, `settle_missing` (deletions or locks),
    `content_pass`, `finish`. The deletions are decided in `settle_missing` alone."""

    def __init__(
        self,
        connector: SourceConnector,
        state: ConnectorState,
        emitter: _Emitter,
        now: Callable[[], datetime],
        force: bool,
        allow_deletes: bool,
        extract: Callable[[ContentType, bytes], Content],
        max_event_bytes: int,
    ) -> None:
        self.connector, self.state, self.emitter, self.now = connector, state, emitter, now
        self.source = connector.name
        self.force, self.allow_deletes = force, allow_deletes
        self.extract, self.max_event_bytes = extract, max_event_bytes
        self.report = ScanReport()
        self.seen: set[tuple[str, str]] = set()
        self.acl_changed: set[tuple[str, str]] = set()
        self.own_errors: list[str] = []

    # ---- the events a scan emits

    def acl_event(self, record: DocRecord, acl: tuple[str, ...]) -> DocRecord:
        version = self.state.next_version(self.source, record.tenant, record.doc_id, record.version)
        row = replace(record, version=version, acl=acl)
        event = build_event(self.source, record.tenant, record.doc_id, version, AclPayload(acl=acl), self.now())
        self.emitter.emit(event, row)
        if (record.tenant, record.doc_id) not in self.acl_changed:
            self.acl_changed.add((record.tenant, record.doc_id))
            self.report.acl_changes += 1
        return row

    def delete(self, record: DocRecord, reason: str) -> None:
        version = self.state.next_version(self.source, record.tenant, record.doc_id, record.version)
        payload = DeletePayload(reason=reason)
        event = build_event(self.source, record.tenant, record.doc_id, version, payload, self.now())
        self.emitter.emit(event, replace(record, version=version, deleted=True))
        self.report.deletes += 1

    def lock(self, doc_id: str) -> None:
        """Readable by nobody, under every tenant it is indexed for; never deleted for being unreadable."""
        for record in self.state.live_elsewhere(self.source, doc_id, ""):
            self.seen.add((record.tenant, record.doc_id))
            if record.acl == ():
                self.report.unchanged += 1
                continue
            version = self.state.next_version(self.source, record.tenant, record.doc_id, record.version)
            locked = build_event(self.source, record.tenant, record.doc_id, version, AclPayload(acl=()), self.now())
            self.emitter.publish_now(locked, record)
            self.state.put(self.source, replace(record, version=version, acl=()))
            self.report.acl_changes += 1
            self.report.locked += 1

    # ---- the listing pass: what the listing alone decides, published before any content is read

    async def listing_pass(self, progress: Callable[[int], None] | None) -> list[_ToRead]:
        to_read: list[_ToRead] = []
        async for doc in self.connector.documents():
            if progress is not None:
                progress(1)
            if doc.locked:
                self.lock(doc.doc_id)
                continue
            item = self.list_one(doc)
            if item is not None:
                to_read.append(item)
        self.emitter.flush()  # state rows first: the deletions read them
        return to_read

    def list_one(self, doc: SourceDocument) -> _ToRead | None:
        """Publish what the listing decides for this document; what its content must decide, returned."""
        self.seen.add((doc.tenant, doc.doc_id))
        self.report.narrowed.extend(f"{doc.doc_id}: {why}" for why in doc.narrowed)
        # Seen under a new tenant: the old tenant loses it now, whether or not this scan completes.
        for moved in self.state.live_elsewhere(self.source, doc.doc_id, doc.tenant):
            self.delete(moved, "moved to another tenant")
        acl = tuple(sorted(set(doc.acl)))
        record = self.state.get(self.source, doc.tenant, doc.doc_id)
        live = record if record is not None and not record.deleted else None
        if live is not None and live.acl != acl:
            # The same content (fingerprint) takes its new ACL now. Changed content takes only the
            # readers both ACLs admit until it is read: a revocation never waits for a file, and a
            # wider ACL never reaches the old text it may not have been meant for (fail closed).
            narrowed = acl if live.fingerprint == doc.fingerprint else tuple(a for a in live.acl if a in acl)
            if narrowed != live.acl:
                live = self.acl_event(live, narrowed)
        if live is not None and not self.force and live.fingerprint == doc.fingerprint and live.acl == acl:
            if (doc.tenant, doc.doc_id) not in self.acl_changed:
                self.report.unchanged += 1
            return None
        last = live or record
        return _ToRead(doc, live, last.version if last is not None else 0, acl)

    def settle_missing(self) -> None:
        """What is indexed and was not listed: deleted only after a complete listing (a permission hiccup
        or an unmounted share must never wipe an index), locked when gone from under a broken manifest."""
        if self.connector.errors:
            self.report.deletes_skipped = True
            # Deletes wait for a complete listing, but a document gone from under a broken manifest
            # must not keep its old readers meanwhile: it is locked like the documents still there.
            locked_folders = self.connector.locked_folders
            for record in self.state.live(self.source):
                gone = (record.tenant, record.doc_id) not in self.seen
                if gone and any(f == "" or record.doc_id.startswith(f + "/") for f in locked_folders):
                    self.lock(record.doc_id)
        elif self.allow_deletes:
            for record in self.state.live(self.source):
                if (record.tenant, record.doc_id) not in self.seen:
                    self.delete(record, "removed at source")
        self.emitter.flush()

    # ---- the content pass: each document read within its budget, its failure its own

    async def content_pass(self, to_read: list[_ToRead]) -> None:
        for item in to_read:
            item = await self.history(item)
            try:
                event = await _content_event(
                    item.doc,
                    item.live,
                    item.last_version,
                    item.acl,
                    self.source,
                    self.state,
                    self.report,
                    self.extract,
                    self.force,
                    self.now,
                    self.max_event_bytes,
                )
            except _FetchFailed as exc:
                self.report.fetch_failed = True
                self.own_errors.append(f"{shown(item.doc.doc_id)}: {exc}")
                continue
            except Exception as exc:
                # One document's bad content (an unreadable file, an impossible date, a file over its
                # budget, a parser bug) is that document's error, never a stopped scan. It is seen, so it
                # is not deleted, and it keeps its last good content and its fingerprint, so the next
                # scan reads it again and reports it again until it is fixed. Its revocation, if any,
                # went out in the listing pass; a widening waits for content that can be read.
                doc = item.doc
                self.own_errors.append(
                    f"{shown(doc.doc_id)}: {exc}" if isinstance(exc, _ContentError) else _describe(doc, exc)
                )
                continue
            self.content_read(item, event)
        self.emitter.flush()

    async def history(self, item: _ToRead) -> _ToRead:
        """A changed document's earlier revisions (a wiki's history), each an upsert of its own version,
        oldest first, before its current content; the item then follows the last of them. Never for
        unchanged content (under `force` too): re-emitted history would make old text the newest."""
        doc = item.doc
        if doc.earlier is None or (item.live is not None and item.live.fingerprint == doc.fingerprint):
            return item
        try:
            earlier = await doc.earlier(item.live.fingerprint if item.live is not None else None)
        except Exception as exc:  # the history is extra: its failure never holds the current content back
            self.own_errors.append(f"{shown(doc.doc_id)}: earlier revisions not indexed: {exc}")
            return item
        self.own_errors.extend(f"{shown(doc.doc_id)}: {problem}" for problem in earlier.errors)
        if earlier.bounded:
            self.report.bounded.append(f"{doc.doc_id}: {earlier.bounded}")
        live, last = item.live, item.last_version
        for rev in earlier.revisions:
            try:
                event = await _content_event(
                    rev, live, last, item.acl, self.source, self.state, self.report,
                    self.extract, False, self.now, self.max_event_bytes,
                )  # fmt: skip
            except Exception as exc:  # that revision's error; the ACL is the listing's either way
                self.own_errors.append(f"{shown(doc.doc_id)} at {rev.fingerprint}: revision not indexed: {exc}")
                continue
            if event is None:  # the same bytes as the version before it
                continue
            assert isinstance(event.payload, UpsertPayload)
            self.report.upserts += 1
            live = DocRecord(
                doc.tenant, doc.doc_id, event.version, event.payload.content_hash, item.acl, rev.fingerprint
            )
            self.emitter.emit(event, live)
            last = event.version
        return replace(item, live=live, last_version=last)

    def content_read(self, item: _ToRead, event: Event | None) -> None:
        """The upsert of new content; for the same bytes under a new fingerprint (a touch, or an edit
        undone), the content is known, so its ACL may now widen to what the listing says."""
        doc, live, acl = item.doc, item.live, item.acl
        if event is not None:
            assert isinstance(event.payload, UpsertPayload)
            self.report.upserts += 1
            row = DocRecord(doc.tenant, doc.doc_id, event.version, event.payload.content_hash, acl, doc.fingerprint)
            self.emitter.emit(event, row)
            return
        assert live is not None
        if live.acl != acl:
            self.acl_event(replace(live, fingerprint=doc.fingerprint), acl)
        else:
            self.state.put(self.source, replace(live, fingerprint=doc.fingerprint))
            if (doc.tenant, doc.doc_id) not in self.acl_changed:
                self.report.unchanged += 1

    def finish(self) -> ScanReport:
        self.report.errors = [*self.connector.errors, *self.own_errors]
        self.report.skipped = [*self.connector.skipped, *self.report.skipped]
        return self.report


class _FetchFailed(Exception):
    """The source did not deliver a listed document's bytes."""


async def _content_event(
    doc: SourceDocument,
    live: DocRecord | None,
    last_version: int,
    acl: tuple[str, ...],
    source: str,
    state: ConnectorState,
    report: ScanReport,
    extract: Callable[[ContentType, bytes], Content],
    force: bool,
    now: Callable[[], datetime],
    max_event_bytes: int,
) -> Event | None:
    """The upsert for a document's new content, None when its bytes are the ones indexed. Raises
    for content that cannot be indexed (_FetchFailed when the source did not deliver it)."""
    try:
        data = await doc.fetch()
    except Exception as exc:  # any source failure: reported, and the document keeps what it had
        raise _FetchFailed(f"cannot read: {exc}") from exc
    content_hash = hashlib.sha256(data).hexdigest()
    if live is not None and not force and live.content_hash == content_hash:
        return None
    try:
        content = await asyncio.to_thread(extract, doc.content_type, data)
    except BinaryContent as exc:
        report.skipped.append(Skipped(doc.doc_id, "binary", str(exc)))
        raise
    except Unreadable as exc:
        report.skipped.append(Skipped(doc.doc_id, "unreadable", str(exc)))
        raise
    except OverBudget as exc:
        report.skipped.append(Skipped(doc.doc_id, exc.reason, exc.detail))
        raise _ContentError(f"not indexed: {exc.detail}") from exc
    if content.encoding is not None:
        report.decoded.append(f"{doc.doc_id}: decoded as {content.encoding}")
    payload = upsert_payload(doc, data, content_hash, acl, content=content)
    version = state.next_version(source, doc.tenant, doc.doc_id, last_version)
    event = build_event(source, doc.tenant, doc.doc_id, version, payload, now())
    size = len(event.model_dump_json().encode())
    if size > max_event_bytes:
        # Published, it would fail in the log (Kafka refuses it) and stop every later scan.
        detail = f"its text makes a {size}-byte event, limit {max_event_bytes}"
        report.skipped.append(Skipped(doc.doc_id, "too large", detail))
        raise _ContentError(f"too large to index: {detail}")
    return event
