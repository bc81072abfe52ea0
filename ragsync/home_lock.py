"""Who owns a home's stores: one process at a time, named in `owner.lock` inside the home.

The embedded stores cannot be shared between processes: qdrant-edge locks its shard for the life
of the process that opened it, and batched SQLite writers would queue behind each other's batch
transactions. So exactly one process opens them, the owner. `ragsync serve` owns its home for as
long as it runs and answers for it over HTTP; a command that finds no owner becomes one for as long
as it needs the stores (a sync while it scans and applies, an ask while it answers) and then lets go.

The lock is an `fcntl.flock` held on the file for the owner's whole life. The kernel releases it
when the process ends, however it ends (SIGKILL, OOM, a power cut's reboot), so a lock left behind
by a dead process is never mistaken for a live one and the next owner simply takes it over. The
file's content (pid, command, API address) only says who the holder is; it never decides anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

LOCK_NAME = "owner.lock"

LONG_LIVED = frozenset({"serve", "worker"})
"""Owners that do not let go on their own: a command that needs the stores does not wait for them."""


@dataclass(frozen=True)
class OwnerInfo:
    pid: int
    command: str  # "serve", "worker", "sync", "ask", ...
    api: str | None  # base URL when the owner answers HTTP, e.g. "http://127.0.0.1:8080"
    since: str  # ISO time the ownership began
    host: str

    def describe(self) -> str:
        where = f", {self.api}" if self.api else ""
        return f"`ragsync {self.command}` (pid {self.pid}{where})"

    @property
    def long_lived(self) -> bool:
        return self.command in LONG_LIVED


class HomeOwned(Exception):
    """The home's stores belong to another live process."""

    def __init__(self, home: Path, owner: OwnerInfo | None) -> None:
        self.home = home
        self.owner = owner
        who = owner.describe() if owner else "another process"
        super().__init__(f"{home} is owned by {who}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_info(path: Path) -> OwnerInfo | None:
    try:
        data = json.loads(path.read_text() or "null")
        return OwnerInfo(**data) if isinstance(data, dict) else None
    except (OSError, ValueError, TypeError):
        return None


def current_owner(home: Path, *, settle_s: float = 1.0) -> OwnerInfo | None:
    """The live owner of the home, or None when nobody holds the lock.

    Probes with a shared, non-blocking lock: it fails exactly when some process holds the
    exclusive one. The holder writes its details right after it locked, so for a moment the file
    may still show the previous (dead) holder; that is read again until it names a live process.
    """
    path = home / LOCK_NAME
    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
    finally:
        os.close(fd)
    deadline = time.monotonic() + settle_s
    while True:
        info = _read_info(path)
        if info is not None and (info.host != socket.gethostname() or _pid_alive(info.pid)):
            return info
        if time.monotonic() >= deadline:
            return info
        time.sleep(0.02)


class HomeLock:
    """The owner's side of the lock. Not reentrant; one per process and home."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / LOCK_NAME
        self._fd: int | None = None
        self.info: OwnerInfo | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self, command: str, api: str | None = None) -> bool:
        """Take the lock if nobody holds it; True on success. A probe's shared lock is waited out."""
        if self._fd is not None:
            raise RuntimeError("this process already owns the home")
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + 0.5  # current_owner() holds a shared lock for microseconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.01)
        self._fd = fd
        self._write(OwnerInfo(os.getpid(), command, api, datetime.now(UTC).isoformat(), socket.gethostname()))
        return True

    def acquire(
        self,
        command: str,
        api: str | None = None,
        *,
        wait: Callable[[OwnerInfo | None], bool] | None = None,
        poll_s: float = 0.1,
    ) -> None:
        """Take the lock; while another process holds it, `wait(owner)` says whether to keep waiting.

        Without `wait`, or when it answers False, raises HomeOwned naming the holder.
        """
        while not self.try_acquire(command, api):
            owner = current_owner(self.home)
            if wait is None or not wait(owner):
                raise HomeOwned(self.home, owner)
            time.sleep(poll_s)

    def set_api(self, api: str) -> None:
        """Publish the API address once the server is bound (it may have picked the port)."""
        if self.info is None:
            raise RuntimeError("the lock is not held")
        self._write(OwnerInfo(self.info.pid, self.info.command, api, self.info.since, self.info.host))

    def _write(self, info: OwnerInfo) -> None:
        assert self._fd is not None
        data = json.dumps(asdict(info)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        self.info = info

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        self.info = None


def claim(home: Path, command: str, *, on_wait: Callable[[OwnerInfo], None] | None = None) -> HomeLock | OwnerInfo:
    """Own the home, or find the live owner that answers for it over HTTP.

    Returns the held lock (this process now owns the home: release it when done) or the owner to
    talk to. Waits while a short-lived owner finishes (a sync applying its events, an ask); raises
    HomeOwned for a long-lived owner that serves no API (`ragsync worker`).
    """
    lock = HomeLock(home)
    told = False
    while True:
        if lock.try_acquire(command):
            return lock
        owner = current_owner(home)
        if owner is None:
            continue  # released in between: try again
        if owner.api:
            return owner
        if owner.long_lived and owner.command != "serve":  # a serve without an address yet is starting
            raise HomeOwned(home, owner)
        if on_wait is not None and not told:
            on_wait(owner)
            told = True
        time.sleep(0.1)


@contextlib.contextmanager
def scan_lock(home: Path, source: str, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """One scan of a source at a time, across processes (a CLI sync, a watcher, the owner's schedule).

    Two concurrent scans of one source would read the same connector state, give two different
    changes of a document the same version, and the second would be dropped as stale downstream.
    """
    import hashlib

    folder = home / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"scan-{hashlib.sha256(source.encode()).hexdigest()[:16]}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
