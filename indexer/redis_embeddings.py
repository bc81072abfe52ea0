"""Cluster embedding cache: vectors by sha256(model, text) in Redis, seen by every worker on every machine.

Each entry is `SET <namespace>:emb:<hex key> <float32 bytes> EX <ttl>`; reads are one `MGET` per
batch, writes one pipelined batch of `SET`s. The key already names the model, so two models never
share an entry, and it does not name the tenant, so a second tenant's copy of a text is free.

Failure policy: the cache only saves work, it never decides what is indexed. A Redis outage makes
a lookup a miss (the worker embeds) and a store a no-op, with one warning per interval; the write
path carries on. A vector of the wrong size is rejected by `CachedEmbedder` as a miss.

Why Redis rather than a Qdrant collection keyed by the hash: the cluster already runs Redis for the
result cache, a lookup is one round trip for a whole batch, and entries expire on their own (a
Qdrant collection would need a sweeper and would mix cache entries with the passages' operations).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import redis

from indexer.ports import PurgeDetails, Removal
from indexer.redis_keys import REDIS_UNAVAILABLE as _UNAVAILABLE
from indexer.redis_keys import unlink_matching

log = logging.getLogger(__name__)

_WARN_EVERY_S = 30.0
DEFAULT_TTL_S = 30 * 24 * 3600
"""A month: long enough that re-syncs and new tenant copies hit, short enough that dropped texts age out."""


class RedisEmbeddingCache:
    removal: Removal = "server"
    """Redis frees an unlinked entry itself; its snapshots and AOF rewrites are the server's to schedule."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "ragsync",
        ttl_s: float = DEFAULT_TTL_S,
        socket_timeout_s: float = 2.0,
        batch: int = 500,
    ) -> None:
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.batch = batch
        self._redis: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s, health_check_interval=30
        )
        self._last_warning = 0.0

    def _key(self, key: bytes) -> str:
        return f"{self.namespace}:emb:{key.hex()}"

    def _warn(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY_S:
            self._last_warning = now
            log.warning("redis embedding cache unavailable (%s): %s; embedding without it", what, exc)

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        unique = list(dict.fromkeys(keys))
        found: dict[bytes, bytes] = {}
        try:
            for start in range(0, len(unique), self.batch):
                chunk = unique[start : start + self.batch]
                values = self._redis.mget([self._key(k) for k in chunk])
                for key, value in zip(chunk, values, strict=True):  # type: ignore[arg-type]
                    if isinstance(value, bytes):
                        found[key] = value
        except _UNAVAILABLE as exc:
            self._warn("get", exc)
        return found

    def put_many(self, items: Mapping[bytes, bytes]) -> None:
        if not items:
            return
        ttl_ms = max(1, round(self.ttl_s * 1000))
        pairs = list(items.items())
        try:
            for start in range(0, len(pairs), self.batch):
                pipe = self._redis.pipeline(transaction=False)
                for key, value in pairs[start : start + self.batch]:
                    pipe.set(self._key(key), value, px=ttl_ms)
                pipe.execute()
        except _UNAVAILABLE as exc:
            self._warn("set", exc)

    def delete_many(self, keys: Sequence[bytes]) -> int:
        """UNLINK the entries; an outage raises (a deletion must not be confirmed with its entries left)."""
        unique = list(dict.fromkeys(keys))
        removed = 0
        for start in range(0, len(unique), self.batch):
            removed += int(self._redis.unlink(*[self._key(k) for k in unique[start : start + self.batch]]))
        return removed

    def flush(self) -> None:
        """Nothing to do: an UNLINK is applied by the server when it returns."""

    def purge(self) -> PurgeDetails:
        """Nothing of ours to run (see `removal`)."""
        return {}

    def drop_all(self) -> None:
        """Delete this namespace's embedding entries (tests)."""
        unlink_matching(self._redis, f"{self.namespace}:emb:*")

    def close(self) -> None:
        self._redis.close()
