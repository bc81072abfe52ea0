"""Passages: the unit every store indexes and every citation points at."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import AclEntry, UtcDatetime


def make_passage_id(doc_id: str, version: int, anchor: str) -> str:
    return f"{doc_id}@{version}#{anchor}"


def split_passage_id(passage_id: str) -> tuple[str, int, str]:
    """Split on the last '@' and '#' so doc IDs that contain either still round-trip."""
    head, _, anchor = passage_id.rpartition("#")
    doc_id, _, version = head.rpartition("@")
    if not doc_id or not version.isdigit() or not anchor:
        raise ValueError(f"not a passage id: {passage_id!r}")
    return doc_id, int(version), anchor


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passage_id: str
    doc_id: str
    version: int = Field(ge=1)
    anchor: str
    tenant: str
    acl: tuple[AclEntry, ...]
    effective_from: UtcDatetime
    superseded_on: UtcDatetime | None = None
    heading_path: tuple[str, ...] = ()
    title: str = ""
    text: str
    source_url: str
    chunker_version: str

    @property
    def heading_text(self) -> str:
        return " > ".join(self.heading_path)

    def visible_at(self, as_of: datetime) -> bool:
        return self.effective_from <= as_of and (self.superseded_on is None or as_of < self.superseded_on)
