"""The operator credential of a home: what a CLI command shows the home's owner (`ragsync serve`) to
read its status, traces and deletion certificates (ragsync.owner_api, ragsync.owner_client).

It used to be an HMAC of the session secret: the same on every home sharing a secret (a serve on one
home accepted a CLI of another), and valid for as long as the secret was. Now it is a random
256-bit key of this home alone, in `<home>/operator.key` with an expiry:

- Who may use it: whoever can read the home (0700, the key file 0600), which is who could open its
  stores directly anyway. A key file that other accounts could read, or that belongs to another
  account, is not accepted, and the next command replaces it.
- Expiry (`operator_key_ttl_s`, 24 h by default): serve refuses an expired key; the next command
  that needs one makes a new key, so a copied key is worth at most a day.
- Rotation (`ragsync operator rotate`): a new key at once; the previous one stops working at once,
  since serve checks each request against the file (re-read whenever it changes).

Two processes renewing at once agree on one key (an flock around the check and the write), and a
key is written whole or not at all (a temporary file, fsynced, renamed over the old one).
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragsync.settings import Settings

KEY_FILE = "operator.key"
LOCK_FILE = "operator.key.lock"
DEFAULT_TTL_S = 24 * 3600.0
_MAX_FILE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class OperatorKey:
    key: str
    created_at: float  # unix seconds
    expires_at: float

    def valid(self, now: float) -> bool:
        return now < self.expires_at


def operator_keys(settings: Settings) -> OperatorKeys:
    """The operator key of the settings' home, with the configured lifetime."""
    return OperatorKeys(settings.home, settings.operator_key_ttl_s)


class OperatorKeys:
    """The home's operator key: read, checked, made when missing or expired, rotated on request."""

    def __init__(self, home: Path, ttl_s: float = DEFAULT_TTL_S, *, clock: Callable[[], float] = time.time) -> None:
        if not ttl_s > 0:
            raise ValueError("an operator key needs a positive lifetime")
        self.home = home
        self.path = home / KEY_FILE
        self.ttl_s = ttl_s
        self.clock = clock
        self._cached: tuple[tuple[int, int, int, int], OperatorKey | None] | None = None
        self._cache_lock = threading.Lock()

    def read(self) -> OperatorKey | None:
        """The key in the file, or None: missing, unreadable, malformed, or readable by other accounts."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.geteuid():
                return None
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)
            with self._cache_lock:
                if self._cached is not None and self._cached[0] == stamp:
                    return self._cached[1]
            key = _parse(os.read(fd, _MAX_FILE_BYTES))
            with self._cache_lock:
                self._cached = (stamp, key)
            return key
        finally:
            os.close(fd)

    def accepts(self, given: str) -> bool:
        """Whether `given` is the home's key and the key has not expired (constant-time comparison)."""
        current = self.read()
        if current is None or not current.valid(self.clock()):
            return False
        return hmac.compare_digest(given.encode("utf-8", "replace"), current.key.encode())

    def current(self) -> str:
        """The valid key, made now when there is none or it expired."""
        key = self.read()
        if key is not None and key.valid(self.clock()):
            return key.key
        with self._locked():
            key = self.read()  # another process may have renewed it meanwhile
            if key is not None and key.valid(self.clock()):
                return key.key
            return self._write().key

    def rotate(self) -> OperatorKey:
        """A new key now; the previous one is refused from this moment."""
        with self._locked():
            return self._write()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.home / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _write(self) -> OperatorKey:
        now = self.clock()
        key = OperatorKey(secrets.token_hex(32), now, now + self.ttl_s)
        body = json.dumps({"key": key.key, "created_at": key.created_at, "expires_at": key.expires_at}).encode()
        tmp = self.path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return key


def _parse(data: bytes) -> OperatorKey | None:
    try:
        body = json.loads(data)
        key, created, expires = body["key"], body["created_at"], body["expires_at"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(key, str) or len(key) < 32:
        return None
    if not all(isinstance(t, int | float) and not isinstance(t, bool) for t in (created, expires)):
        return None
    return OperatorKey(key, float(created), float(expires))
