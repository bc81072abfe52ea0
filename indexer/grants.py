"""How a document's ACL history becomes what every store filters on: each entry and the instant since.

Access belongs to each version of a document and to each instant: a version may be read as of an
instant t only by an entry that every ACL in force from t until now names (the intersection of its
own ACL and every later one). Narrowing therefore reaches every version at once, and widening never
reaches back: a reader added today cannot read yesterday's version, nor today's version as of
yesterday. Because the intersection only grows as t moves forward, each entry of the current ACL
needs one instant, `since`: the start of its latest unbroken run in the ACL. Stores keep the
current ACL plus these instants on every passage (every version carries the same pair) and admit
an entry as of t only when since <= t (schemas.principal.grants_allow is the reference).

Instants are whole seconds, like effective dates: an edit made during a second is in force for the
whole of it (the query side's default as-of is now, floored to the second). Every function here is
pure and fails closed where the history is only partly known:
- a change takes effect no earlier than any change applied before it (`changed_at`, a watermark),
  so an event carrying an earlier time (a stated effective date, a clock) can never reopen the past;
- an older event delivered late (an upsert or ACL change overtaken by a newer one) is not applied,
  but the readers its ACL lacked must have been (re)granted after it, so their instant moves up to
  the watermark: at least as late as the true one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from schemas._time import to_utc


def whole_second(instant: datetime) -> datetime:
    return to_utc(instant).replace(microsecond=0)


@dataclass(frozen=True)
class Grants:
    """A document's current ACL, when and at which version each entry was granted, and when its ACL
    last changed."""

    acl: tuple[str, ...] = ()
    since: Mapping[str, datetime] = field(default_factory=dict)
    since_version: Mapping[str, int] = field(default_factory=dict)
    """The version whose ACL granted each entry (its run's first): tells an overtaken event apart
    from a redelivered one."""
    changed_at: datetime | None = None
    """When the ACL applied last took effect: a watermark no later grant may precede."""
    changed_version: int = 0
    """The version of the ACL applied last (the one in force)."""

    def admits(self, entries: Iterable[str], as_of: datetime) -> bool:
        granted = set(self.acl)
        return any(e in granted and self.since.get(e, as_of) <= as_of for e in set(entries))


NONE = Grants()


def regrant(current: Grants, acl: Iterable[str], at: datetime, version: int) -> Grants:
    """The grants once `acl`, of a version newer than `current`'s, takes effect at `at`.

    Entries kept keep their instant; entries added are granted from `at`, or from the last change
    if that is later; entries dropped are gone (for every version, since all carry these grants).
    """
    entries = tuple(sorted(set(acl)))
    effective = whole_second(at)
    if current.changed_at is not None and current.changed_at > effective:
        effective = current.changed_at
    kept = {e for e in current.acl if e in current.since}
    since = {e: current.since[e] if e in kept else effective for e in entries}
    since_version = {e: current.since_version.get(e, 0) if e in kept else version for e in entries}
    # The watermark moves even when the ACL looks unchanged: events between the two may not have
    # arrived yet (a revocation and its undoing, still behind), and the true re-grant is no later.
    return Grants(entries, since, since_version, effective, version)


def overtaken(current: Grants, older_acl: Iterable[str], version: int) -> Grants:
    """The grants once an older ACL (of `version`), delivered after newer ones, is taken into account.

    An entry of the current ACL that the older ACL lacks, though its run began at or before that
    version, was in fact dropped then and granted again by a change we applied: at the latest
    change, at the latest. So it may only be read from that change on. A redelivered event that was
    applied before lacks only entries whose run began after it, and changes nothing. Only narrows.
    """
    if current.changed_at is None:
        return current
    older = set(older_acl)
    broken = {e for e in current.acl if e not in older and current.since_version.get(e, 0) <= version}
    if not broken:
        return current
    since = {e: current.changed_at if e in broken else current.since.get(e, current.changed_at) for e in current.acl}
    since_version = {
        e: current.changed_version if e in broken else current.since_version.get(e, 0) for e in current.acl
    }
    return Grants(current.acl, since, since_version, current.changed_at, current.changed_version)


def restart(current: Grants) -> Grants:
    """The grants of a document re-created after a deletion: nothing carried over but the watermark."""
    return Grants((), {}, {}, current.changed_at, current.changed_version)
