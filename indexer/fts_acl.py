"""The ACL filter inside the FTS5 index: principal tokens indexed with the text, checked exactly after.

Before, FTS5 found every passage matching the words and SQLite then ran the exact permission check
(`passage_acl`, grant instants) on each one before ranking, so a principal who may read 1 % of a
corpus paid for 100 % of its matches. Now every FTS row also carries one token per entry of its
passage's ACL in a column of its own (`principals`, bm25 weight 0 so it never moves a score), and
the query MATCHes the words AND any of the principal's tokens: FTS5 intersects the posting lists,
so only rows some entry of the principal may read are ever scored.

The tokens only narrow; they never decide. A token is a hash of the entry (two entries may collide:
that only widens the candidates), it carries no grant instant, no validity dates; the few top-scored
candidates are then verified by the exact check (`passage_acl.since_ms`, effective and superseded
dates, tenant) and whatever fails it is dropped. The token column is written in the same transaction
as `passage_acl` (upsert, set_acl, rebuild), so it is never wider than the exact table at any instant
a reader can see, and a row missing from it (fail closed) is only ever a row nobody may read.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

PRINCIPALS_COLUMN = "principals"
"""The FTS column of principal tokens (the fourth column; weight 0 in bm25)."""

FIRST_ROUND = 32
"""Candidates fetched in the first round (at least 2 x limit): most searches need one round, since
the index already dropped the rows no entry of the principal is named on."""


def acl_token(entry: str) -> str:
    """One word for an ACL entry, which FTS5's tokenizers (unicode61, porter) keep whole: 'acl' and 20
    digits, so no entry's characters (':', '@', '.', quotes) reach the MATCH syntax or the stemmer."""
    digest = int(hashlib.sha256(entry.encode("utf-8")).hexdigest()[:16], 16)
    return f"acl{digest:020d}"


def acl_tokens(entries: Iterable[str]) -> str:
    """The `principals` column of a passage whose ACL (the rows of passage_acl) holds these entries."""
    return " ".join(acl_token(e) for e in sorted(set(entries)))


def principal_clause(entries: Sequence[str]) -> str:
    """`principals : ("tok1" OR "tok2" ...)`: rows some entry of the principal is named on."""
    tokens = sorted({acl_token(e) for e in entries})
    return f"{PRINCIPALS_COLUMN} : (" + " OR ".join(f'"{t}"' for t in tokens) + ")"


def filtered_match(text_expression: str, entries: Sequence[str]) -> str:
    """The words, in the text columns only (a user's word never matches a token), AND the principal."""
    return "{title heading text} : (" + text_expression + ") AND " + principal_clause(entries)


def words_only(text_expression: str) -> str:
    """The words without the principal: for principals named on nearly every row (see `principal_share`)."""
    return "{title heading text} : (" + text_expression + ")"


SAMPLE = 256
DENSE_SHARE = 0.8
"""Above this share of rows, the index filter costs more (FTS5 walks the tokens' posting list beside
the words') than the rows it removes save; the exact check then filters alone, in more rounds."""


def principal_share(conn: sqlite3.Connection, fts: str, entries: Sequence[str]) -> float:
    """About what share of the rows the principal's tokens are on: the first SAMPLE rows carrying them
    (rowid order) against the span of row ids they cover. Row ids are shared by every tenant, so the
    span can only overstate the rows and the share only err low (towards filtering in the index).
    Only chooses the plan: the exact check decides either way, so a wrong guess costs time only."""
    rows = conn.execute(
        f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?", (principal_clause(entries), SAMPLE)
    ).fetchall()
    if len(rows) < SAMPLE:
        return 0.0  # fewer than SAMPLE rows in all: filter in the index
    return len(rows) / (int(rows[-1][0]) - int(rows[0][0]) + 1)


SHARE_TTL_S = 1.0
SHARE_KEYS = 1024


class ShareSampler:
    """`principal_share` per table and principal, sampled at most once per `ttl_s`.

    Sampling reads up to SAMPLE rows of the principal's posting list, on every search it was most of a
    search's fixed cost for a principal on few rows; the share moves only as documents are written, so
    a second-old figure chooses the same plan. A stale figure costs time only (the exact check decides
    either way). At most `keys` figures are kept, the least recently sampled dropped first."""

    def __init__(
        self, ttl_s: float = SHARE_TTL_S, keys: int = SHARE_KEYS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.keys = keys
        self.clock = clock
        self.samples = 0
        """Times the share was read from the index (not from the cache)."""
        self._shares: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}

    def share(self, conn: sqlite3.Connection, fts: str, entries: Sequence[str]) -> float:
        key = (fts, tuple(sorted(set(entries))))
        now = self.clock()
        known = self._shares.get(key)
        if known is not None and now - known[1] < self.ttl_s:
            return known[0]
        value = principal_share(conn, fts, entries)
        self.samples += 1
        self._shares.pop(key, None)
        while len(self._shares) >= self.keys:
            del self._shares[next(iter(self._shares))]
        self._shares[key] = (value, now)
        return value

    def latest(self, fts: str, entries: Sequence[str]) -> float | None:
        """The last figure sampled for this table and principal (None: never sampled)."""
        known = self._shares.get((fts, tuple(sorted(set(entries)))))
        return None if known is None else known[0]


@dataclass(frozen=True)
class Candidate:
    rid: int
    score: float


@dataclass(frozen=True)
class Verified:
    rid: int
    score: float
    passage_id: str


def top_verified(
    fetch: Callable[[int], list[Candidate]],
    verify: Callable[[list[Candidate]], list[Verified]],
    limit: int,
    floor: float,
) -> list[Verified]:
    """The `limit` best verified rows, ordered by score then passage id, as a full scan would give.

    `fetch(n)` returns the n best index candidates by descending score; `verify` keeps those the
    exact check admits. A round is final when the index had no more candidates (or the rest score
    below the floor), or when the limit-th verified row scores strictly above every candidate not
    fetched (ties at the boundary fetch more, so the passage-id order of equal scores holds).
    Otherwise the next round fetches four times as many: rows the exact check drops (old versions,
    later grants) cost a round, never a wrong answer.
    """
    n = max(FIRST_ROUND, 2 * limit)
    while True:
        fetched = fetch(n)
        above = [c for c in fetched if c.score >= floor]
        exhausted = len(fetched) < n or len(above) < len(fetched)
        hits = sorted(verify(above), key=lambda v: (-v.score, v.passage_id))
        if exhausted or (len(hits) >= limit and hits[limit - 1].score > fetched[-1].score):
            return hits[:limit]
        n *= 4
