"""A document's history as a connector emits it, for the property tests (order and duplicates, version access).

One generator, so the properties agree on what a connector may emit: an upsert first and after every
delete, an ACL event only for a change, versions increasing by one, instants increasing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from connectors.source_events import build_event
from schemas.events import AclPayload, DeletePayload, Event, UpsertPayload


@dataclass(frozen=True)
class Op:
    kind: str  # upsert | acl | delete
    acl: tuple[str, ...] = ()
    sections: int = 1  # an upsert's content: how many sections
    gap_s: int = 60  # seconds after the previous event


Content = Callable[[str, int, Op], str]
"""(doc, version, op) -> the upsert's Markdown."""


def history(
    doc: str, steps: list[Op], start: datetime, content: Content, *, effective_from: bool = False
) -> list[Event]:
    """What a connector emits for these steps (steps it would not emit are dropped): an upsert first and
    after every delete, ACL events only for a change. `effective_from`: upserts state their instant."""
    events: list[Event] = []
    live = False
    at = start
    for op in steps:
        if not live and op.kind != "upsert":
            continue
        if op.kind == "acl" and acl_of(events) == op.acl:
            continue  # a connector emits an ACL event only for a change
        version = len(events) + 1
        at = at + timedelta(seconds=op.gap_s)
        payload: UpsertPayload | AclPayload | DeletePayload
        if op.kind == "upsert":
            text = content(doc, version, op)
            payload = UpsertPayload(
                content=text,
                content_type="markdown",
                content_hash=hashlib.sha256(text.encode()).hexdigest()[:16],
                acl=op.acl,
                source_url=doc,
                effective_from=at if effective_from else None,
            )
            live = True
        elif op.kind == "acl":
            payload = AclPayload(acl=op.acl)
        else:
            payload = DeletePayload()
            live = False
        events.append(build_event("t", "acme", doc, version, payload, at))
    return events


def acl_of(events: list[Event]) -> tuple[str, ...] | None:
    """The ACL in force after these events (None after a delete or before any event)."""
    for event in reversed(events):
        if isinstance(event.payload, UpsertPayload | AclPayload):
            return tuple(event.payload.acl)
        return None
    return None
