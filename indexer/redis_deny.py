"""Cluster deny set: Redis, shared by every indexer worker and every query worker.

One key per (tenant, kind, document): `<namespace>:deny:<tenant>:<kind>:<doc_id>` holding a small
JSON value. Writes and clears are Lua scripts so "keep the highest version" and "clear what is older
than this version, or this event's own entry" are atomic against concurrent workers. A query reads
every candidate document's two keys with one MGET. Keys never expire: an entry that outlived its
event (a clear that failed: the worker retries it, streams.deny_clears; a worker that died between
applying and clearing: the next worker start sweeps it, `Tracker.sweep`) only narrows what queries
see; an expiring entry could re-open a revoked document while a store is still unconverged.

Failures: `add` and `lookup` raise `DenyUnavailable` on a Redis outage. The writer logs it and goes
on applying (the deny set is what makes a change effective early; the stores are what make it
durable, and they do not depend on Redis); the query side answers from the stores alone, which
hold the change as soon as they converged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import redis

from indexer.deny import CLEAR_LOG_KEEP_S, DenyEntry, DenyKind, DenyUnavailable, deny_everything
from indexer.redis_keys import REDIS_UNAVAILABLE as _UNAVAILABLE
from indexer.redis_keys import unlink_matching
from schemas._time import from_epoch_ms, to_epoch_ms

_ADD = """
local current = redis.call('GET', KEYS[1])
if current then
  local version = cjson.decode(current)['version']
  if tonumber(version) > tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""

_CLEAR = """
local removed = 0
local version = tonumber(ARGV[1])
local seq_key, log_key, floor_key = KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local now = tonumber(ARGV[3])
for i = 1, #KEYS - 3 do
  local key = KEYS[i]
  local current = redis.call('GET', key)
  if current then
    local entry = cjson.decode(current)
    local at = tonumber(entry['version'])
    if at < version or (at == version and ARGV[2] ~= '' and entry['event_id'] == ARGV[2]) then
      local seq = redis.call('INCR', seq_key)
      redis.call('ZADD', log_key, seq, cjson.encode({s = seq, t = now, w = ARGV[4 + i], v = current}))
      redis.call('DEL', key)
      removed = removed + 1
    end
  end
end
if removed > 0 then
  local oldest = redis.call('ZRANGE', log_key, 0, 0)
  while oldest[1] do
    local gone = cjson.decode(oldest[1])
    if tonumber(gone['t']) >= now - tonumber(ARGV[4]) then break end
    redis.call('ZREM', log_key, oldest[1])
    redis.call('SET', floor_key, gone['s'])
    oldest = redis.call('ZRANGE', log_key, 0, 0)
  end
end
return removed
"""
"""indexer.deny.clears, atomically for the document's keys: older than ARGV[1], or at it and of event ARGV[2].
Each entry removed goes into the tenant's log of clears under the next mark (JSON: mark, cleared ms, kind:doc, value),
and clears older than ARGV[4] ms leave the log, the floor keeping the highest mark gone."""


