"""What every Elasticsearch adapter shares: one client, index names, bulk results, read errors.

The lexical index, the state, audit and propagation stores each keep their own indexes, but all
reach the server the same way (timeouts and overload retried by the client), name their indexes
under one checked prefix and read `_bulk` answers with the same rule: a missing item is already
gone, a conflict is the caller's to retry, anything else fails the batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from indexer.ports import StoreUnavailable

BULK_CHUNK = 500
"""Operations per `_bulk` request: bounds request size for large documents."""

PAGE_SIZE = 1000
"""Passages per page when listing one document's passages for an update or delete."""

MAX_RESULT_WINDOW = 10_000
"""Elasticsearch's default `index.max_result_window`: the most hits one search may ask for."""

WRITE_ATTEMPTS = 5
"""Re-read-and-retry rounds when an optimistic-concurrency update meets a concurrent write."""

MAX_ID_BYTES = 512
"""Elasticsearch rejects longer `_id`s; longer passage IDs are hashed (see `doc_key`)."""

_PREFIX = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")


class ElasticUnavailable(StoreUnavailable):
    """A read Elasticsearch could not answer: unreachable, overloaded, or shards not yet started.

    A question then fails with this one line (CLI exit 1, API 503) rather than a traceback, and never
    with fewer filters or fewer rankers than it asked for.
    """


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    try:
        yield
    except TransportError as exc:  # connection refused, timeouts: no HTTP answer at all
        raise ElasticUnavailable(f"Elasticsearch could not be reached for {what}: {type(exc).__name__}") from exc
    except ApiError as exc:
        if exc.meta.status < 500 and exc.meta.status != 429:
            raise
        raise ElasticUnavailable(f"Elasticsearch could not answer {what}: HTTP {exc.meta.status} {exc.error}") from exc


class ElasticWriteError(RuntimeError):
    """A bulk item failed. The caller's event stays uncommitted and is retried."""


CONNECTIONS_PER_NODE = 64
"""Per client; the transport *blocks* a request when all are busy (its default is 10). A cluster
worker runs up to 2 x streams.faust_app.REVOCATION_CONCURRENCY appliers plus the documents thread on
one adapter's client: with 10 connections the extra ones would queue in the transport unseen."""


def connect(url: str, *, request_timeout: float = 30.0, max_retries: int = 3) -> Elasticsearch:
    """One client per adapter: retries timeouts and overload (429/502/503/504) with backoff."""
    return Elasticsearch(
        url,
        connections_per_node=CONNECTIONS_PER_NODE,
        request_timeout=request_timeout,
        max_retries=max_retries,
        retry_on_timeout=True,
        retry_on_status=(429, 502, 503, 504),
    )


def check_prefix(prefix: str) -> str:
    """Index names must be lowercase and may not start with `-`, `_` or `+`."""
    if not _PREFIX.match(prefix):
        raise ValueError(f"index prefix must match {_PREFIX.pattern}: {prefix!r}")
    return prefix


def tenant_slug(tenant: str) -> str:
    """Lower-case tenant plus a hash of the exact name: `Acme` and `acme` get different indexes."""
    return f"{tenant.lower()}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def doc_key(passage_id: str) -> str:
    """`_id` = passage_id; a passage ID over 512 bytes (doc IDs may be 1024 chars) is hashed.

    A hashed key cannot collide with a real passage ID: those always contain `@` and `#`.
    """
    if len(passage_id.encode()) <= MAX_ID_BYTES:
        return passage_id
    return "sha256:" + hashlib.sha256(passage_id.encode()).hexdigest()


def raise_bulk_errors(response: Mapping[str, Any], *, ignore_missing: bool = True) -> list[dict[str, Any]]:
    """Raise on failed items; return the version conflicts (409) for the caller to retry."""
    conflicts: list[dict[str, Any]] = []
    failures: list[str] = []
    for item in response.get("items", []):
        ((action, result),) = item.items()
        status = int(result.get("status", 200))
        if status < 300:
            continue
        if status == 404 and ignore_missing and action in ("update", "delete"):
            continue  # the passage is already gone: nothing to revoke or delete
        if status == 409:
            conflicts.append(result)
            continue
        failures.append(f"{action} {result.get('_id')}: {status} {result.get('error')}")
    if failures:
        raise ElasticWriteError(f"{len(failures)} bulk item(s) failed, first: {failures[0]}")
    return conflicts
