"""Source events. Three kinds travel on three topics so a revocation never queues behind upserts.

An ACL event carries the full new ACL, never a delta: replaying it twice, or after a newer
upsert that already carried the same ACL, leaves the same state.

Doc IDs are namespaced by source: `<source>:<path>`, where `source` is the short, validated name
of the connector that owns the document (a drive, a git wiki, a webhook pusher) and `path` is what
that source calls it (a drive's path relative to its root). Every store and the doc state key
documents by (tenant, doc_id), so the namespace is what keeps one source from touching another's
documents: an event whose doc_id is outside its own source's namespace fails validation and is
dead-lettered, never applied.

IDs (doc IDs, tenants, source names, event IDs, ACL entries) are printed in log lines, reports and
audit records, so none may hold a control character: a doc ID with a newline or a NUL would forge
or cut a log line. Pushes and new documents with one are refused here, at the boundary every
connector goes through; ACL and delete events still name a document indexed before this rule,
so its revocation or deletion is never frozen.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from schemas._time import to_utc, utcnow
from schemas.extracted import ExtractedDocument

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Unicode control characters (C0, DEL, C1) and the line and paragraph separators."""


def control_character(text: str) -> str | None:
    """Why `text` cannot be an ID (its first control character and where), or None when it can."""
    found = _CONTROL.search(text)
    if found is None:
        return None
    return f"contains the control character U+{ord(found.group()):04X} at position {found.start()}"


def shown(text: str) -> str:
    """`text` as it may be printed on one line: itself, or quoted with its control characters escaped."""
    return text if control_character(text) is None else ascii(text)


def _printable(text: str) -> str:
    problem = control_character(text)
    if problem is not None:
        raise ValueError(f"{problem}: IDs appear in log lines and cannot hold one")
    return text


ACL_ENTRY_PATTERN = r"^(group|user):[^\s:\x00-\x1f\x7f-\x9f][^\s\x00-\x1f\x7f-\x9f]*$"
AclEntry = Annotated[str, Field(pattern=ACL_ENTRY_PATTERN)]
UtcDatetime = Annotated[datetime, AfterValidator(to_utc)]
Identifier = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_printable)]
"""An ID from outside (a pushed doc ID): no control characters (see the module docstring)."""
IndexedIdentifier = Annotated[str, Field(min_length=1, max_length=1024)]
"""An ID an ACL or delete event may name: any document ever indexed, printable or not."""

SOURCE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
"""Short and plain: it prefixes every doc ID, and it cannot contain ':', so the first ':' ends it."""
SourceName = Annotated[str, Field(pattern=SOURCE_NAME_PATTERN)]
_SOURCE_NAME = re.compile(SOURCE_NAME_PATTERN)


def valid_source_name(name: str) -> bool:
    return bool(_SOURCE_NAME.fullmatch(name))  # not .match: its '$' also matches before a final newline


def qualify_doc_id(source: str, path: str) -> str:
    """The doc ID every store and event carries for `path` of `source`."""
    if not valid_source_name(source):
        raise ValueError(f"invalid source name {source!r} (expected {SOURCE_NAME_PATTERN})")
    if not path:
        raise ValueError("a document path must not be empty")
    return f"{source}:{path}"


def split_doc_id(doc_id: str) -> tuple[str, str]:
    """(source, path) of a namespaced doc ID; ValueError for one outside any source's namespace."""
    source, sep, path = doc_id.partition(":")
    if not sep or not path or not valid_source_name(source):
        raise ValueError(f"doc id {doc_id!r} is not namespaced by a source (expected <source>:<path>)")
    return source, path


