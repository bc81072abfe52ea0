"""What the Redis adapters (result cache, embedding cache, deny set) share about talking to Redis.

One definition of which errors mean "Redis cannot be used now", so the three adapters turn the same
failures into their fail-closed answers (a cache miss, a raised DenyUnavailable), and one way of
dropping a namespace's keys that never holds more than a batch of names in memory.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

REDIS_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)
"""The errors of an unreachable or unresponsive server (not of a bad command)."""


def unlink_matching(client: Any, pattern: str, batch: int = 500) -> None:
    """UNLINK every key matching `pattern`, `batch` names at a time (tests drop their namespaces)."""
    names: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=batch):
        names.append(key)
        if len(names) >= batch:
            client.unlink(*names)
            names = []
    if names:
        client.unlink(*names)
