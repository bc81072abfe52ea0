"""Twelve appliers changing twelve documents at once, for the LexicalIndex and VectorIndex contracts.

A worker applies revocations and deletions from several threads (streams.dispatch): whatever an
adapter does with concurrent calls (serialise them, or combine the queued ones into one request),
each call must return only once its own change is visible, since the worker acknowledges the event
when the call returns. `apply_twelve` runs the calls and checks each one's visibility in its own
thread the moment its call returned, before the others finish.

Adapters that combine queued writes into one request (indexer.combine) are also held to that: with
the first request held in flight until the other eleven calls queued, the twelve changes take two
requests. How to hold one adapter's request is test knowledge (its client attribute and the method
that sends a batch), kept in HOLDS by adapter name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from waiting import wait_until

Change = Literal["acl", "delete"]


@dataclass(frozen=True)
class Hold:
    """Where a combining adapter sends its batches, and the queue the other calls wait in."""

    client: str
    """The adapter's attribute holding the real client (wrapped for the test, put back after)."""
    method: str
    """The client method that sends one combined request."""
    queue: Callable[[Any, Change], Any]
    """The Combiner a change of that kind queues in."""


HOLDS: dict[str, Hold] = {
    "elasticsearch": Hold("_es", "bulk", lambda ix, change: ix._acl_writes if change == "acl" else ix._doc_deletes),
    "qdrant": Hold("_client", "batch_update_points", lambda ix, change: ix._writes),
}


class _HoldFirst:
    """The real client; the first batch request waits until the other calls have queued."""

    def __init__(self, real: Any, method: str) -> None:
        self.real, self.method = real, method
        self.requests = 0
        self.held, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if name != self.method:
            return attr

        def send(*args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            if self.requests == 1:
                self.held.set()
                self.release.wait(30)
            return attr(*args, **kwargs)

        return send


def apply_twelve(
    index: Any, docs: list[str], change: Change, call: Callable[[str], None], visible: Callable[[str], bool]
) -> int | None:
    """Apply `call` to every document from twelve threads; each thread asserts `visible(doc)` as soon as
    its own call returned. Returns the requests a combining adapter (HOLDS) sent, else None."""
    assert len(docs) == 12
    unseen: list[str] = []

    def one(doc: str) -> None:
        call(doc)
        if not visible(doc):
            unseen.append(doc)

    hold = HOLDS.get(index.name)
    with ThreadPoolExecutor(12) as pool:
        if hold is None:
            for future in [pool.submit(one, d) for d in docs]:
                future.result(60)
            assert not unseen, f"{change} of {unseen} not visible when its call returned"
            return None
        real = getattr(index, hold.client)
        client = _HoldFirst(real, hold.method)
        setattr(index, hold.client, client)
        try:
            futures = [pool.submit(one, docs[0])]
            assert client.held.wait(30)
            futures += [pool.submit(one, d) for d in docs[1:]]
            wait_until(lambda: len(hold.queue(index, change)._queue) == 11, 10, "the other appliers queued")
            client.release.set()
            for future in futures:
                future.result(60)
        finally:
            client.release.set()
            setattr(index, hold.client, real)
    assert not unseen, f"{change} of {unseen} not visible when its call returned"
    return client.requests


def revoke_then_delete_twelve(
    index: Any, docs: list[str], revoked: Callable[[str], bool], deleted: Callable[[str], bool]
) -> None:
    """The contract both store ports share: twelve concurrent revocations to group:board, then twelve
    concurrent deletions, each visible when its own call returned; a combining adapter (HOLDS) sends the
    held request and one more for the eleven queued behind it."""
    expected = 2 if index.name in HOLDS else None
    requests = apply_twelve(index, docs, "acl", lambda d: index.set_acl("acme", d, ["group:board"], {}), revoked)
    assert requests == expected, f"12 revocations took {requests} requests"
    requests = apply_twelve(index, docs, "delete", lambda d: index.delete_doc("acme", d), deleted)
    assert requests == expected, f"12 deletions took {requests} requests"
