"""Reaching a Qdrant server (or qdrant-client's local mode): the client, checked reachable and of a
version qdrant-client supports, before indexer.qdrant_server's index uses it.

Versions: `connect` asks the server for its version before anything else and refuses a pair that
qdrant-client does not support (major versions equal, minors at most one apart), with one line that
says what to change, instead of the client's background warning and odd failures later.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from qdrant_client import QdrantClient

from indexer.ports import StoreUnavailable

LOCAL_MODE_NOTE = "local mode is single-process: use a Qdrant server (RAGSYNC_QDRANT_URL) for workers and askers"


class QdrantUnavailable(StoreUnavailable):
    """The server cannot be used: unreachable, or a version qdrant-client does not support."""


def client_version() -> str:
    return importlib.metadata.version("qdrant-client")


def compatible(client: str, server: str) -> bool:
    """qdrant-client's own rule: same major version, minor versions at most one apart."""
    try:
        c_major, c_minor = (int(x) for x in client.split(".")[:2])
        s_major, s_minor = (int(x) for x in server.split(".")[:2])
    except ValueError:
        return False
    return c_major == s_major and abs(c_minor - s_minor) <= 1


def version_problem(url: str, client: str, server: str) -> str | None:
    """The one-line reason a client/server pair must not be used, or None when it may."""
    if compatible(client, server):
        return None
    return (
        f"Qdrant server at {url} is {server} but qdrant-client is {client}: their minor versions must be at"
        f" most one apart (install qdrant-client {'.'.join(server.split('.')[:2])}.x, or run a matching server)"
    )


def connect(url: str, *, timeout_s: float = 30.0, client: str | None = None) -> QdrantClient:
    """A client for the server at `url`, checked reachable and version-compatible first."""
    qdrant = QdrantClient(url=url, timeout=int(timeout_s), check_compatibility=False)
    try:
        server = qdrant.info().version
    except Exception as exc:  # httpx/qdrant-client raise several types for a refused or broken connection
        qdrant.close()
        raise QdrantUnavailable(
            f"Qdrant server not reachable at {url} ({type(exc).__name__}): start it with"
            " `compose/local/services up qdrant` or set RAGSYNC_QDRANT_URL;"
            " RAGSYNC_QDRANT_URL=local runs qdrant-client's local mode instead (one process only)"
        ) from exc
    problem = version_problem(url, client or client_version(), server)
    if problem:
        qdrant.close()
        raise QdrantUnavailable(problem)
    return qdrant


def open_local(path: Path) -> QdrantClient:
    """qdrant-client's local mode: the same API in-process, one process at a time per folder."""
    try:
        return QdrantClient(path=str(path))
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise
        raise QdrantUnavailable(f"Qdrant local storage {path} is open in another process ({LOCAL_MODE_NOTE})") from exc
