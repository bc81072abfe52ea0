"""Who is asking, and the filter every store applies inside its own query."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from schemas._time import to_utc


class Principal(BaseModel):
    """Only ever built from a verified session token, never from request fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    user: str = Field(min_length=1, pattern=r"^[^\s,]+$")
    groups: tuple[str, ...] = ()

    def acl_entries(self) -> tuple[str, ...]:
        """The ACL entries that grant this principal read access, sorted for stable cache keys."""
        return tuple(sorted({f"user:{self.user}", *(f"group:{g}" for g in self.groups)}))


def acl_allows(principal: Principal, tenant: str, acl: Iterable[str]) -> bool:
    """Whether the ACL names the principal now (any instant a grant covers); an empty ACL admits nobody."""
    if principal.tenant != tenant:
        return False
    mine = set(principal.acl_entries())
    return any(entry in mine for entry in acl)


def grants_allow(entries: Iterable[str], acl: Iterable[str], since: Mapping[str, datetime], as_of: datetime) -> bool:
    """Reference semantics of the permission filter every store reproduces inside its query.

    An entry of the document's current ACL admits a question as of an instant only from `since[entry]`
    on: the instant since which that entry has been in the document's ACL without a break. So a
    reader added by a later edit cannot read an earlier version (or the same version as of an
    earlier instant), and a reader removed by any edit cannot read any version at all: a version is
    readable as of t by whoever every ACL in force from t to now names. An entry without a recorded
    instant (an index written before access had instants) admits from the beginning.
    """
    granted = set(acl)
    return any(e in granted and (e not in since or since[e] <= as_of) for e in set(entries))


def since_key(entry: str) -> str:
    """A field name for an ACL entry, for stores that keep grant instants as a keyed object.

    Entries may contain '.', which both Qdrant and Elasticsearch read as a path separator: a hash
    is a plain name in every store and collides with no other entry's.
    """
    return hashlib.sha256(entry.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class AccessFilter:
    """Tenant, ACL entries and instant: what every store query must be restricted to."""

    tenant: str
    entries: tuple[str, ...]
    as_of: datetime

    @classmethod
    def for_principal(cls, principal: Principal, as_of: datetime) -> AccessFilter:
        return cls(tenant=principal.tenant, entries=principal.acl_entries(), as_of=to_utc(as_of))
