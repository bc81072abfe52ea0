"""Two writes of one event at once: the vector store's beside the lexical store's (cluster profile).

Why: a revocation or deletion is served once every store answering queries holds it, so written one
after the other (Elasticsearch, then the Qdrant server) it waited for the sum of two round trips, each
hundreds of milliseconds on a CPU-contended machine; side by side it waits for the slower one.

Fail closed: `both` returns only once *both* writes returned, and raises if either failed (the first
one's error first), so a caller never goes on (clears a deny entry, records a state) past a store that
did not take the write, and no write of an event is still in flight when its caller retries it or
releases the document's key. A failed write leaves the other store's write in place: every write is
idempotent and versioned, and the event is applied again.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TypeVar

from indexer.ports import LexicalIndex, VectorIndex

A = TypeVar("A")
B = TypeVar("B")

MAX_THREADS = 64
"""Second writes in flight at once at most (a cluster worker has 48 access appliers)."""


class SideBySide:
    """Runs `second` on a thread of its own while the caller runs `first` (threads start on demand)."""

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="ragsync-side-write")

    def both(self, first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
        future = self._pool.submit(second)
        try:
            a = first()
        except BaseException:
            future.exception()  # waits for the second write, whatever it does; the first's error wins
            raise
        return a, future.result()

    def write_stores(
        self,
        lexical: LexicalIndex,
        lexical_write: Callable[[], None],
        vector: VectorIndex | None,
        vector_write: Callable[[], None] | None,
        clock: Callable[[], datetime],
    ) -> dict[str, datetime]:
        """One event's write to each store, and when each returned (propagation records). Side by side
        when both stores are durable on write and combine concurrent writes (the cluster's: appliers
        write them from many threads at once anyway), else one after the other; either way this returns
        only once both returned, and raises if either failed."""
        applied_at: dict[str, datetime] = {}

        def write(store: LexicalIndex | VectorIndex, action: Callable[[], None]) -> None:
            action()
            applied_at[store.name] = clock()

        if vector is None or vector_write is None:
            write(lexical, lexical_write)
        elif side_by_side(lexical, vector):
            self.both(lambda: write(lexical, lexical_write), lambda: write(vector, vector_write))
        else:
            write(lexical, lexical_write)
            write(vector, vector_write)
        return applied_at

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def side_by_side(lexical: LexicalIndex, vector: VectorIndex) -> bool:
    """Whether an event's two store writes may run at once (see SideBySide.write_stores). Pure."""
    durable = lexical.durability == "write" and vector.durability == "write"
    return durable and lexical.combines_writes and vector.combines_writes
