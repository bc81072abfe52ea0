"""Webhook pushes as a source: an external system POSTs each document change as it happens.

    POST /v1/webhooks/{source}
    X-Ragsync-Timestamp: <unix seconds when the pusher signed it>
    X-Ragsync-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>." + the raw body, keyed with that source's secret>

    {"action": "upsert", "tenant": "acme", "doc_id": "kb/refunds", "content": "# Refunds ...",
     "content_type": "markdown", "acl": ["group:staff"], "title": "Refunds",
     "source_url": "https://kb.example/refunds", "effective_from": "2026-01-01", "sequence": 17}
    {"action": "acl", "tenant": "acme", "doc_id": "kb/refunds", "acl": ["group:hr"], "sequence": 18}
    {"action": "delete", "tenant": "acme", "doc_id": "kb/refunds", "sequence": 19}

A pusher is a connector that already knows what changed, so there is no scan: each push is
compared with what this source last published for the document (connectors.state, the same
durable memory the scanner uses, under the source's name) and becomes at most one event, with the
next version and the same deterministic event ID rule as scanned sources.

Contract with the pusher:
- 202 `{"status": "published", "event_id", "version", "kind"}`: the event is durably in the log.
  The answer is sent only after `publish` returned, and the state row is written only after that,
  so a crash in between makes the retry re-publish the same version and event ID (deduplicated
  downstream), never skip it.
- 200 `{"status": "unchanged", ...}`: a newer push (higher sequence) whose content equals what is
  already published; nothing is published, the sequence high-water mark moves.
- 503: the event log refused the event; nothing changed, retry later.
- 401 bad signature or timestamp, 403 a tenant this source may not push for, 422 invalid body
  (strict: unknown fields such as "groups" are rejected rather than ignored, because an ignored ACL
  field would publish a document readable by the wrong people), 404 an unknown source or an ACL
  change for a document this source never published, 409 a replay or a stale push (below), 413 too big.

Replays and delivery order: a captured push must never be able to undo a later one (replaying an
old signed upsert after an ACL push would publish the old readers again). Two rules close it:
- the signature covers a timestamp, and a push signed outside ±`max_skew_s` (5 min by default) of
  the server's clock is refused (409, status "replay"): a captured body is useless after that;
- `sequence` is required: any number the source increases with every change of the document (a
  revision id, a counter). A push whose sequence is not above the last one accepted for the
  document is refused (409, status "stale"), whether it is a replay inside the window, a retry that
  arrives after a newer push, or an old upsert after a delete. Refused pushes are never published.
The last accepted sequence is kept in the state row's `fingerprint`, written only after publishing,
so a retry after a 503 (nothing published) is accepted.

Identity: the pushed `doc_id` is a path inside the source's own namespace; the event and every
store carry `<source>:<doc_id>`, so a pusher can never name, let alone re-ACL, a drive's or another
pusher's document, whatever it puts in `doc_id`. Each source is configured with its own secret and
the tenants it may push for (settings `[webhooks.<source>]`); a source that is not configured does
not exist (404), and its name is bound to the webhook in connector state, so a drive cannot take
the same namespace.

Security: the signature covers the timestamp and the body, not the URL, but it is checked with the
secret of the source named in the URL, so one pusher's secret signs nothing for another. Serve it
over TLS.

Threading: `state` is only used on the event loop's thread, because ConnectorState's SQLite
connection belongs to the thread that opened it. Open it on the thread that runs the server
(`uvicorn.run` runs the loop on the calling thread). `publish` runs in a worker thread, so a slow
log does not stall other requests; pushes for the same document are serialized so two concurrent
pushes cannot both take the same version.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from connectors.base import SourceDocument, TextContentType
from connectors.drive import TENANT_PATTERN, format_validation_error
from connectors.source_events import build_event, upsert_payload
from connectors.state import ConnectorState, DocRecord
from schemas._digits import ascii_uint
from schemas._time import utcnow
from schemas.events import (
    SOURCE_NAME_PATTERN,
    AclEntry,
    AclPayload,
    DeletePayload,
    Event,
    Identifier,
    UpsertPayload,
    valid_source_name,
)
from schemas.instants import instant_validator

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Ragsync-Signature"
TIMESTAMP_HEADER = "X-Ragsync-Timestamp"
MAX_SKEW_S = 300.0
"""How far a push's signed timestamp may be from the server's clock, either way."""
MAX_BODY_BYTES = 8 * 1024 * 1024
"""Keeps the resulting event under the Kafka log's 10 MiB message limit."""
MIN_SECRET_CHARS = 16
WEBHOOK_LOCATION = "webhook"
"""What a webhook source's name is bound to in connector state (ConnectorState.claim)."""


