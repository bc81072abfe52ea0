"""A pure function on untrusted input, run in a child process within a time and memory budget.

The parsers that read documents (pypdf, python-docx, docutils, markdown-it, the HTML parser) cost
what their input makes them cost: a 33 KB PDF kept pypdf busy for minutes, a 1.5 MB DOCX grew to
gigabytes, a 3.5 MB Markdown table made markdown-it hold 2 GB of tokens (issue 18). In the process
that scans or indexes, the first stalls everything behind it and the second takes the process
down, and that process may be `ragsync serve`. Run in a child:

* the child's address space is limited (RLIMIT_AS at its size when it starts, plus `memory_bytes`),
  so a bomb ends in a MemoryError or a failed allocation there; the caller gets OverBudget("...
  exceeded 1024 MiB of memory"). A parser is imported on its first call, inside the budget (tens of
  megabytes of it): a child pays only for the formats it meets, and starts in about a second;
* the caller waits `timeout_s` for the answer, then kills the child (OverBudget("... exceeded 30 s"))
  and starts another for the next call;
* children are kept between calls (up to `workers`), so a call costs one round trip through a pipe
  and the copy of its input and answer, not an interpreter start (about a second, paid on the first
  call that needs a child, never before);
* answers are JSON the caller validates, never pickles: a child that hostile input took over can
  make its own call's answer wrong, nothing else.

The function is named "module:function"; it takes (header: dict, data: bytes) and returns a dict
that json can write. Linux (or a POSIX system with RLIMIT_AS and /proc) is assumed for the memory
limit; without it the child still runs under the time budget.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from schemas.errors import OverBudget as OverBudget  # re-export (schemas.errors)

__all__ = ["Budget", "ChildPool", "OverBudget"]

_FRAME = struct.Struct(">Q")
_RETIRE_AT = 0.5  # a child whose peak reached half its budget is replaced after its answer
_START_TIMEOUT_S = 120.0  # an interpreter start on a loaded machine; not charged to any call
_EXIT_NO_MEMORY = 75


@dataclass(frozen=True, slots=True)
class Budget:
    """What one call may cost. Plain values: the composition root maps settings onto them."""

    timeout_s: float = 30.0
    memory_bytes: int = 1024 * 1024 * 1024
    inline_bytes: int = 128 * 1024  # inputs up to this size of formats with linear readers stay in-process
    max_reply_bytes: int = 64 * 1024 * 1024
    workers: int = 1


def mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


class ChildPool:
    """Children that answer calls (after importing `preload`, outside the budget); thread-safe; `close` ends them."""

    def __init__(self, budget: Budget, preload: Sequence[str] = ()) -> None:
        self.budget = budget
        self.preload = tuple(preload)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, budget.workers))
        self._closed = False
        self.started = 0  # children started so far (tests and benchmarks look)

    def call(self, function: str, header: dict[str, Any], data: bytes, *, what: str = "reading") -> dict[str, Any]:
        """The function's answer; OverBudget past the time or memory budget ("`what` exceeded 30 s") or
        an answer too large; RuntimeError when no child can start. A child that died otherwise answers
        {"ok": False, "kind": "error", ...}."""
        with self._slots:
            child = self._take()
            try:
                reply = child.exchange(function, header, data, self.budget, what)
            except BaseException:
                child.kill()
                raise
            if reply.get("retire") or not child.alive():
                child.kill()
            else:
                self._give_back(child)
        if reply.get("kind") == "memory":
            raise OverBudget(f"{what} exceeded {mib(self.budget.memory_bytes)} of memory")
        if reply.get("kind") == "too_large":
            raise OverBudget(str(reply.get("message", "")), "too large")
        return reply

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.stop()

    def _take(self) -> _Child:
        with self._lock:
            if self._closed:
                raise RuntimeError("the child pool is closed")
            while self._idle:
                child = self._idle.pop()
                if child.alive():
                    return child
                child.kill()
        child = _Child.start(self.budget, self.preload)
        self.started += 1
        return child

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(child)
                return
        child.stop()


# --------------------------------------------------------------------------- the parent's side


class PoolUser:
    """A reader that sends its large inputs to a ChildPool: its own, which `close` ends, or one shared
    with other users (the scanner's extraction and the indexer's chunking), which its owner closes."""

    def __init__(self, budget: Budget | None = None, *, pool: ChildPool | None = None) -> None:
        self._owned = pool is None
        self._pool = pool if pool is not None else ChildPool(budget or Budget())
        self.budget = self._pool.budget

    @property
    def started(self) -> int:
        """Child processes started so far (tests and benchmarks look)."""
        return self._pool.started

    def close(self) -> None:
        if self._owned:
            self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Child:
    """One child process and its two pipes; every exchange is bounded by a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)

    @classmethod
    def start(cls, budget: Budget, preload: tuple[str, ...]) -> _Child:
        package_root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from indexer.budget import child_main; child_main()",
                str(budget.memory_bytes),
                *preload,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        child = cls(proc)
        try:
            ready = child._receive(time.monotonic() + _START_TIMEOUT_S, 1024, "starting")
        except OverBudget:
            raise RuntimeError(f"a child process did not start within {_START_TIMEOUT_S:g} s") from None
        if ready is None or json.loads(ready).get("ready") is not True:
            code = child.kill()
            raise RuntimeError(f"a child process failed to start ({_status(code)})")
        return child

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exchange(self, function: str, header: dict[str, Any], data: bytes, budget: Budget, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + budget.timeout_s
        overrun = f"{what} exceeded {budget.timeout_s:g} s"
        head = json.dumps(
            {"call": function, "max_reply": budget.max_reply_bytes, "timeout_s": budget.timeout_s, **header}
        ).encode()
        request = _FRAME.pack(len(head)) + head + _FRAME.pack(len(data)) + data
        try:
            self._send(request, deadline, overrun)
            raw = self._receive(deadline, budget.max_reply_bytes + 4096, overrun)
        except BrokenPipeError:
            raw = None
        if raw is None:  # the child died: a signal (the kernel's OOM killer, a crash in a C parser) or no memory
            code = self.kill()
            if code in (_EXIT_NO_MEMORY, -signal.SIGKILL):
                return {"ok": False, "kind": "memory", "retire": True}
            return {"ok": False, "kind": "error", "message": f"the child process died ({_status(code)})"}
        reply: dict[str, Any] = json.loads(raw)
        return reply

    def _send(self, request: bytes, deadline: float, overrun: str) -> None:
        view = memoryview(request)
        with selectors.DefaultSelector() as selector:
            selector.register(self._in, selectors.EVENT_WRITE)
            while view:
                self._wait(selector, deadline, overrun)
                try:
                    sent = os.write(self._in, view[: 1 << 20])
                except BlockingIOError:
                    continue
                view = view[sent:]

    def _receive(self, deadline: float, limit: int, overrun: str) -> bytes | None:
        """One frame, None at end of file; OverBudget when the deadline passes or the frame is too big."""
        buffer = bytearray()
        need = _FRAME.size
        length: int | None = None
        with selectors.DefaultSelector() as selector:
            selector.register(self._out, selectors.EVENT_READ)
            while len(buffer) < need:
                self._wait(selector, deadline, overrun)
                try:
                    chunk = os.read(self._out, min(need - len(buffer), 1 << 20))
                except BlockingIOError:
                    continue
                if not chunk:
                    return None
                buffer += chunk
                if length is None and len(buffer) >= _FRAME.size:
                    (length,) = _FRAME.unpack(buffer[: _FRAME.size])
                    if length > limit:
                        self.kill()
                        raise OverBudget(f"its text is over {mib(limit)}", "too large")
                    need = _FRAME.size + length
        return bytes(buffer[_FRAME.size :])

    def _wait(self, selector: selectors.BaseSelector, deadline: float, overrun: str) -> None:
        """Until the pipe is ready; past the deadline the child is killed and the call is over budget."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise OverBudget(overrun)
            if selector.select(remaining):
                return

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return code

    def stop(self) -> None:
        """End an idle child: closing its input is its signal to exit; killed if it lingers."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


# --------------------------------------------------------------------------- the child's side


def child_main() -> None:
    """Answer calls read from stdin on stdout until stdin closes. Runs in the child only."""
    memory = int(sys.argv[1])
    # The protocol owns the real stdout; anything a library prints goes nowhere.
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the child's whole life
    stdin = sys.stdin.buffer
    # Preloaded modules are outside the budget; anything a call imports is inside it.
    for module in sys.argv[2:]:
        importlib.import_module(module)
    baseline = _limit_memory(memory)
    _write(stdout, json.dumps({"ready": True}).encode())
    while True:
        head = _read_frame(stdin)
        data = _read_frame(stdin) if head is not None else None
        if head is None or data is None:
            return
        header = json.loads(head)
        _limit_cpu(float(header["timeout_s"]))
        try:
            reply = _answer(header, data)
            del data
            if baseline is not None and _peak() - baseline >= memory * _RETIRE_AT:
                reply["retire"] = True  # fragmented or near its limit: the next call gets a fresh child
            raw = json.dumps(reply).encode()
            if len(raw) > int(header["max_reply"]):
                message = f"its text is {len(raw)} bytes as JSON, limit {header['max_reply']}"
                raw = json.dumps({"ok": False, "kind": "too_large", "message": message}).encode()
            _write(stdout, raw)
        except MemoryError:
            os._exit(_EXIT_NO_MEMORY)


def _call(header: dict[str, Any]) -> Any:
    module, _, name = str(header["call"]).partition(":")
    return getattr(importlib.import_module(module), name)


def _answer(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    try:
        reply: dict[str, Any] = _call(header)(header, data)
        return reply
    except MemoryError:
        return {"ok": False, "kind": "memory", "retire": True}
    except Exception as exc:
        if near_limit():  # a C parser that fails to allocate says "unknown error" and the like
            return {"ok": False, "kind": "memory", "retire": True}
        return {"ok": False, "kind": "error", "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}


def near_limit() -> bool:
    """In a child: whether its peak memory came within 64 MiB of its limit, so that a parser's odd
    error ("XMLSyntaxError: unknown error") was in truth a failed allocation."""
    baseline, memory = _limits
    return baseline is not None and _peak() >= baseline + memory - 64 * 1024 * 1024


_limits: list[Any] = [None, 0]


def _limit_memory(memory: int) -> int | None:
    """RLIMIT_AS at the current size plus `memory`; the size before (the baseline), None where it cannot be set."""
    try:
        import resource

        size = _vm("VmSize")
        if size is None:
            return None
        resource.setrlimit(resource.RLIMIT_AS, (size + memory, size + memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _limits[:] = [size, memory]
        return size
    except (ImportError, ValueError, OSError):
        return None


def _limit_cpu(timeout_s: float) -> None:
    """A backstop for a child nobody waits for any more (its parent killed mid-call): the kernel ends
    this call after twice its time in CPU seconds, whatever the parser is doing."""
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(usage.ru_utime + usage.ru_stime + 2 * timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.getrlimit(resource.RLIMIT_CPU)[1]))
    except (ImportError, ValueError, OSError):
        pass


def _peak() -> int:
    return _vm("VmPeak") or 0


def _vm(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _read_frame(stream: Any) -> bytes | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (length,) = _FRAME.unpack(head)
    body: bytes = stream.read(length)
    return body if len(body) == length else None


def _write(stream: Any, payload: bytes) -> None:
    stream.write(_FRAME.pack(len(payload)) + payload)
    stream.flush()
