"""Two paths write a worker's deny entries (streams.deny_reader and the Faust deny agent); an entry
written by the slower one after the faster one's event was served and cleared must not outlive its
event. Seen in a cluster propagation run: one revocation's entry stayed, its document hidden until the
next worker start and the run never converging. Real SQLite deny set and propagation log."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from test_indexing import acl, delete

from indexer.deny import DenyEntry, SqliteDenySet
from indexer.propagation import SqlitePropagationLog
from schemas.events import Event
from streams.ports import Record, topic_for
from streams.tracking import Tracker

DOC = "t:salaries.md"


class Interleaved(SqliteDenySet):
    """`meanwhile` runs once, just before the next write of entries reaches the set."""

    meanwhile: Callable[[], None] | None = None

    def _first(self) -> None:
        if self.meanwhile is not None:
            run, self.meanwhile = self.meanwhile, None
            run()

    def add(self, entry: DenyEntry) -> None:
        self._first()
        super().add(entry)

    def add_many(self, entries: Sequence[DenyEntry]) -> None:
        self._first()
        super().add_many(entries)


def record(event: Event) -> Record:
    return Record(topic_for(event), 0, 0, event.key, event.model_dump_json().encode(), int(time.time() * 1000))


@pytest.mark.parametrize(
    "event", [acl(2, ("group:board",), doc=DOC), delete(3, doc=DOC)], ids=["revocation", "deletion"]
)
@pytest.mark.parametrize("slow", ["reader", "agent"])
@pytest.mark.parametrize("then", ["served", "confirmed"])
def test_an_entry_written_after_its_event_was_served_is_cleared(
    tmp_path: Path, event: Event, slow: str, then: str
) -> None:
    deny = Interleaved(tmp_path / "deny.db")
    tracker = Tracker(deny, SqlitePropagationLog(tmp_path / "propagation.db"))

    def fast_path_finishes() -> None:
        """The other path reads the event, the worker applies and serves it (clearing the entry)."""
        if slow == "reader":
            tracker.consumed(record(event))
        else:
            tracker.consumed_many([record(event)])
        tracker.served(event)
        if then == "confirmed":
            tracker.confirmed([event])
        assert deny.lookup("acme", [DOC]) == []

    deny.meanwhile = fast_path_finishes
    if slow == "reader":
        tracker.consumed_many([record(event)])
    else:
        tracker.consumed(record(event))
    assert deny.meanwhile is None, "the interleaving ran"
    assert deny.lookup("acme", [DOC]) == [], "the late write's entry is gone again"
    if then == "served":
        (done,) = tracker.confirmed([event])
        assert done.event_id == event.event_id
    assert deny.lookup("acme", [DOC]) == []
