"""Passages: the unit every store indexes and every citation points at."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas._digits import ascii_uint
from schemas.events import AclEntry, UtcDatetime
from schemas.principal import grants_allow


def make_passage_id(doc_id: str, version: int, anchor: str) -> str:
    return f"{doc_id}@{version}#{anchor}"


def split_passage_id(passage_id: str) -> tuple[str, int, str]:
    """Split on the last '@' and '#' so doc IDs that contain either still round-trip."""
    head, _, anchor = passage_id.rpartition("#")
    doc_id, _, digits = head.rpartition("@")
    version = ascii_uint(digits)
    if not doc_id or version is None or not anchor:
        raise ValueError(f"not a passage id: {passage_id!r}")
    return doc_id, version, anchor


_LOCATION = re.compile(r"(?:^|&)(page|row)=(\d+)(?:-(\d+))?(?:&|$)")


def url_at(source_url: str, fragment: str) -> str:
    """The document's URL opened at a place: `handbook.pdf#page=3` (RFC 8118), `prices.csv#row=12` (RFC 7111).

    A passage of a paged or row-numbered document carries its own URL this way, so every store,
    the API and the CLI cite the page or row without a field of their own.
    """
    if not fragment:
        return source_url
    return f"{source_url}&{fragment}" if "#" in source_url else f"{source_url}#{fragment}"


def location_of(source_url: str) -> str | None:
    """ "page 3", "row 12" or "rows 12-14" from a URL made by `url_at`; None when it names no place."""
    _, sep, fragment = source_url.partition("#")
    match = _LOCATION.search(fragment) if sep else None
    if match is None:
        return None
    unit, first, last = match.group(1), match.group(2), match.group(3)
    return f"{unit}s {first}-{last}" if last and last != first else f"{unit} {first}"


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    passage_id: str
    doc_id: str
    version: int = Field(ge=1)
    anchor: str
    tenant: str
    acl: tuple[AclEntry, ...]
    acl_since: dict[str, UtcDatetime] = Field(default_factory=dict)
    """When each entry of `acl` was granted without a break since (schemas.principal.grants_allow)."""
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

    def readable(self, entries: Iterable[str], as_of: datetime) -> bool:
        """The permission filter's reference: valid as of the instant and granted to an entry then and since."""
        return self.visible_at(as_of) and grants_allow(entries, self.acl, self.acl_since, as_of)


def embedding_text(passage: Passage) -> str:
    """The text a passage is embedded as, by the indexer and by whoever re-embeds or forgets it (ragsync's
    maintenance and purge): headings name the topic the body talks about."""
    heading = " > ".join(h for h in (passage.title, *passage.heading_path) if h)
    return f"{heading}\n{passage.text}" if heading else passage.text
