"""Deny-set clears that could not be done yet: kept, merged per document, retried (streams.tracking).

A clear fails when the deny set does not answer (a Redis call that timed out on a busy machine), or
waits on purpose while an older event of its document is consumed and not yet applied in this
worker (the clear would take that event's entry with it: a deletion on its own topic can be
overtaken by a newer ACL change of its document). Either way the entry only narrows what queries
see, but it holds the document hidden until something clears it: before this module, the next event
of that document or a worker start's sweep, 15 minutes and more in a quiet bench run.

So a failed or waiting clear is kept here and retried: after each confirmation and from the worker's
periodic path (the Faust worker's timer, the embedded owner's idle maintenance). Retrying is safe
because a clear takes only entries older than its version and its own event's entry
(indexer.deny.clears): whatever was written since by a newer event, or by another event of the same
version, stays. Two waiting clears of one document merge into the one that removes both sets
(`combine`), so memory is bounded by documents, and by `cap`: past it a clear is dropped with a
warning, and its entry waits for the next event of its document or the next worker start's sweep.

Pure rules (`combine`, `covers`, `held`) apart from the bookkeeping (`ClearRetries`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from indexer.apply_rules import tombstone_of
from indexer.deny import DenyEntry, DenyKind
from indexer.doc_state import DocState
from schemas.retry import Backoff

log = logging.getLogger(__name__)

CAP = 10_000
"""Documents with a clear waiting, at most: a deny set down for long while a backlog is confirmed
(each upsert may supersede an entry) would otherwise grow this without bound."""

RETRY = Backoff(0.5, 10.0)
"""After a retry pass failed: the next one waits this long, doubling (each failed call costs the deny
set's own timeout, 0.5 s on Redis, and confirmations retry too: never spin on an outage)."""

BATCH = 500
"""Clears per retry pass, at most: a confirmation that retries is an applier that waits."""


@dataclass(frozen=True, slots=True)
class Clear:
    """`DenySet.clear(tenant, doc_id, version, event_id)` for each of `event_ids` (or once with "")."""

    tenant: str
    doc_id: str
    version: int
    event_ids: frozenset[str] = frozenset()

    def calls(self) -> list[str]:
        """The event IDs to pass, one call each ("" when none: only what is older than `version`)."""
        return sorted(self.event_ids) or [""]


def combine(a: Clear, b: Clear) -> Clear:
    """One clear that removes whatever `a` or `b` would (same document). Pure.

    The higher version removes every entry the lower one would (they are all older than it); at
    equal versions, each event's own entry."""
    if a.version != b.version:
        return a if a.version > b.version else b
    return Clear(a.tenant, a.doc_id, a.version, a.event_ids | b.event_ids)


def covers(version: int, event_id: str, waiting: Clear) -> bool:
    """Whether a clear (version, event_id) that just succeeded removed what `waiting` would. Pure."""
    return waiting.version < version or (waiting.version == version and waiting.event_ids <= {event_id} - {""})


def held(entry: DenyEntry, state: DocState) -> bool:
    """Whether the stores hold the entry's event, or one that makes it stale, as the doc state says
    (the sweep at worker start: the worker that wrote the entry died before clearing it). Pure.

    A deletion at v is held once a deletion at v or later was applied (the tombstone); a newer ACL
    change or upsert does not hold it (the sink still applies a deletion overtaken by them). An ACL
    change at v is held by a deletion at v or later, by an ACL (an ACL event's or an upsert's) newer
    than v, and at v itself only when the stored ACL is the entry's: another event of the same
    version may have set it, and the entry then waits for its own event's confirmation."""
    tombstone = tombstone_of(state)
    if tombstone is not None and tombstone >= entry.version:
        return True
    if entry.kind is DenyKind.DELETED:
        return False
    acl_version = state.acl_version if state.acl_version is not None else state.applied_version
    if acl_version != entry.version:
        return acl_version > entry.version
    return set(state.acl) == set(entry.acl)


class ClearRetries:
    """The waiting clears, one merged clear per document, with the retry schedule (thread-safe)."""

    def __init__(self, cap: int = CAP, backoff: Backoff = RETRY) -> None:
        self.cap = cap
        self.backoff = backoff
        self._waiting: dict[tuple[str, str], Clear] = {}
        self._lock = threading.Lock()
        self._failures = 0
        self._due = 0.0
        self._warned = False
        self.dropped = 0
        """Clears not kept because `cap` documents already had one (their entries wait for a sweep)."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def keep(self, clear: Clear) -> None:
        key = (clear.tenant, clear.doc_id)
        with self._lock:
            current = self._waiting.get(key)
            if current is None and len(self._waiting) >= self.cap:
                self.dropped += 1
                warn = not self._warned
                self._warned = True
            else:
                self._waiting[key] = clear if current is None else combine(current, clear)
                return
        if warn:
            log.warning(
                "deny set: %d clears already wait for a retry; further ones are dropped, their entries"
                " stay (narrowing only) until the next event of their document or the next worker start",
                self.cap,
            )

    def done(self, tenant: str, doc_id: str, version: int, event_id: str) -> None:
        """A clear succeeded: forget the waiting one of its document if it removed all that one would."""
        with self._lock:
            waiting = self._waiting.get((tenant, doc_id))
            if waiting is not None and covers(version, event_id, waiting):
                del self._waiting[(tenant, doc_id)]

    def take(self, now: float, limit: int = BATCH) -> list[Clear]:
        """Up to `limit` waiting clears, taken out (hand back what is not done with `keep`); none
        before the retry is due."""
        with self._lock:
            if not self._waiting or now < self._due:
                return []
            keys = list(self._waiting)[:limit]
            return [self._waiting.pop(key) for key in keys]

    def failed(self, now: float) -> float:
        """A retry pass failed: the next waits longer. Returns the wait."""
        with self._lock:
            self._failures += 1
            wait = self.backoff.delay(self._failures)
            self._due = now + wait
            return wait

    def succeeded(self) -> None:
        with self._lock:
            self._failures = 0
            self._due = 0.0
            if not self._waiting:
                self._warned = False
