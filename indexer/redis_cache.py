"""Cluster result cache: Redis, shared by every query worker.

Entries are `SET <namespace>:<key> <value> PX <ttl>`; the key already carries tenant, user,
scopes and the tenant's generation (`indexer.cache.cache_key`). A tenant's generation is an
`INCR` counter at `<namespace>:gen:<tenant>` with no expiry: bumping it makes every older key
unreachable at once, in every worker, and the old entries age out by their TTL.

Failure policy, and why it differs per call:
- `get`/`set`: the cache is an optimisation, so a Redis outage degrades to a miss / no-op with
  a warning; answering slower beats failing.
- `generation`: a generation that cannot be read must not fall back to a fixed value (after an
  outage a stale pre-revocation entry could match it). It returns a random negative
  generation instead: a key no other request uses, so that query is a guaranteed miss.
- `bump`: raises. An un-invalidated cache after a revocation or deletion is a security bug; the
  sink lets the error propagate, the event stays uncommitted and is retried.
"""

from __future__ import annotations

import logging
import secrets
import time

import redis

from indexer.redis_keys import REDIS_UNAVAILABLE as _UNAVAILABLE
from indexer.redis_keys import unlink_matching

log = logging.getLogger(__name__)

_WARN_EVERY_S = 30.0
"""At most one warning per interval while Redis is down: a log line per query would flood."""


class RedisCache:
    def __init__(self, url: str, *, namespace: str = "ragsync", socket_timeout_s: float = 0.5) -> None:
        self.namespace = namespace
        self._redis: redis.Redis = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            health_check_interval=30,
        )
        self._last_warning = 0.0

    def _key(self, key: str) -> str:
        return f"{self.namespace}:{key}"

    def _gen_key(self, tenant: str) -> str:
        return f"{self.namespace}:gen:{tenant}"

    def _warn(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY_S:
            self._last_warning = now
            log.warning("redis cache unavailable (%s): %s; serving without cache", what, exc)

    def get(self, key: str) -> bytes | None:
        try:
            value = self._redis.get(self._key(key))
        except _UNAVAILABLE as exc:
            self._warn("get", exc)
            return None
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes, ttl_s: float) -> None:
        try:
            self._redis.set(self._key(key), value, px=max(1, round(ttl_s * 1000)))
        except _UNAVAILABLE as exc:
            self._warn("set", exc)

    def generation(self, tenant: str) -> int:
        try:
            raw = self._redis.get(self._gen_key(tenant))
        except _UNAVAILABLE as exc:
            self._warn("generation", exc)
            return -1 - secrets.randbelow(2**62)
        return int(raw) if raw is not None else 0

    def bump(self, tenant: str) -> int:
        """INCR the tenant's generation; errors propagate (see the module docstring)."""
        return int(self._redis.incr(self._gen_key(tenant)))

    def drop_all(self) -> None:
        """Delete every key of this namespace, generations included (tests)."""
        unlink_matching(self._redis, f"{self.namespace}:*")

    def close(self) -> None:
        self._redis.close()