def source_name_from(hint: str, fallback: str) -> str:
    """A default source name from a folder or repository name ("My Docs" -> "my-docs"), else `fallback`."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", hint.lower()).strip("-_")[:32].strip("-_")
    return slug if valid_source_name(slug) else fallback


def doc_path(doc_id: str) -> str:
    """What users type for a document: its path within its source (the whole ID when not namespaced)."""
    try:
        return split_doc_id(doc_id)[1]
    except ValueError:
        return doc_id


TextContentType = Literal["markdown", "html", "text", "csv", "tsv", "rst"]
"""Formats that travel as their text (`content`), decoded by the connector and read by the indexer."""
ExtractedContentType = Literal["pdf", "docx"]
"""Binary formats: the connector extracts their text into `extracted` (schemas.extracted says why)."""
ContentType = Literal[TextContentType, ExtractedContentType]
EXTRACTED_CONTENT_TYPES: frozenset[str] = frozenset(get_args(ExtractedContentType))


MAX_EVENT_BYTES = 10 * 1024 * 1024
"""The largest serialized event every event log takes (Kafka's producer and topics are set for it,
streams/kafka_admin.py): a connector reports a bigger document as too large instead of publishing it."""


class EventKind(StrEnum):
    UPSERT = "upsert"
    ACL = "acl"
    DELETE = "delete"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpsertPayload(_Strict):
    kind: Literal["upsert"] = "upsert"
    title: str = ""
    content: str = ""  # the text, for text formats; "" for extracted ones
    content_type: ContentType
    content_hash: str = Field(min_length=8)  # of the source bytes
    acl: tuple[AclEntry, ...]
    source_url: str
    effective_from: UtcDatetime | None = None
    extracted: ExtractedDocument | None = None  # the text of a binary format (pdf, docx), never its bytes

    @model_validator(mode="after")
    def _content_matches_type(self) -> UpsertPayload:
        if self.content_type in EXTRACTED_CONTENT_TYPES:
            if self.extracted is None or self.content:
                raise ValueError(
                    f"content_type {self.content_type!r} travels as `extracted` text blocks, without `content`"
                )
        elif self.extracted is not None:
            raise ValueError(f"content_type {self.content_type!r} travels as `content`, without `extracted`")
        return self


class AclPayload(_Strict):
    kind: Literal["acl"] = "acl"
    acl: tuple[AclEntry, ...]


class DeletePayload(_Strict):
    kind: Literal["delete"] = "delete"
    reason: str = "removed at source"
    erase: bool = False
    """An erasure on request (`ragsync erase`): physically purged at once rather than on schedule."""


Payload = Annotated[UpsertPayload | AclPayload | DeletePayload, Field(discriminator="kind")]


class Event(_Strict):
    """The envelope every connector emits and every worker validates before it touches a store."""

    event_id: Annotated[str, Field(min_length=8, max_length=128), AfterValidator(_printable)]
    kind: EventKind
    tenant: Identifier = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    doc_id: IndexedIdentifier  # printable for upserts: _new_documents_have_printable_ids
    version: int = Field(ge=1)
    occurred_at: UtcDatetime = Field(default_factory=utcnow)
    source: SourceName
    payload: Payload

    @model_validator(mode="after")
    def _kind_matches_payload(self) -> Event:
        if self.payload.kind != self.kind.value:
            raise ValueError(f"kind {self.kind.value!r} does not match payload kind {self.payload.kind!r}")
        return self

    @model_validator(mode="after")
    def _new_documents_have_printable_ids(self) -> Event:
        """No new document with a control character in its ID; ACL and delete events may still name
        one indexed before the rule, so no revocation or deletion of it is ever refused."""
        problem = control_character(self.doc_id) if self.kind is EventKind.UPSERT else None
        if problem is not None:
            raise ValueError(f"doc_id {problem}: IDs appear in log lines and cannot hold one")
        return self

    @model_validator(mode="after")
    def _source_owns_document(self) -> Event:
        """A source may only write inside its own namespace: the check that stops a takeover."""
        owner, _ = split_doc_id(self.doc_id)
        if owner != self.source:
            raise ValueError(f"source {self.source!r} does not own document {self.doc_id!r} (owned by {owner!r})")
        return self

    @property
    def key(self) -> str:
        """Partition key: one document's events stay in one partition, hence in order."""
        return f"{self.tenant}/{self.doc_id}"


def make_event_id(source: str, tenant: str, doc_id: str, version: int, kind: EventKind) -> str:
    """Deterministic, so a connector that re-emits after a crash produces the same ID."""
    raw = f"{source}\x00{tenant}\x00{doc_id}\x00{version}\x00{kind.value}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]
