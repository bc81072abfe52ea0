"""Micro-batched question embeddings: the questions of concurrent requests embedded in one model run.

Why: under load (50 clients on /v1/ask) every request embedded its question in an ONNX run of its
own, and those runs overlapped, each with ONNX Runtime's thread pool, on two cores. One short
question is little arithmetic around a fixed cost per run (operator dispatch, thread wake-ups); a
batch of them costs that once. A request hands its question over; if fewer than `lanes` batches are
running, it leads: it runs whatever is waiting (up to `max_batch`) in one run, again and again until
its own row is done, then hands the lead to the first request still waiting, which does the same.
Nothing waits for a batch to fill, so a lone question (a quiet server, a CLI ask, a test) is embedded
alone, as before, at once, in its own thread. There is no runner thread: an earlier version had one,
and on a busy machine that one thread, running every batch in turn, got so small a share of the CPU
that the serve's throughput halved (bench/README.md); a leader is a request's own thread, so the
model runs whenever some request that needs it is scheduled.

Why it cannot mix up askers: a question's row is a pure function of its text (the model is the same
for every tenant, and a batch is padded with an attention mask, so a row does not depend on the texts
batched with it beyond float rounding: bench/api_answers.py and tests/test_query_batch.py check it),
and each waiter is handed the row at its own position, never a cached one; nothing is kept after the
run (the process memo in indexer.embedding_cache holds questions, by text, as before).

Why a failure stays with its own request: when a batch's run raises, each of its questions is
embedded again alone, so only the question whose own run fails gets the exception; the others get
their rows. A waiter gives up after `timeout_s` (a leader may be stuck in a run) with
ModelUnavailable, as a model that cannot be loaded; a lead handed to it passes on.

A dynamically quantised model (MiniLM int8) scales a run's activations by the whole batch, so its rows
depend on their batch: the embedder does not batch its questions (indexer.embedder).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from indexer.ports import Vectors
from schemas.errors import ModelUnavailable

DEFAULT_MAX_BATCH = 32
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_LANES = 1


@dataclass(eq=False)
class _Waiting:
    text: str
    wake: threading.Event = field(default_factory=threading.Event)
    row: Vectors | None = None
    error: BaseException | None = None
    finished: bool = False
    """Its row or its error is set (then `wake` is set)."""
    promoted: bool = False
    """A leader that stopped handed it the lead while it was still queued (then `wake` is set)."""


class QueryBatcher:
    """`embed(text)`: the row `embed_many([text])[0]` would give, computed in a run with the questions
    other threads handed over meanwhile. Thread-safe; no thread of its own: the requests run the batches."""

    def __init__(
        self,
        embed_many: Callable[[Sequence[str]], Vectors],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        lanes: int = DEFAULT_LANES,
    ) -> None:
        if max_batch < 1 or lanes < 1:
            raise ValueError("max_batch and lanes must be at least 1")
        self._embed_many = embed_many
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self.lanes = lanes
        """Batches run at once at most (each by the request that leads it)."""
        self._queue: list[_Waiting] = []
        self._lock = threading.Lock()
        self._leaders = 0
        self.runs = 0
        """Model runs made (batches, plus the single runs after a failed batch): for tests and bench/."""
        self.largest = 0
        """The largest batch run so far."""

    def embed(self, text: str) -> Vectors:
        me = _Waiting(text)
        with self._lock:
            self._queue.append(me)
            lead = self._leaders < self.lanes
            if lead:
                self._leaders += 1
        deadline = time.monotonic() + self.timeout_s
        while True:
            if lead:
                self._lead(me)
            if me.finished:
                break
            if not me.wake.wait(max(0.0, deadline - time.monotonic())):
                self._give_up(me)
                raise ModelUnavailable(f"no question embedding within {self.timeout_s:g}s")
            with self._lock:
                me.wake.clear()
                lead, me.promoted = me.promoted, False
        if me.error is not None:
            raise me.error
        assert me.row is not None
        return me.row

    def _lead(self, me: _Waiting) -> None:
        """Run what is waiting, batch after batch, until this request's own row is done (or another
        leader has taken it); then hand the lead to the first request still queued, if any."""
        try:
            while not me.finished:
                with self._lock:
                    batch = self._queue[: self.max_batch]
                    del self._queue[: self.max_batch]
                if not batch:
                    break  # another leader's batch holds it: wait for it like any follower
                self._embed(batch)
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        with self._lock:
            waiting = next((w for w in self._queue if not w.promoted), None)
            if waiting is None:
                self._leaders -= 1
                return
            waiting.promoted = True  # the lead passes to it: the number of leaders is unchanged
        waiting.wake.set()

    def _give_up(self, me: _Waiting) -> None:
        """A request that stops waiting leaves the queue; a lead handed to it passes on."""
        with self._lock:
            if me in self._queue:
                self._queue.remove(me)
            promoted = me.promoted
            me.promoted = False
        if promoted:
            self._hand_on()

    def _embed(self, batch: list[_Waiting]) -> None:
        self.runs += 1
        self.largest = max(self.largest, len(batch))
        try:
            rows = np.asarray(self._embed_many([w.text for w in batch]))
            if rows.ndim != 2 or rows.shape[0] != len(batch):
                raise ValueError(f"the model gave {rows.shape[0] if rows.ndim else 0} rows for {len(batch)} texts")
        except BaseException as exc:
            if len(batch) == 1 or not isinstance(exc, Exception):
                for waiting in batch:  # (not an Exception, e.g. SystemExit: every waiter gets it)
                    self._finish(waiting, error=exc)
                if not isinstance(exc, Exception):
                    raise
                return
            for waiting in batch:  # alone: only the question whose own run fails gets the error
                self._embed([waiting])
            return
        for waiting, row in zip(batch, rows, strict=True):
            self._finish(waiting, row=row.copy())  # its own array: a caller may keep it (the memo does)

    @staticmethod
    def _finish(waiting: _Waiting, *, row: Vectors | None = None, error: BaseException | None = None) -> None:
        waiting.row, waiting.error = row, error
        waiting.finished = True
        waiting.wake.set()
