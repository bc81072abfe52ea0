"""Which Tantivy shard of a tenant holds which SQLite rids (indexer.tantivy_lexical): pure bookkeeping.

Why shards: a deleted document's postings (its words and positions) stay in its Tantivy segment,
marked deleted, until the segment is rewritten, and the Python binding cannot merge chosen segments.
Making one deletion physical therefore meant rebuilding the tenant's whole index from SQLite (10.1 s
at 100k passages, minutes at 1M). A tenant's index is now a list of shards, each a Tantivy index of
one range of rids holding at most about SHARD_DOCS passages, and a purge rebuilds only the shards
that lost documents: its cost is bounded by SHARD_DOCS per shard touched, whatever the tenant's size.

Ranges: shard i holds the tenant's rids in [lo_i, lo_{i+1}) (the first from 0, the last open-ended).
SQLite gives every new passage a rid above every rid it holds, so new passages go to the last shard,
and a new last shard starts at the first new rid once the last one holds SHARD_DOCS passages. A
purge that leaves a shard small enough merges it into the shard before it (one rebuild of both), so
churn (passages re-synced move to the last shard) does not leave a trail of near-empty shards.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

SHARD_DOCS = 50_000
"""Passages per shard before a new one starts: the most a purge rebuilds per shard that lost
documents (about 5 s at the bench's rate of ~10k passages/s per core), against one more Tantivy search
per SHARD_DOCS passages of the tenant per query (bench/retrieval_scale.py)."""

TABLE = """CREATE TABLE IF NOT EXISTS tantivy_shards (
    tenant TEXT NOT NULL, lo INTEGER NOT NULL, gen INTEGER NOT NULL, stamp INTEGER NOT NULL,
    analyzer TEXT NOT NULL, hi INTEGER NOT NULL, PRIMARY KEY (tenant, lo)
) WITHOUT ROWID"""
"""One row per shard: its first rid, generation (directory), stamp (last commit), analyzer, and the
highest rid ever written to it (`hi`: rids above the last shard's are new passages)."""

PURGE_PREFIX = "tantivy:"
"""purge_pending rows `tantivy:<lo>:<tenant>`: that shard holds deleted documents."""


@dataclass(frozen=True)
class Shard:
    lo: int
    gen: int
    stamp: int
    analyzer: str
    hi: int


def shard_of(shards: list[Shard], rid: int) -> int:
    """Index of the shard whose range holds the rid (the first shard's range starts at 0)."""
    return max(bisect_right([s.lo for s in shards], rid) - 1, 0)


def bounds(shards: list[Shard], i: int) -> tuple[int, int | None]:
    """[start, end) of shard i's rids: end None for the last shard."""
    start = 0 if i == 0 else shards[i].lo
    return start, shards[i + 1].lo if i + 1 < len(shards) else None


def assign(shards: list[Shard], last_docs: int, rids: Iterable[int], limit: int = SHARD_DOCS) -> dict[int, list[int]]:
    """The dirty rids grouped by the `lo` of the shard to write them to, new shards included: rids up to
    the last shard's `hi` go to the shard whose range holds them; rids above it (new passages, ascending)
    fill the last shard up to `limit` passages (`last_docs` now) and then start a new shard each `limit`."""
    out: dict[int, list[int]] = {}
    ordered = sorted(set(rids))
    if not shards:
        return {ordered[0]: ordered} if ordered else {}
    last = shards[-1]
    current, count = last.lo, last_docs
    for rid in ordered:
        if rid <= last.hi:
            out.setdefault(shards[shard_of(shards, rid)].lo, []).append(rid)
            continue
        if count >= limit:
            current, count = rid, 0
        out.setdefault(current, []).append(rid)
        count += 1
    return out


def purge_key(tenant: str, lo: int) -> str:
    return f"{PURGE_PREFIX}{lo}:{tenant}"


def parse_purge_key(name: str) -> tuple[str, int] | None:
    """(tenant, lo) of a shard's purge row; None for any other row."""
    if not name.startswith(PURGE_PREFIX):
        return None
    lo, sep, tenant = name[len(PURGE_PREFIX) :].partition(":")
    if not sep or not lo.lstrip("-").isdigit():
        return None
    return tenant, int(lo)


def merge_target(shards: list[Shard], i: int, live: list[int], limit: int = SHARD_DOCS) -> int:
    """The shard a purge of shard i rebuilds: the one before it (taking over shard i's range) when both
    together hold at most `limit` live passages, so deletions do not leave a trail of small shards;
    else shard i itself. Either way one rebuild of at most `limit` passages, more only if shard i was
    overfull."""
    if i > 0 and live[i - 1] + live[i] <= limit:
        return i - 1
    return i
