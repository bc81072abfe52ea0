"""Reaching a Qdrant server (or qdrant-client's local mode): the client, checked reachable and of a
version qdrant-client supports, before indexer.qdrant_server's index uses it.

Versions: `connect` asks the server for its version before anything else and refuses a pair that
qdrant-client does not support (major versions equal, minors at most one apart), with one line that
says what to change, instead of the client's background warning and odd failures later.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from qdrant_client import QdrantClient, models

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


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})

KEEPALIVE_CONNECTIONS = 16
"""Idle connections kept to a server on this host: one per thread searching at the same time suffices."""


def loopback_options(url: str) -> dict[str, Any]:
    """qdrant-client's options for a server on this host: connections kept alive, answers uncompressed.

    For `localhost`/`127.0.0.1` qdrant-client turns keep-alive off, so every request opened and closed a
    TCP connection (a connect, an accept on the server and a close per search; ~0.7 ms of client CPU of
    ~5 per search, bench/README "Tenth round"). It does so because a kept-alive connection that receives
    a gzipped, chunked answer can wait ~40 ms for a delayed ACK (seen on 32-59 % of 50-point answers
    with httpx here, none uncompressed): asking for `identity` removes the cause, and on loopback
    compression saves nothing. Other hosts keep qdrant-client's defaults (pooled, gzip)."""
    if urlsplit(url).hostname not in LOOPBACK:
        return {}
    return {
        "limits": httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS),
        "headers": {"Accept-Encoding": "identity"},
    }


def connect(url: str, *, timeout_s: float = 30.0, client: str | None = None) -> QdrantClient:
    """A client for the server at `url`, checked reachable and version-compatible first."""
    qdrant = QdrantClient(url=url, timeout=int(timeout_s), check_compatibility=False, **loopback_options(url))
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


def rest_query(
    client: QdrantClient, collection: str, query: Any, using: str | None, flt: models.Filter, limit: int, floor: float
) -> list[models.ScoredPoint]:
    """`query_points` on a server through the REST API's own call, payload and no vector: the request and
    the answer of `QdrantClient.query_points`, without its inference inspector, which walks the query and
    filter looking for documents to embed on every call (~2 ms of the client's ~5 ms of CPU per search,
    bench/README "Tenth round"). Errors are the client's own (UnexpectedResponse, ResponseHandlingException)."""
    request = models.QueryRequest(
        query=query, using=using, filter=flt, score_threshold=floor, limit=limit, with_payload=True
    )
    answer = client.http.search_api.query_points(collection, query_request=request)
    if answer.result is None:
        raise QdrantUnavailable(f"Qdrant answered a search of {collection!r} without a result")
    return list(answer.result.points)
