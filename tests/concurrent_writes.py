"""Twelve appliers changing twelve documents at once, for the LexicalIndex and VectorIndex contracts.

A worker applies revocations and deletions from several threads (streams.dispatch): whatever an
adapter does with concurrent calls (serialise them, or combine the queued ones into one request),
each call must return only once its own change is visible, since the worker acknowledges the event
when the call returns. `apply_twelve` runs the calls and checks each one's visibility in its own
thread the moment its call returned, before the others finish.

Adapters that declare `combines_writes` (the LexicalIndex and VectorIndex ports; they combine queued
writes with indexer.combine) are also held to that: with the first combined write held in flight until
the other eleven calls queued, the twelve changes take two writes. The driver reads the declaration,
never the adapter's name, and checks it against the adapter: one that declares it holds a Combiner,
one that does not holds none. The hold wraps each Combiner's write function (test knowledge of
indexer.combine, the same for every adapter).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Literal

from waiting import wait_until

from indexer.combine import Combiner

Change = Literal["acl", "delete"]


def combiners(index: Any) -> list[Combiner[Any]]:
    """The Combiners the adapter writes through (its attributes), whatever it names them."""
    return [value for value in vars(index).values() if isinstance(value, Combiner)]


class _HoldFirst:
    """Wraps the Combiners' write functions; the first write waits until the other calls have queued."""

    def __init__(self, held: list[Combiner[Any]]) -> None:
        self.combiners = held
        self.writes = 0
        self.held, self.release = threading.Event(), threading.Event()
        self._real = {id(c): c._write for c in held}
        for combiner in held:
            combiner._write = self._wrap(combiner._write)

    def _wrap(self, write: Callable[[list[Any]], None]) -> Callable[[list[Any]], None]:
        def send(items: list[Any]) -> None:
            self.writes += 1
            if self.writes == 1:
                self.held.set()
                self.release.wait(30)
            write(items)

        return send

    def queued(self) -> int:
        return sum(len(c._queue) for c in self.combiners)

    def restore(self) -> None:
        self.release.set()
        for combiner in self.combiners:
            combiner._write = self._real[id(combiner)]


def held_first(held: list[Combiner[Any]], calls: list[Callable[[], None]], timeout_s: float = 60) -> int:
    """Run each call on a thread of its own, the first call's write held in flight until every other
    call queued behind it (start the first, wait until its write is held, start the rest, wait until
    they queued, release, join); returns the writes the Combiners made. A call's error is raised."""
    hold = _HoldFirst(held)
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = [pool.submit(calls[0])]
            assert hold.held.wait(30), "the first call's write never started"
            futures += [pool.submit(call) for call in calls[1:]]
            wait_until(lambda: hold.queued() == len(calls) - 1, 10, "the other calls queued")
            hold.release.set()
            for future in futures:
                future.result(timeout_s)
    finally:
        hold.restore()
    return hold.writes


def apply_twelve(
    index: Any, docs: list[str], change: Change, call: Callable[[str], None], visible: Callable[[str], bool]
) -> int | None:
    """Apply `call` to every document from twelve threads; each thread asserts `visible(doc)` as soon as
    its own call returned. Returns the writes a combining adapter (`combines_writes`) made, else None."""
    assert len(docs) == 12
    unseen: list[str] = []

    def one(doc: str) -> None:
        call(doc)
        if not visible(doc):
            unseen.append(doc)

    held = combiners(index)
    assert index.combines_writes == bool(held), f"{index.name} declares combines_writes={index.combines_writes}"
    writes = None
    if index.combines_writes:
        writes = held_first(held, [partial(one, d) for d in docs])
    else:
        with ThreadPoolExecutor(12) as pool:
            for future in [pool.submit(one, d) for d in docs]:
                future.result(60)
    assert not unseen, f"{change} of {unseen} not visible when its call returned"
    return writes


def revoke_then_delete_twelve(
    index: Any, docs: list[str], revoked: Callable[[str], bool], deleted: Callable[[str], bool]
) -> None:
    """The contract both store ports share: twelve concurrent revocations to group:board, then twelve
    concurrent deletions, each visible when its own call returned; an adapter that `combines_writes`
    makes the held write and one more for the eleven queued behind it."""
    expected = 2 if index.combines_writes else None
    requests = apply_twelve(index, docs, "acl", lambda d: index.set_acl("acme", d, ["group:board"], {}), revoked)
    assert requests == expected, f"12 revocations took {requests} writes"
    requests = apply_twelve(index, docs, "delete", lambda d: index.delete_doc("acme", d), deleted)
    assert requests == expected, f"12 deletions took {requests} writes"
