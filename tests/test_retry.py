"""The one backoff (schemas/retry.py): its waits and its three stop rules, on a recorded clock of sleeps."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.retry import Backoff, retry, retry_async


@given(st.floats(0.001, 10), st.floats(0.001, 100), st.integers(1, 200))
def test_delays_double_from_the_first_and_never_pass_the_cap(first: float, cap: float, attempt: int) -> None:
    backoff = Backoff(first, cap)
    assert backoff.delay(1) == min(first, cap)
    assert backoff.delay(attempt) <= cap
    assert backoff.delay(attempt + 1) == min(cap, 2 * backoff.delay(attempt)) or backoff.delay(attempt) == cap


class Flaky:
    def __init__(self, failures: int, error: type[Exception] = OSError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "done"


def test_retries_until_it_succeeds_waiting_the_backoff() -> None:
    slept: list[float] = []
    seen: list[tuple[int, float]] = []
    call = Flaky(3)
    result = retry(call, Backoff(0.5, 1.5), sleep=slept.append, on_retry=lambda a, d, _: seen.append((a, d)))
    assert result == "done" and call.calls == 4
    assert slept == [0.5, 1.0, 1.5] and seen == [(1, 0.5), (2, 1.0), (3, 1.5)]


def test_gives_up_after_the_attempts_with_the_last_error() -> None:
    slept: list[float] = []
    call = Flaky(10)
    with pytest.raises(OSError, match="failure 3"):
        retry(call, Backoff(0.1), attempts=2, sleep=slept.append)
    assert call.calls == 3 and slept == [0.1, 0.2]


def test_an_error_that_is_not_retriable_is_raised_at_once() -> None:
    slept: list[float] = []
    call = Flaky(1, ValueError)
    with pytest.raises(ValueError):
        retry(call, Backoff(0.1), retriable=lambda e: isinstance(e, OSError), sleep=slept.append)
    assert call.calls == 1 and slept == []


def test_gives_up_when_the_next_wait_would_end_past_the_deadline() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    call = Flaky(100)
    with pytest.raises(OSError, match="failure 3"):
        retry(call, Backoff(1.0), for_s=5.0, sleep=sleep, clock=lambda: now[0])
    assert slept == [1.0, 2.0]  # at 3 s, a wait of 4 would end past 5 s


def test_the_async_form_never_gives_up() -> None:
    calls = Flaky(4)
    seen: list[float] = []

    async def call() -> str:
        return calls()

    result = asyncio.run(retry_async(call, Backoff(0.001, 0.002), on_retry=lambda _, d, __: seen.append(d)))
    assert result == "done" and seen == [0.001, 0.002, 0.002, 0.002]
