"""System account commands for the source-permission tests, one at a time across test processes.

useradd, groupadd, gpasswd, userdel and groupdel take /etc/passwd's and /etc/group's locks and fail
at once ("cannot lock /etc/passwd; try again later") when another holds them: the POSIX and SMB
suites run in parallel processes (scripts/test.sh), so each such command holds this file lock.
"""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/tmp/ragsync-test-accounts.lock")
ACCOUNT_COMMANDS = frozenset({"useradd", "groupadd", "gpasswd", "userdel", "groupdel", "usermod", "groupmod"})


@contextmanager
def accounts_locked() -> Iterator[None]:
    with LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def account_command(cmd: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, text=True, capture_output=True, **kwargs)` under the lock for account commands."""
    if cmd and Path(cmd[0]).name in ACCOUNT_COMMANDS:
        with accounts_locked():
            return subprocess.run(list(cmd), text=True, capture_output=True, **kwargs)  # type: ignore[call-overload,no-any-return]
    return subprocess.run(list(cmd), text=True, capture_output=True, **kwargs)  # type: ignore[call-overload,no-any-return]
