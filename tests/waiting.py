"""The one way tests wait for something another process or thread does: poll a condition until a deadline.

A test that sleeps for a fixed time passes or fails with the machine's load; one that polls a condition
waits only as long as needed and fails with a sentence saying what never happened (and, through
`explain`, what the system looked like then).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    every_s: float = 0.1,
    explain: Callable[[], str] | None = None,
    alive: Iterable[subprocess.Popen[bytes] | subprocess.Popen[str]] = (),
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `predicate` until it returns something truthy, and return that value.

    `alive`: processes that must keep running meanwhile (one exiting fails at once instead of at the
    deadline). `tolerate`: exceptions that mean "not yet" (a store down or starting). On the deadline
    the test fails with `what` and, when given, `explain()` (the last 4,000 characters).
    """
    procs = list(alive)
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"a process exited ({proc.returncode}) while waiting for {what}")
        try:
            value = predicate()
        except tolerate:
            pass
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            detail = f"\n{explain()[-4000:]}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(every_s)