@dataclass(frozen=True, slots=True)
class WebhookSource:
    """One pusher: its own secret, and the only tenants it may push documents for."""

    secret: str
    tenants: frozenset[str]

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_CHARS:
            raise ValueError(f"a webhook secret needs at least {MIN_SECRET_CHARS} characters")
        if not self.tenants:
            raise ValueError("a webhook source needs at least one tenant it may push for")


EffectiveFrom = Annotated[datetime, instant_validator("effective_from")]
"""The forms a date stated in content may take, with the same meaning (schemas.instants)."""


class _Push(BaseModel):
    """Strict: no coercion, no unknown fields (see the module docstring for why)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tenant: str = Field(pattern=TENANT_PATTERN)
    doc_id: Identifier
    sequence: int = Field(ge=0)  # required: strictly increasing per document (see the module docstring)


class UpsertPush(_Push):
    action: Literal["upsert"]
    content: str
    acl: tuple[AclEntry, ...]  # required: a forgotten ACL must not silently mean "nobody" or "everybody"
    content_type: TextContentType = "markdown"  # a push carries text; PDF and DOCX come from drives
    title: str | None = None  # None: the title stated in the content, else the doc ID
    source_url: str = ""
    effective_from: EffectiveFrom | None = None  # None: the date stated in the content, if any


class AclPush(_Push):
    action: Literal["acl"]
    acl: tuple[AclEntry, ...]


class DeletePush(_Push):
    action: Literal["delete"]
    reason: str = Field(default="removed at source", max_length=200)


Push = Annotated[UpsertPush | AclPush | DeletePush, Field(discriminator="action")]
_PUSH: TypeAdapter[UpsertPush | AclPush | DeletePush] = TypeAdapter(Push)


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The X-Ragsync-Signature a pusher sends with `X-Ragsync-Timestamp: <timestamp>`:
    `sha256=<hex HMAC-SHA256 of "<timestamp>." + the raw body>`."""
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    """Both headers of a push signed at `timestamp` (unix seconds): what a pusher (or a test) sends."""
    return {TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: sign(secret, body, timestamp)}


def parse_timestamp(header: str | None) -> int | None:
    """Unix seconds in ASCII digits (at most 12), else None: '²' or '١' are refused like any bad header."""
    return ascii_uint((header or "").strip(), max_digits=12)


def signature_ok(secret: str, body: bytes, header: str | None, timestamp: int) -> bool:
    """Constant-time check of the header against timestamp and body, so timing reveals nothing of the digest."""
    if not header:
        return False
    expected = sign(secret, body, timestamp).encode()
    given = header.strip()
    scheme, _, digest = given.partition("=")
    return hmac.compare_digest(expected, f"{scheme.lower()}={digest.lower()}".encode("utf-8", "replace"))


def _push_hash(push: UpsertPush, content_hash: str) -> str:
    """What makes two upserts the same: content and every field outside it that ends up indexed.

    The scanner hashes bytes only because a file's title and date live in its bytes; a push carries
    them beside the content, so a push that only moves `effective_from` is a change, not a replay.
    """
    fields = [
        content_hash,
        push.content_type,
        push.title,
        push.source_url,
        push.effective_from.isoformat() if push.effective_from else None,
    ]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