class RedisDenySet:
    name = "redis"

    def __init__(self, url: str, *, namespace: str = "ragsync", socket_timeout_s: float = 0.5) -> None:
        self.namespace = namespace
        self._redis: redis.Redis = redis.Redis.from_url(
            url, socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s, health_check_interval=30
        )
        self._add = self._redis.register_script(_ADD)
        self._clear = self._redis.register_script(_CLEAR)

    def _key(self, tenant: str, kind: DenyKind, doc_id: str) -> str:
        return f"{self.namespace}:deny:{tenant}:{kind.value}:{doc_id}"

    def add(self, entry: DenyEntry) -> None:
        try:
            self._add(keys=[self._key(entry.tenant, entry.kind, entry.doc_id)], args=[_value(entry), entry.version])
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc

    def add_many(self, entries: Sequence[DenyEntry]) -> None:
        """`add` for each entry, in one round trip (a pipeline of the same script): the deny path of a
        loaded worker paid a thread hop and a round trip per event, in series, and queued behind them."""
        if not entries:
            return
        pipe = self._redis.pipeline(transaction=False)
        for entry in entries:
            self._add(
                keys=[self._key(entry.tenant, entry.kind, entry.doc_id)],
                args=[_value(entry), entry.version],
                client=pipe,
            )
        try:
            pipe.execute()
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc

    def lookup(self, tenant: str, doc_ids: Iterable[str]) -> list[DenyEntry]:
        wanted = sorted(set(doc_ids))
        if not wanted:
            return []
        try:
            values = self._redis.mget(self._keys(tenant, wanted))
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc
        return _entries(tenant, wanted, values)

    def _keys(self, tenant: str, wanted: list[str]) -> list[str]:
        """The documents' keys, each document's kinds in DenyKind order (as `_entries` reads them)."""
        return [self._key(tenant, kind, doc_id) for doc_id in wanted for kind in DenyKind]

    def _log_keys(self, tenant: str) -> list[str]:
        """The mark (one counter for the namespace), the tenant's log of clears and its floor."""
        return [self._seq_key, f"{self.namespace}:deny-log:{tenant}", f"{self.namespace}:deny-floor:{tenant}"]

    @property
    def _seq_key(self) -> str:
        return f"{self.namespace}:deny-seq"

    def mark(self) -> int:
        try:
            raw = self._redis.get(self._seq_key)
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc
        return int(raw) if isinstance(raw, bytes) else 0

    def lookup_since(self, tenant: str, doc_ids: Iterable[str], mark: int) -> list[DenyEntry]:
        """The entries and the tenant's clears after `mark` in one round trip (MGET, ZRANGEBYSCORE, GET)."""
        wanted = sorted(set(doc_ids))
        if not wanted:
            return []
        _, log_key, floor_key = self._log_keys(tenant)
        pipe = self._redis.pipeline(transaction=True)
        pipe.mget(self._keys(tenant, wanted))
        pipe.zrangebyscore(log_key, f"({mark}", "+inf")
        pipe.get(floor_key)
        try:
            values, logged, floor = pipe.execute()
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc
        if isinstance(floor, bytes) and int(floor) > mark:
            return deny_everything(tenant, wanted)
        found = _entries(tenant, wanted, values)
        docs = set(wanted)
        for member in logged:
            gone = json.loads(member)
            kind, doc_id = str(gone["w"]).split(":", 1)  # kinds are fixed words
            if doc_id in docs:
                found.append(_entry(tenant, doc_id, DenyKind(kind), str(gone["v"]).encode()))
        return found

    def clear(self, tenant: str, doc_id: str, version: int, event_id: str) -> None:
        now_ms = to_epoch_ms(datetime.now(UTC))
        try:
            self._clear(
                keys=[*(self._key(tenant, kind, doc_id) for kind in DenyKind), *self._log_keys(tenant)],
                args=[
                    version,
                    event_id,
                    now_ms,
                    int(CLEAR_LOG_KEEP_S * 1000),
                    *(f"{kind.value}:{doc_id}" for kind in DenyKind),
                ],
            )
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc

    def entries(self, tenant: str | None = None) -> list[DenyEntry]:
        pattern = f"{self.namespace}:deny:{tenant}:*" if tenant else f"{self.namespace}:deny:*"
        prefix = f"{self.namespace}:deny:"
        out: list[DenyEntry] = []
        try:
            for key in self._redis.scan_iter(match=pattern, count=500):
                raw = self._redis.get(key)
                if not isinstance(raw, bytes):
                    continue
                rest = key.decode()[len(prefix) :]
                # tenant names cannot contain ':' (schemas.events), kinds are fixed words
                entry_tenant, kind, doc_id = rest.split(":", 2)
                out.append(_entry(entry_tenant, doc_id, DenyKind(kind), raw))
        except _UNAVAILABLE as exc:
            raise DenyUnavailable(f"redis deny set unavailable: {exc}") from exc
        return sorted(out, key=lambda e: (e.tenant, e.doc_id, e.kind.value))

    def drop_all(self) -> None:
        """Delete this namespace's deny keys (tests)."""
        unlink_matching(self._redis, f"{self.namespace}:deny:*")
        unlink_matching(self._redis, f"{self.namespace}:deny-*")

    def close(self) -> None:
        self._redis.close()


def _value(entry: DenyEntry) -> str:
    return json.dumps(
        {
            "version": entry.version,
            "since_ms": to_epoch_ms(entry.since),
            "acl": list(entry.acl),
            "event_id": entry.event_id,
        }
    )


def _entries(tenant: str, wanted: list[str], values: Sequence[object]) -> list[DenyEntry]:
    """The entries an MGET of `_keys(tenant, wanted)` returned (a missing key is None)."""
    keys = [(doc_id, kind) for doc_id in wanted for kind in DenyKind]
    return [
        _entry(tenant, doc_id, kind, raw)
        for (doc_id, kind), raw in zip(keys, values, strict=True)
        if isinstance(raw, bytes)
    ]


def _entry(tenant: str, doc_id: str, kind: DenyKind, raw: bytes) -> DenyEntry:
    data = json.loads(raw)
    return DenyEntry(
        tenant=tenant,
        doc_id=doc_id,
        kind=kind,
        version=int(data["version"]),
        since=from_epoch_ms(int(data["since_ms"])),
        acl=tuple(data.get("acl") or ()),
        event_id=str(data.get("event_id", "")),
    )
