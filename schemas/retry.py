"""The one backoff: what every retry loop waits between attempts, and the three ways one gives up.

Every loop that retries a failed write, send or call waits `Backoff.delay(attempt)`: the first wait,
doubling, capped. What differs is only when a loop gives up, and that is the caller's to say:

* never (`retry_async` with no limit): a Faust agent's write must land, or its partition stalls; the
  other agents keep running, and an outage shows as lag, never as a lost event;
* after `attempts` retries (`retry(..., attempts=n)`): the embedded worker hands the batch back
  uncommitted, so the next poll redelivers it;
* when the next wait would end past a deadline (`retry(..., for_s=s)`): calls that clear on their
  own (a fresh broker's coordinator) or not at all.

Loops that are schedules rather than calls (the owner's indexer steps, the purger's next try) keep
their own state and take their waits from `Backoff.delay` too.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

OnRetry = Callable[[int, float, Exception], None]
"""Called inside the `except` block before each wait, with (attempt, delay, error): `log.exception` works there."""


@dataclass(frozen=True, slots=True)
class Backoff:
    first_s: float
    max_s: float = math.inf

    def delay(self, attempt: int) -> float:
        """The wait after the `attempt`-th failure (1-based): first_s, doubling, at most max_s."""
        return float(min(self.max_s, self.first_s * 2.0 ** max(0, attempt - 1)))


def _always(exc: Exception) -> bool:
    return True


def retry(
    call: Callable[[], T],
    backoff: Backoff,
    *,
    attempts: int | None = None,
    for_s: float | None = None,
    retriable: Callable[[Exception], bool] = _always,
    on_retry: OnRetry | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()` until it returns. Re-raises the error when it is not `retriable`, after `attempts`
    retries, or when the next wait would end more than `for_s` after the first try."""
    deadline = clock() + for_s if for_s is not None else None
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            attempt += 1
            delay = backoff.delay(attempt)
            if (
                not retriable(exc)
                or (attempts is not None and attempt > attempts)
                or (deadline is not None and clock() + delay > deadline)
            ):
                raise
            if on_retry is not None:
                on_retry(attempt, delay, exc)
        sleep(delay)


async def retry_async(call: Callable[[], Awaitable[T]], backoff: Backoff, *, on_retry: OnRetry | None = None) -> T:
    """`await call()` until it returns, waiting `backoff` between tries, never giving up (see above)."""
    attempt = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            attempt += 1
            delay = backoff.delay(attempt)
            if on_retry is not None:
                on_retry(attempt, delay, exc)
        await asyncio.sleep(delay)
