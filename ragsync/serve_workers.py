"""`ragsync serve --workers N` on the cluster profile: N serving processes answering from one listening
socket, so answers are not bound by one interpreter lock (issue 22 item 3).

Why processes, and why only on the cluster: one serve process answers with Python on one core at a
time (the GIL), at ~50-60 ms of CPU per answer. On the cluster profile every store is a server
(Elasticsearch, Qdrant, Redis), and everything an answer must respect is read from them on each
request: the tenant's generation and the deny set from Redis, the permission filter inside each
store's query. A worker holds nothing another could have changed (its memos are keyed by texts, never
by principals or passages), so a revocation reaches every worker the moment it reaches Redis. An
embedded home has one owner process holding the stores (ragsync.owner), so there it is refused.

How: this supervisor binds the API socket (and the operator metrics socket) once and starts N
`ragsync serve` children that inherit them (`--listen-fds`, a hidden option), each a fresh interpreter
that builds its own clients. The kernel hands each connection to one child. Operator metrics are
aggregated over the children through prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR,
a private folder unless the operator set one): any child answering a scrape reports every child's
counts. A child that exits on its own stops the whole serve (exit 1) rather than answer at a
fraction of its capacity unnoticed; SIGTERM or Ctrl-C stops every child gracefully.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragsync.listeners import Listener
from ragsync.metrics import check_metrics_exposure, metrics_guard
from ragsync.settings import Settings

READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WorkerCommand:
    """What a child runs: the CLI's global options and serve's own, besides the inherited sockets."""

    global_args: tuple[str, ...]
    serve_args: tuple[str, ...]


def listener_of(fd: int) -> Listener:
    """A Listener from an inherited, already listening socket (a child of the supervisor)."""
    sock = socket.socket(fileno=fd)
    host, port = sock.getsockname()[:2]
    return Listener(str(host), int(port), sock)


def signal_ready(fd: int | None) -> None:
    """Tell the supervisor this child has built its stores and is about to serve."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, b"1")
            os.close(fd)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when the supervisor dies, even by SIGKILL (no orphaned workers)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_workers(
    settings: Settings,
    listener: Listener,
    metrics: Listener | None,
    workers: int,
    command: WorkerCommand,
    *,
    announce: Callable[[str], None],
) -> int:
    """Start `workers` children on the bound sockets, wait until each is ready, announce the addresses,
    then wait for SIGTERM/SIGINT (returns 0 once every child stopped) or a child's exit (stops the
    others, returns 1)."""
    check_metrics_exposure(settings)
    own_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    multiproc = tempfile.mkdtemp(prefix="ragsync-metrics-") if own_dir else os.environ["PROMETHEUS_MULTIPROC_DIR"]
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": multiproc}
    fds = [listener.sock.fileno()] + ([metrics.sock.fileno()] if metrics is not None else [])
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    children: list[subprocess.Popen[bytes]] = []
    try:
        pipes = []
        for _ in range(workers):
            read_end, write_end = os.pipe()
            args = [*command.global_args, "serve", "--listen-fds", ",".join(map(str, fds))]
            args += ["--ready-fd", str(write_end), *command.serve_args]
            children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "ragsync.cli", *args],
                    env=env,
                    pass_fds=(*fds, write_end),
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )
            )
            os.close(write_end)
            pipes.append(read_end)
        if not _wait_ready(children, pipes, stop):
            if stop.is_set():
                return 0
            announce(f"ragsync serve: a worker did not start within {READY_TIMEOUT_S:.0f}s or exited; stopping")
            return 1
        url = listener.url.replace("http://", "https://", 1) if "--ssl-certfile" in command.serve_args else listener.url
        announce(f"ragsync serve: API on {url}  (POST /v1/ask; docs {url}/docs, OpenAPI {url}/openapi.json)")
        announce(f"ragsync serve: {workers} workers (pids {' '.join(str(c.pid) for c in children)}), one socket")
        if metrics is not None:
            announce(
                f"ragsync serve: operator metrics on {metrics.url}/metrics {metrics_guard(settings)} (every worker)"
            )
        else:
            announce("ragsync serve: operator metrics off (metrics_port unset)")
        while not stop.wait(0.5):
            gone = [c for c in children if c.poll() is not None]
            if gone:
                announce(f"ragsync serve: worker {gone[0].pid} exited ({gone[0].returncode}); stopping the others")
                return 1
        return 0
    finally:
        _stop_all(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if own_dir:
            shutil.rmtree(multiproc, ignore_errors=True)


def _wait_ready(children: Sequence[subprocess.Popen[bytes]], pipes: list[int], stop: threading.Event) -> bool:
    """Until every child wrote its byte; False when one exited first, the time ran out or we were stopped."""
    waiting = set(pipes)
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while waiting and not stop.is_set() and time.monotonic() < deadline:
            readable, _, _ = select.select(list(waiting), [], [], 0.5)
            for fd in readable:
                if not os.read(fd, 1):  # EOF without the byte: the child exited (its error is in the log)
                    return False
                waiting.discard(fd)
        return not waiting
    finally:
        for fd in pipes:
            os.close(fd)


def _stop_all(children: Sequence[subprocess.Popen[bytes]]) -> None:
    from prometheus_client import multiprocess

    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            multiprocess.mark_process_dead(child.pid)  # type: ignore[no-untyped-call]
