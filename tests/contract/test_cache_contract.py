"""Cache contract: in-process (two generation sources) and Redis."""

from __future__ import annotations

from typing import Any

from conftest import NOW
from waiting import wait_until

from indexer.cache import cache_key
from schemas.principal import Principal


def test_get_set_and_ttl(cache: Any) -> None:
    assert cache.get("ragsync:acme:k1") is None
    cache.set("ragsync:acme:k1", b"value", 30)
    assert cache.get("ragsync:acme:k1") == b"value"
    cache.set("ragsync:acme:k2", b"gone", 0.001)
    wait_until(lambda: cache.get("ragsync:acme:k2") is None, 10, "a 1 ms entry to expire", every_s=0.01)
    assert cache.get("ragsync:acme:k1") == b"value", "only the expired entry went"


def test_bump_invalidates_only_that_tenant(cache: Any) -> None:
    alice = Principal(tenant="acme", user="alice", groups=("staff",))
    other = Principal(tenant="globex", user="alice", groups=("staff",))
    key_a = cache_key(alice, "q", NOW, cache.generation("acme"), 8)
    key_o = cache_key(other, "q", NOW, cache.generation("globex"), 8)
    cache.set(key_a, b"a", 60)
    cache.set(key_o, b"o", 60)
    before = cache.generation("acme")
    assert cache.bump("acme") == before + 1
    assert cache.generation("acme") == before + 1
    assert cache.get(cache_key(alice, "q", NOW, cache.generation("acme"), 8)) is None
    assert cache.get(key_o) == b"o"


def test_keys_include_tenant_user_and_scopes() -> None:
    base = Principal(tenant="acme", user="u1", groups=("a", "b"))
    same = Principal(tenant="acme", user="u1", groups=("b", "a"))
    assert cache_key(base, "q", NOW, 0, 8) == cache_key(same, "q", NOW, 0, 8)
    variants = [
        Principal(tenant="globex", user="u1", groups=("a", "b")),
        Principal(tenant="acme", user="u2", groups=("a", "b")),
        Principal(tenant="acme", user="u1", groups=("a",)),
    ]
    for v in variants:
        assert cache_key(v, "q", NOW, 0, 8) != cache_key(base, "q", NOW, 0, 8)
    assert cache_key(base, "q", NOW, 1, 8) != cache_key(base, "q", NOW, 0, 8)
