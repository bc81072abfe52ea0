"""A bounded, short-lived memo of values derived from a text (its sentences, its terms, its vector),
shared by the requests of one process.

Why: every answer reads the sentences, terms and vectors of the fused top 50 passages, and under load
the same passages come back question after question. Working them out again per request was most of
an answer's CPU (issue 22, answers under load).

Why it cannot widen access: a key is the text itself (with what the caller adds, such as the model
name), and a value is a pure function of its key. A request looks up only texts it already holds,
read from the stores under its own permission filter, so a hit gives it exactly what it would have
computed itself; the memo never holds a passage, an ID or a principal, so it cannot make a passage
visible, and a revoked passage is never looked up because the stores no longer return it.

Why it keeps no text for long: an entry lives at most `ttl_s` after it was worked out, used or not (two
generations: a new entry goes to the young one; every ttl_s / 2 the young one becomes the old one and
the old one is dropped; a hit does not make an entry young again), and at most `max_entries` are held.
A sweeper thread ages every memo of the process every second, so an idle process drops its entries
on time too. The default ttl_s (30 s) is below the physical purge bound (`purge_max_delay_s`, 60 s
by default): a deleted document's text leaves this memo before the stores are required to have purged
it; `discard` drops one entry at once.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING = object()


class TextMemo(Generic[K, V]):
    """get(key, compute): the value memoised for key, else compute() (stored). Thread-safe: one dict
    read or write each (atomic under the GIL); two threads may both compute a missing value, alike."""

    def __init__(
        self, ttl_s: float = 30.0, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}
        self._rotated = clock()
        self._lock = threading.Lock()
        _sweep(self)

    def get(self, key: K, compute: Callable[[], V]) -> V:
        self._age()
        young = self._young
        value = young.get(key, _MISSING)
        if value is _MISSING:
            value = self._old.get(key, _MISSING)
            if value is _MISSING:
                value = compute()
                young[key] = value  # type: ignore[assignment]
        return value  # type: ignore[return-value]

    def peek(self, key: K) -> V | None:
        """The value held for key, or None; computes nothing."""
        self._age()
        value = self._young.get(key)
        return self._old.get(key) if value is None else value

    def put(self, key: K, value: V) -> None:
        self._age()
        self._young[key] = value

    def discard(self, key: K) -> None:
        with self._lock:
            self._young.pop(key, None)
            self._old.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._young, self._old = {}, {}

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def _age(self) -> None:
        now = self._clock()
        if now - self._rotated < self.ttl_s / 2 and len(self._young) < self.max_entries // 2:
            return
        with self._lock:
            if now - self._rotated >= self.ttl_s:
                self._old, self._young = {}, {}  # both generations are stale: everything is older than ttl_s
                self._rotated = now
            elif now - self._rotated >= self.ttl_s / 2 or len(self._young) >= self.max_entries // 2:
                self._old, self._young = self._young, {}
                self._rotated = now


_MEMOS: weakref.WeakSet[TextMemo[Any, Any]] = weakref.WeakSet()
_SWEEPER: list[threading.Thread] = []
_SWEEPER_LOCK = threading.Lock()


def _sweep(memo: TextMemo[Any, Any]) -> None:
    """Register memo with the process's sweeper (started with the first memo): ages each memo every
    second, so entries expire on time in a process that answers nothing."""
    _MEMOS.add(memo)
    with _SWEEPER_LOCK:
        if not _SWEEPER:
            thread = threading.Thread(target=_sweeper, name="ragsync-memo-sweeper", daemon=True)
            thread.start()
            _SWEEPER.append(thread)


def _sweeper() -> None:
    while True:
        time.sleep(1.0)
        for memo in list(_MEMOS):
            memo._age()
