"""The ragsync home is private: the folder 0700, every file in it 0600.

It holds every document's text (SQLite FTS5, the event log, the vector shard, the embedding cache)
and the session secret that signs tokens, so a world-readable home is a leak of everything the
ACLs protect. Two mechanisms, because the files are created by several libraries:

- The process umask is set to 077 when a home is opened. SQLite, qdrant-edge's native code and
  anything else then create files 0600 and folders 0700, including files made lazily later (WAL and
  SHM files, new segments). This is what daemons holding secrets do; a ragsync process exists to
  work on its home, so the stricter umask for everything else it writes is the right default.
- Existing homes (made before this rule, or copied with other modes) are tightened on open: the
  folder is chmod 0700 and every file and folder below it 0600 / 0700. Symlinks are never followed.

The session secret is written atomically with its final mode: opened O_EXCL with mode 0600 under a
temporary name, fsynced, then linked into place, so it is never readable by others, never seen
half-written, and two processes creating it at once agree on one secret (the link fails for the
second, which reads the first's).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

HOME_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077


def secure_home(home: Path) -> Path:
    """Create (0700) or tighten the home, and make every file this process creates from now on private."""
    os.umask(UMASK)
    home.mkdir(parents=True, exist_ok=True, mode=HOME_MODE)
    tighten(home)
    return home


def tighten(home: Path) -> None:
    """chmod the home 0700 and everything below it 0600 (files) / 0700 (folders), never through a link."""
    _chmod(home, HOME_MODE)
    for folder, dirs, files in os.walk(home, followlinks=False):
        for name in dirs:
            _chmod(Path(folder, name), HOME_MODE)
        for name in files:
            _chmod(Path(folder, name), FILE_MODE)


def _chmod(path: Path, mode: int) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:  # removed meanwhile (a WAL checkpointed away)
        return
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return
    with contextlib.suppress(FileNotFoundError):
        os.chmod(path, mode)  # not a link (checked above): chmod cannot reach outside the home


def read_or_create_secret(path: Path) -> str:
    """The secret stored at `path`, created once (atomically, mode 0600) when missing."""
    if not path.exists():
        secure_home(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(32))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
                os.link(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return path.read_text().strip()