class _Refused(Exception):
    """A push that is valid but cannot be applied (unknown document, stale): answered, never published."""

    def __init__(self, status_code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.extra = extra


def _answer(status_code: int, **body: Any) -> JSONResponse:
    return JSONResponse(body, status_code=status_code)


def _error(status_code: int, message: str, **extra: Any) -> JSONResponse:
    return _answer(status_code, error=message, **extra)


def create_webhook_app(
    publish: Callable[[Event], None],
    sources: Mapping[str, WebhookSource],
    state: ConnectorState,
    *,
    now: Callable[[], datetime] = utcnow,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_skew_s: float = MAX_SKEW_S,
) -> Starlette:
    """`POST /v1/webhooks/{source}` as an app of its own, to run alone or be mounted into another.

    `publish` must be durable when it returns (see `streams.ports.publish_durably`) and callable from a worker
    thread (both event logs are). `state` must have been opened on the thread that runs the loop.
    Raises SourceConflict when a source's name already namespaces another source (a drive, a wiki).
    """
    if not sources:
        raise ValueError("no webhook source configured")
    for name in sources:
        if not valid_source_name(name):
            raise ValueError(f"invalid webhook source name {name!r} (expected {SOURCE_NAME_PATTERN})")
        state.claim(name, WEBHOOK_LOCATION)
    locks: weakref.WeakValueDictionary[tuple[str, str, str], anyio.Lock] = weakref.WeakValueDictionary()

    async def receive(request: Request) -> JSONResponse:
        name = request.path_params["source"]
        config = sources.get(name)
        if config is None:
            return _error(404, f"no webhook source {name!r} is configured")
        body = await _read_body(request, max_body_bytes)
        if body is None:
            return _error(413, f"body larger than {max_body_bytes} bytes")
        signed_at = parse_timestamp(request.headers.get(TIMESTAMP_HEADER))
        if signed_at is None:
            return _error(401, f"missing or invalid {TIMESTAMP_HEADER} (expected unix seconds)")
        if not signature_ok(config.secret, body, request.headers.get(SIGNATURE_HEADER), signed_at):
            return _error(
                401, f"missing or invalid {SIGNATURE_HEADER} (expected sha256=<hex HMAC of '<timestamp>.' + the body>)"
            )
        skew = now().timestamp() - signed_at
        if abs(skew) > max_skew_s:
            return _error(
                409,
                f"replayed or mis-timed push: signed {skew:+.0f} s from now, outside ±{max_skew_s:g} s",
                status="replay",
            )
        try:
            push = _PUSH.validate_json(body)
        except ValidationError as exc:
            return _error(422, f"invalid push: {format_validation_error(exc)}")
        if push.tenant not in config.tenants:
            return _error(403, f"source {name!r} may not push for tenant {push.tenant!r}")

        source = name
        key = (source, push.tenant, push.doc_id)
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = anyio.Lock()
        async with lock:
            record = state.get(source, push.tenant, push.doc_id)
            try:
                plan = _plan(source, push, record, now())
            except _Refused as exc:
                return _error(exc.status_code, str(exc), **exc.extra)
            except ValueError as exc:  # a date stated in the content that cannot be read
                return _error(422, f"invalid push: {exc}")
            if isinstance(plan, _Unchanged):
                if plan.row is not None:
                    state.put(source, plan.row)
                version = record.version if record is not None else None
                return _answer(200, status="unchanged", event_id=None, version=version, kind=push.action)
            event = plan.event
            # Shielded: once publish returned, the state row must be written even if the client left.
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(publish, event)
                except Exception as exc:
                    log.warning("webhook %s: publish of %s v%d failed: %s", source, event.key, event.version, exc)
                    return _error(503, f"event log unavailable, retry later: {exc}")
                state.put(source, plan.row)
        return _answer(202, status="published", event_id=event.event_id, version=event.version, kind=event.kind.value)

    return Starlette(routes=[Route("/v1/webhooks/{source}", receive, methods=["POST"])])


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The raw body (the signature is over these exact bytes), or None once it exceeds `limit`."""
    declared = ascii_uint(request.headers.get("content-length", ""), max_digits=32)
    if declared is not None and declared > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


@dataclass(frozen=True, slots=True)
class _Publish:
    event: Event
    row: DocRecord  # written only after `event` was published


@dataclass(frozen=True, slots=True)
class _Unchanged:
    row: DocRecord | None = None  # set when only the sequence high-water mark moved


_Plan = _Publish | _Unchanged


def _plan(source: str, push: UpsertPush | AclPush | DeletePush, record: DocRecord | None, at: datetime) -> _Plan:
    """The event a push becomes and the state row to write after publishing it, or a no-op.

    Raises _Refused for a push that must not be applied, ValueError for an unreadable content date.
    """
    live = record if record is not None and not record.deleted else None
    version = (record.version if record is not None else 0) + 1
    # Written by this module as str(sequence): any length a pusher's integer had (the default int limit).
    applied_seq = ascii_uint(record.fingerprint, max_digits=4300) if record is not None else None
    if applied_seq is not None and push.sequence <= applied_seq:  # first: a replay is never "unchanged"
        raise _Refused(
            409,
            f"stale push: sequence {push.sequence} is not above {applied_seq}, already accepted for this document",
            status="stale",
            version=record.version if record is not None else None,
        )
    seq = str(push.sequence)
    payload: UpsertPayload | AclPayload | DeletePayload

    if isinstance(push, UpsertPush):
        acl = tuple(sorted(set(push.acl)))
        content = push.content.encode()
        content_hash = hashlib.sha256(content).hexdigest()
        push_hash = _push_hash(push, content_hash)
        row = DocRecord(push.tenant, push.doc_id, version, push_hash, acl, seq, deleted=False)
        if live is not None and live.content_hash == push_hash:
            if live.acl == acl:
                return _unchanged(push, record, applied_seq)
            payload = AclPayload(acl=acl)  # only readers changed: no re-chunking, and the fast topic
        else:
            doc = SourceDocument(
                doc_id=push.doc_id,
                tenant=push.tenant,
                acl=acl,
                title=push.doc_id,
                content_type=push.content_type,
                source_url=push.source_url,
                fingerprint=seq,
                fetch=_no_fetch,
                effective_from=push.effective_from,
            )
            payload = upsert_payload(doc, content, content_hash, acl)
            if push.title is not None:  # the pusher's title is authoritative; the scanner's file name is not
                payload = payload.model_copy(update={"title": push.title})
    elif isinstance(push, AclPush):
        if live is None:
            raise _Refused(404, f"no live document {push.tenant}/{push.doc_id} from {source!r}: push an upsert first")
        acl = tuple(sorted(set(push.acl)))
        if live.acl == acl:
            return _unchanged(push, record, applied_seq)
        row = replace(live, version=version, acl=acl, fingerprint=seq)
        payload = AclPayload(acl=acl)
    else:
        if live is None:  # never published, or already deleted: deleting again changes nothing
            return _unchanged(push, record, applied_seq)
        row = replace(live, version=version, deleted=True, fingerprint=seq)
        payload = DeletePayload(reason=push.reason)

    return _Publish(build_event(source, push.tenant, push.doc_id, version, payload, at), row)


def _unchanged(push: _Push, record: DocRecord | None, applied_seq: int | None) -> _Plan:
    """A no-op; a higher sequence still moves the high-water mark so older deliveries stay refused."""
    if record is not None and (applied_seq is None or push.sequence > applied_seq):
        return _Unchanged(replace(record, fingerprint=str(push.sequence)))
    return _Unchanged()


async def _no_fetch() -> bytes:
    """A pushed document arrives with its content; nothing is ever fetched."""
    raise RuntimeError("a pushed document has no fetch")
