"""Result caches. Entries are never deleted one by one: a tenant's generation is part of every
key, so bumping it on an ACL change or deletion makes every older entry unreachable at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from schemas.principal import Principal


def cache_key(principal: Principal, query: str, as_of: datetime, generation: int, k: int) -> str:
    """Tenant, user, sorted scopes, query, instant and generation: two principals never share."""
    material = json.dumps(
        [principal.tenant, principal.user, sorted(principal.groups), query, as_of.isoformat(), generation, k]
    )
    return f"ragsync:{principal.tenant}:{hashlib.sha256(material.encode()).hexdigest()}"


class InProcessCache:
    """LRU with TTL for one process. Generations may come from a shared source (see GenerationSource)."""

    def __init__(
        self,
        max_entries: int = 10_000,
        generations: GenerationSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._generations = generations or MemoryGenerations()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            item = self._entries.get(key)
            if item is None:
                return None
            expires, value = item
            if expires <= self._clock():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def set(self, key: str, value: bytes, ttl_s: float) -> None:
        with self._lock:
            self._entries[key] = (self._clock() + ttl_s, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def generation(self, tenant: str) -> int:
        return self._generations.get(tenant)

    def bump(self, tenant: str) -> int:
        generation = self._generations.bump(tenant)
        with self._lock:
            prefix = f"ragsync:{tenant}:"
            for key in [k for k in self._entries if k.startswith(prefix)]:
                del self._entries[key]
        return generation

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
        self._generations.close()


class GenerationSource:
    def get(self, tenant: str) -> int:
        raise NotImplementedError

    def bump(self, tenant: str) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Release the source's connection, if it has one."""


class MemoryGenerations(GenerationSource):
    def __init__(self) -> None:
        self._values: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str) -> int:
        with self._lock:
            return self._values.get(tenant, 0)

    def bump(self, tenant: str) -> int:
        with self._lock:
            self._values[tenant] = self._values.get(tenant, 0) + 1
            return self._values[tenant]
