"""Group commit for a store's writes: the calls made while one write is in flight share the next one.

Why: on the cluster profile every revocation and deletion wrote its own `_bulk` with a forced refresh
(and its own Qdrant request), 24 appliers at once; on a CPU-contended machine those requests and
refreshes were the queue the revocations waited in. A `Combiner` hands every call to one writer
thread, which writes all the calls queued since its last write with one `write(items)` and then
wakes their callers. A caller returns only once its own item is written (nothing is acknowledged
before the store confirmed it), and raises its own error: when a combined write fails, each of its
items is written alone, so one bad item fails its own caller only (who retries), never the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_ITEMS = 64
"""Items per combined write at most."""


@dataclass
class _Call(Generic[T]):
    item: T
    key: Hashable
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def rounds(calls: list[_Call[T]], max_items: int = MAX_ITEMS) -> list[list[_Call[T]]]:
    """The queued calls cut into writes, in order: at most `max_items` each, and never two calls of the
    same key in one write (the later one goes in a later write, so a key's writes keep their order).
    Pure."""
    out: list[list[_Call[T]]] = []
    keys: list[set[Hashable]] = []
    last_round: dict[Hashable, int] = {}
    for call in calls:
        start = last_round.get(call.key, -1) + 1
        i = start
        while i < len(out) and (len(out[i]) >= max_items or call.key in keys[i]):
            i += 1
        if i == len(out):
            out.append([])
            keys.append(set())
        out[i].append(call)
        keys[i].add(call.key)
        last_round[call.key] = i
    return out


class Combiner(Generic[T]):
    """Calls `write(items)` on one thread of its own for the items submitted meanwhile (see module)."""

    def __init__(self, write: Callable[[list[T]], None], *, name: str, max_items: int = MAX_ITEMS) -> None:
        self._write = write
        self._name = name
        self._max_items = max_items
        self._cond = threading.Condition()
        self._queue: list[_Call[T]] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.writes = 0
        """Combined writes made (tests and diagnostics)."""

    def submit(self, item: T, key: Hashable) -> None:
        """Write `item` with whatever else is queued; return once it is written, raise its error.
        `key` names what the item writes (a document): two items of one key never share a write."""
        call: _Call[T] = _Call(item, key)
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed")
            self._queue.append(call)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        call.done.wait()
        if call.error is not None:
            raise call.error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            for group in rounds(batch, self._max_items):
                self._write_group(group)

    def _write_group(self, group: list[_Call[T]]) -> None:
        try:
            self.writes += 1
            self._write([c.item for c in group])
        except BaseException as exc:
            if len(group) == 1:
                group[0].error = exc
            else:
                for call in group:  # each alone: the failing item fails its own caller only
                    try:
                        self.writes += 1
                        self._write([call.item])
                    except BaseException as alone:
                        call.error = alone
        for call in group:
            call.done.set()

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(60)
