"""Deny-set clears against a reference model: no clear takes the entry of an event still to apply,
and once every clear could run, nothing is left.

Hypothesis generates, for two documents, a history of ACL changes, deletions and upserts whose
versions rise or repeat (two events at one version: nothing in the envelope forbids it), and a
schedule the way a worker meets them: each topic consumed and applied in its own order per document
(the ACL and deletion topics on the deny path; `applied` consumes what the deny path had not),
topics interleaved in any order, the deny set's clears and lookups failing for a while and coming
back, and the worker's periodic retry at any point. The tracker and the SQLite deny set are the real
ones (the failures are a wrapper's).

The model is the set of events consumed and not yet confirmed. Invariants:
- after every step, each such event's document is denied for its kind by an entry at least as new
  as the event (its own, a later one of the same version, or a newer one): its revocation or
  deletion is effective until it is applied;
- once every event is confirmed and the deny set answers again, the retries leave no entry and no
  clear waiting.

CI runs a fixed seed with the "ci" profile; `HYPOTHESIS_PROFILE=long` runs 2,000 examples.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_deny_clear_retry import FailingClears
from test_effective_before_converged import record
from test_indexing import acl, delete, upsert

from indexer.deny import DenyKind, DenySet, SqliteDenySet
from schemas.events import Event, EventKind
from streams.tracking import Tracker

settings.register_profile(
    "ci", max_examples=200, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile("long", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

DOCS = ("t:a.md", "t:b.md")
TOPICS = (EventKind.ACL, EventKind.DELETE, EventKind.UPSERT)
KIND_OF = {EventKind.ACL: DenyKind.ACL, EventKind.DELETE: DenyKind.DELETED}

steps_of_history = st.lists(st.tuples(st.sampled_from(TOPICS), st.booleans(), st.booleans()), min_size=1, max_size=7)
"""(topic, same version as the previous event, which of two ACLs)."""

Step = tuple[str, int, EventKind]
schedule = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["consume", "confirm"]), st.integers(0, 1), st.sampled_from(TOPICS)),
        st.tuples(st.sampled_from(["down", "up", "retry"]), st.just(0), st.just(EventKind.ACL)),
    ),
    max_size=40,
)


def history(doc: str, steps: list[tuple[EventKind, bool, bool]]) -> list[Event]:
    events: list[Event] = []
    version = 0
    for i, (topic, same, which) in enumerate(steps):
        version = version if same and version else version + 1
        if topic is EventKind.ACL:
            event = acl(version, ("group:hr",) if which else ("group:board",), doc=doc)
        elif topic is EventKind.DELETE:
            event = delete(version, doc=doc)
        else:
            event = upsert(version, "# Page\n\nSome text.", doc=doc)
        events.append(event.model_copy(update={"event_id": f"{doc}-{i:02d}-{topic.value}-event"}))
    return events


def retry(tracker: Tracker) -> None:
    """The worker's periodic path, an hour later each time (whatever backoff the failures set)."""
    earlier = tracker.monotonic
    tracker.monotonic = lambda: earlier() + 3600.0
    tracker.retry_clears()


def waiting(tracker: Tracker) -> int:
    return tracker.clears_waiting()


@dataclass
class World:
    tracker: Tracker
    deny: SqliteDenySet
    flaky: FailingClears
    events: dict[str, list[Event]]
    consumed: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)

    def next_of(self, doc: str, topic: EventKind, *, unconsumed: bool) -> Event | None:
        """The oldest event of the topic not yet confirmed (not yet consumed) for the document."""
        for event in self.events[doc]:
            pending = event.event_id not in self.confirmed
            if event.kind is topic and pending and (not unconsumed or event.event_id not in self.consumed):
                return event
        return None

    def consume(self, event: Event) -> None:
        self.tracker.consumed(record(event))
        self.consumed.add(event.event_id)

    def confirm(self, event: Event) -> None:
        if event.kind is not EventKind.UPSERT and event.event_id not in self.consumed:
            self.consume(event)  # `applied` consumes what the deny path had not seen
        self.tracker.confirmed([event])
        self.confirmed.add(event.event_id)

    def check(self) -> None:
        held = {(e.doc_id, e.kind): e.version for e in self.deny.entries("acme")}
        for doc, events in self.events.items():
            for event in events:
                if event.event_id in self.consumed and event.event_id not in self.confirmed:
                    version = held.get((doc, KIND_OF[event.kind]))
                    assert version is not None and version >= event.version, (
                        f"{event.kind.value} v{event.version} of {doc} consumed, not applied, and not denied"
                    )


@settings(settings.get_profile(PROFILE))
@given(a=steps_of_history, b=steps_of_history, steps=schedule)
def test_clears_never_take_a_pending_entry_and_leave_nothing_behind(
    a: list[tuple[EventKind, bool, bool]], b: list[tuple[EventKind, bool, bool]], steps: list[Step]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        deny = SqliteDenySet(Path(tmp) / "deny.db")
        flaky = FailingClears(deny, fail=0)
        world = World(Tracker(cast(DenySet, flaky), None), deny, flaky, {DOCS[0]: history(DOCS[0], a)})
        world.events[DOCS[1]] = history(DOCS[1], b)
        try:
            for action, which, topic in steps:
                doc = DOCS[which]
                if action == "consume" and topic is not EventKind.UPSERT:
                    event = world.next_of(doc, topic, unconsumed=True)
                    if event is not None:
                        world.consume(event)
                elif action == "confirm":
                    event = world.next_of(doc, topic, unconsumed=False)
                    if event is not None:
                        world.confirm(event)
                elif action in ("down", "up"):
                    flaky.fail = 10**6 if action == "down" else 0
                elif action == "retry":
                    retry(world.tracker)
                world.check()
            flaky.fail = 0
            for doc in DOCS:  # the rest applied, topic by topic
                for topic in TOPICS:
                    while (event := world.next_of(doc, topic, unconsumed=False)) is not None:
                        world.confirm(event)
                        world.check()
            for _ in range(3):
                retry(world.tracker)
            assert deny.entries() == [], "an entry outlived every event"
            assert waiting(world.tracker) == 0
        finally:
            deny.close()


def test_the_model_sees_what_it_checks() -> None:
    """The checker itself: an entry removed under a pending event is reported."""
    with tempfile.TemporaryDirectory() as tmp:
        deny = SqliteDenySet(Path(tmp) / "deny.db")
        flaky = FailingClears(deny, fail=0)
        events = history(DOCS[0], [(EventKind.ACL, False, True)])
        world = World(Tracker(cast(DenySet, flaky), None), deny, flaky, {DOCS[0]: events})
        world.consume(events[0])
        world.check()
        deny.clear("acme", DOCS[0], 9, "")
        try:
            world.check()
        except AssertionError:
            pass
        else:
            raise AssertionError("a pending event without its entry went unnoticed")
        finally:
            deny.close()
