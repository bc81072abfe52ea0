"""Micro-batched question embeddings: the questions of concurrent requests embedded in one model run.

Why: under load (50 clients on /v1/ask) every request embedded its question in an ONNX run of its
own, and those runs overlapped, each with ONNX Runtime's thread pool, on two cores. One short
question is little arithmetic around a fixed cost per run (operator dispatch, thread wake-ups); a
batch of them costs that once. So one thread runs the model for questions: a request hands its
question over and waits for its row. The runner takes whatever is waiting each time it is free, up to
`max_batch`: nothing waits for a batch to fill, so a lone question (a quiet server, a CLI ask, a
test) is embedded alone, as before, at once.

Why it cannot mix up askers: a question's row is a pure function of its text (the model is the same
for every tenant, and a batch is padded with an attention mask, so a row does not depend on the texts
batched with it beyond float rounding: bench/api_answers.py and tests/test_query_batch.py check it),
and each waiter is handed the row at its own position, never a cached one; nothing is kept after the
run (the process memo in indexer.embedding_cache holds questions, by text, as before).

Why a failure stays with its own request: when a batch's run raises, each of its questions is
embedded again alone, so only the question whose own run fails gets the exception; the others get
their rows. A waiter gives up after `timeout_s` (the runner may be stuck in a run) with
ModelUnavailable, as a model that cannot be loaded.

Off by default (settings.embed_query_batch = 1): measured under load on two cores shared with other
jobs, it saved 9 % of the serve's CPU per answer, but the one runner thread, which runs every batch in
turn, got so small a share of the busy machine that throughput halved (bench/README.md).

A dynamically quantised model (MiniLM int8) scales a run's activations by the whole batch, so its rows
depend on their batch: the embedder does not batch its questions (indexer.embedder).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from indexer.ports import Vectors
from schemas.errors import ModelUnavailable

DEFAULT_MAX_BATCH = 32
DEFAULT_TIMEOUT_S = 60.0


@dataclass(eq=False)
class _Waiting:
    text: str
    done: threading.Event = field(default_factory=threading.Event)
    row: Vectors | None = None
    error: BaseException | None = None


class QueryBatcher:
    """`embed(text)`: the row `embed_many([text])[0]` would give, computed in a run with the questions
    other threads handed over meanwhile. Thread-safe; the runner thread starts with the first question."""

    def __init__(
        self,
        embed_many: Callable[[Sequence[str]], Vectors],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        name: str = "ragsync-query-embed",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._embed_many = embed_many
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self._name = name
        self._queue: list[_Waiting] = []
        self._cond = threading.Condition()
        self._runner: threading.Thread | None = None
        self.runs = 0
        """Model runs made (batches, plus the single runs after a failed batch): for tests and bench/."""
        self.largest = 0
        """The largest batch run so far."""

    def embed(self, text: str) -> Vectors:
        waiting = _Waiting(text)
        with self._cond:
            self._queue.append(waiting)
            if self._runner is None or not self._runner.is_alive():
                self._runner = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._runner.start()
            self._cond.notify()
        if not waiting.done.wait(self.timeout_s):
            raise ModelUnavailable(f"no question embedding within {self.timeout_s:g}s")
        if waiting.error is not None:
            raise waiting.error
        assert waiting.row is not None
        return waiting.row

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
            try:
                self._embed(batch)
            except BaseException as exc:  # not an Exception (e.g. SystemExit): fail the batch, end the runner
                for waiting in batch:
                    if not waiting.done.is_set():
                        waiting.error = exc
                        waiting.done.set()
                raise

    def _embed(self, batch: list[_Waiting]) -> None:
        self.runs += 1
        self.largest = max(self.largest, len(batch))
        try:
            rows = np.asarray(self._embed_many([w.text for w in batch]))
            if rows.ndim != 2 or rows.shape[0] != len(batch):
                raise ValueError(f"the model gave {rows.shape[0] if rows.ndim else 0} rows for {len(batch)} texts")
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                batch[0].done.set()
                return
            for waiting in batch:  # alone: only the question whose own run fails gets the error
                self._embed([waiting])
            return
        for waiting, row in zip(batch, rows, strict=True):
            waiting.row = row.copy()  # its own array: a caller may keep it (the memo does) without the batch
            waiting.done.set()
