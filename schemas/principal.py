"""Who is asking, and the filter every store applies inside its own query."""

from __future__ import annotations

from collections.abc import Iterable
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
    """Reference semantics the store filters must reproduce; an empty ACL admits nobody."""
    if principal.tenant != tenant:
        return False
    mine = set(principal.acl_entries())
    return any(entry in mine for entry in acl)


@dataclass(frozen=True, slots=True)
class AccessFilter:
    """Tenant, ACL entries and instant: what every store query must be restricted to."""

    tenant: str
    entries: tuple[str, ...]
    as_of: datetime

    @classmethod
    def for_principal(cls, principal: Principal, as_of: datetime) -> AccessFilter:
        return cls(tenant=principal.tenant, entries=principal.acl_entries(), as_of=to_utc(as_of))
