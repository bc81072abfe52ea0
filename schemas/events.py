"""Source events. Three kinds travel on three topics so a revocation never queues behind upserts.

An ACL event carries the full new ACL, never a delta: replaying it twice, or after a newer
upsert that already carried the same ACL, leaves the same state.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from schemas._time import to_utc, utcnow

ACL_ENTRY_PATTERN = r"^(group|user):[^\s:][^\s]*$"
AclEntry = Annotated[str, Field(pattern=ACL_ENTRY_PATTERN)]
UtcDatetime = Annotated[datetime, AfterValidator(to_utc)]
Identifier = Annotated[str, Field(min_length=1, max_length=1024)]


class EventKind(StrEnum):
    UPSERT = "upsert"
    ACL = "acl"
    DELETE = "delete"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UpsertPayload(_Strict):
    kind: Literal["upsert"] = "upsert"
    title: str = ""
    content: str
    content_type: Literal["markdown", "html", "text"]
    content_hash: str = Field(min_length=8)
    acl: tuple[AclEntry, ...]
    source_url: str
    effective_from: UtcDatetime | None = None


class AclPayload(_Strict):
    kind: Literal["acl"] = "acl"
    acl: tuple[AclEntry, ...]


class DeletePayload(_Strict):
    kind: Literal["delete"] = "delete"
    reason: str = "removed at source"


Payload = Annotated[UpsertPayload | AclPayload | DeletePayload, Field(discriminator="kind")]


class Event(_Strict):
    """The envelope every connector emits and every worker validates before it touches a store."""

    event_id: str = Field(min_length=8, max_length=128)
    kind: EventKind
    tenant: Identifier = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    doc_id: Identifier
    version: int = Field(ge=1)
    occurred_at: UtcDatetime = Field(default_factory=utcnow)
    source: str = Field(min_length=1)
    payload: Payload

    @model_validator(mode="after")
    def _kind_matches_payload(self) -> Event:
        if self.payload.kind != self.kind.value:
            raise ValueError(f"kind {self.kind.value!r} does not match payload kind {self.payload.kind!r}")
        return self

    @property
    def key(self) -> str:
        """Partition key: one document's events stay in one partition, hence in order."""
        return f"{self.tenant}/{self.doc_id}"


def make_event_id(source: str, tenant: str, doc_id: str, version: int, kind: EventKind) -> str:
    """Deterministic, so a connector that re-emits after a crash produces the same ID."""
    raw = f"{source}\x00{tenant}\x00{doc_id}\x00{version}\x00{kind.value}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]
