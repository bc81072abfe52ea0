"""The ACL filter inside FTS5 (indexer.fts_acl): the candidate loop against a full sort, the token column
kept no wider than passage_acl, and older homes rebuilt with their tokens from passage_acl."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

from conftest import NOW, make_passage
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.fts_acl import Candidate, Verified, acl_token, top_verified
from indexer.sqlite_fts import SqliteLexicalIndex
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff",), NOW)


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]), max_size=120),
    admitted=st.lists(st.booleans(), min_size=120, max_size=120),
    limit=st.integers(1, 30),
    floor=st.sampled_from([0.0, 0.7, 1.5]),
)
def test_top_verified_equals_filtering_then_sorting_everything(
    scores: list[float], admitted: list[bool], limit: int, floor: float
) -> None:
    """Many ties, most rows dropped by the exact check: still the reference's rows in its order."""
    # the index's order: score descending, ties in an order unrelated to passage ids
    everything = sorted(enumerate(scores), key=lambda c: (-c[1], (c[0] * 7919) % 1000))
    pid = {rid: f"p{(rid * 31) % 997:04d}-{rid}" for rid, _ in everything}

    def fetch(n: int) -> list[Candidate]:
        return [Candidate(rid, s) for rid, s in everything[:n]]

    def verify(cands: list[Candidate]) -> list[Verified]:
        return [Verified(c.rid, c.score, pid[c.rid]) for c in cands if admitted[c.rid]]

    expected = sorted(
        ((s, pid[rid]) for rid, s in everything if admitted[rid] and s >= floor), key=lambda x: (-x[0], x[1])
    )[:limit]
    got = [(v.score, v.passage_id) for v in top_verified(fetch, verify, limit, floor)]
    assert got == expected


def _tokens(path: Path, entry: str) -> int:
    conn = sqlite3.connect(path)
    try:
        (fts,) = conn.execute("SELECT name FROM fts_tables WHERE tenant = 'acme'").fetchone()
        return int(
            conn.execute(
                f"SELECT COUNT(*) FROM {fts} WHERE {fts} MATCH ?", (f'principals : "{acl_token(entry)}"',)
            ).fetchone()[0]
        )
    finally:
        conn.close()


def test_a_revocation_removes_the_token_in_the_same_commit(tmp_path: Path) -> None:
    path = tmp_path / "lexical.db"
    index = SqliteLexicalIndex(path)
    try:
        index.upsert(
            [make_passage("Quarterly numbers.", acl=("group:staff", "user:eve"), anchor=f"a-{i}") for i in range(3)]
        )
        assert _tokens(path, "user:eve") == 3
        index.set_acl("acme", "doc.md", ("group:staff",), {})
        assert _tokens(path, "user:eve") == 0  # another connection: committed together with passage_acl
        assert _tokens(path, "group:staff") == 3
        eve = AccessFilter("acme", ("user:eve",), NOW)
        assert index.search("quarterly numbers", eve, 10, 0.0) == []
        index.set_acl("acme", "doc.md", ("group:staff", "user:eve"), {"user:eve": NOW - timedelta(days=1)})
        assert len(index.search("quarterly numbers", eve, 10, 0.0)) == 3
        # the token admits, the exact check (granted yesterday) still refuses an earlier instant
        assert (
            index.search("quarterly numbers", AccessFilter("acme", ("user:eve",), NOW - timedelta(days=2)), 10, 0.0)
            == []
        )
    finally:
        index.close()


def test_a_user_word_never_matches_a_principal_token(tmp_path: Path) -> None:
    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    try:
        index.upsert([make_passage("Nothing to see.", acl=("group:staff",))])
        assert index.search(acl_token("group:staff"), STAFF, 10, 0.0) == []
    finally:
        index.close()


def test_old_versions_dropped_by_the_exact_check_cost_rounds_not_answers(tmp_path: Path) -> None:
    """200 superseded versions outscore the current one: the candidate loop fetches until it finds it."""
    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    try:
        old = [
            make_passage("falcon falcon falcon", doc_id=f"d{i}.md", superseded_on=NOW - timedelta(days=1))
            for i in range(200)
        ]
        current = make_passage("falcon and many other words in a longer passage", doc_id="live.md")
        index.upsert([*old, current])
        assert [h.passage.doc_id for h in index.search("falcon", STAFF, 5, 0.0)] == ["live.md"]
    finally:
        index.close()


def test_a_home_of_the_three_column_layout_is_rebuilt_with_tokens_from_passage_acl(tmp_path: Path) -> None:
    path = tmp_path / "lexical.db"
    index = SqliteLexicalIndex(path)
    index.upsert(
        [
            make_passage("Merger plan.", acl=("group:staff",), anchor="a-1"),
            make_passage("Merger plan for the board.", acl=("group:board",), anchor="b-1"),
        ]
    )
    index.close()
    conn = sqlite3.connect(path)
    (new,) = conn.execute("SELECT name FROM fts_tables WHERE tenant = 'acme'").fetchone()
    old = "fts3c_" + new[6:]
    conn.execute(f"DROP TABLE {new}")
    conn.execute(f"CREATE VIRTUAL TABLE {old} USING fts5(title, heading, text, tokenize='porter unicode61')")
    conn.execute(f"INSERT INTO {old}(rowid, title, heading, text) SELECT rid, title, '', text FROM passages")
    conn.execute("UPDATE fts_tables SET name = ? WHERE tenant = 'acme'", (old,))
    # the JSON copy claims staff may read the board's passage; passage_acl (the exact table) does not
    conn.execute('UPDATE passages SET acl = \'["group:staff", "group:board"]\'')
    conn.commit()
    conn.close()
    reopened = SqliteLexicalIndex(path)
    try:
        assert [h.passage.anchor for h in reopened.search("merger plan", STAFF, 10, 0.0)] == ["a-1"]
        board = AccessFilter("acme", ("group:board",), NOW)
        assert [h.passage.anchor for h in reopened.search("merger plan", board, 10, 0.0)] == ["b-1"]
        assert _tokens(path, "group:board") == 1
    finally:
        reopened.close()


def test_a_principal_on_nearly_every_row_is_filtered_by_the_exact_check_alone(tmp_path: Path) -> None:
    """Above DENSE_SHARE the words are matched without the tokens: the exact check must still refuse
    rows granted later than as_of, superseded rows, and rows that name other entries only."""
    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    try:
        later = {"group:staff": NOW + timedelta(days=1)}
        passages = [make_passage(f"orbit report {i}", doc_id=f"d{i}.md") for i in range(300)]
        passages[3] = make_passage("orbit orbit orbit", doc_id="hr.md", acl=("group:hr",))
        passages[4] = make_passage("orbit orbit orbit", doc_id="old.md", superseded_on=NOW - timedelta(days=1))
        passages[5] = make_passage("orbit orbit orbit", doc_id="new.md")
        index.upsert(passages)
        index.set_acl("acme", "new.md", ("group:staff",), later)
        fts = index._fts("acme", create=False)
        assert fts is not None
        from indexer.fts_acl import DENSE_SHARE, principal_share

        assert principal_share(index._conn, fts, STAFF.entries) >= DENSE_SHARE
        found = {h.passage.doc_id for h in index.search("orbit", STAFF, 400, 0.0)}
        assert len(found) == 297 and not found & {"hr.md", "old.md", "new.md"}
    finally:
        index.close()


def test_the_principals_share_is_sampled_once_per_interval_and_still_followed(tmp_path: Path) -> None:
    """Sampling the share read up to 256 rows of the principal's tokens on every search; now once per
    interval per table and principal. The figure must still move with the data: a principal on few rows
    at first (filtered in the index), on nearly every row once more documents name it and the interval
    has passed (the words matched alone), the answers exact throughout."""
    from indexer.fts_acl import DENSE_SHARE, SAMPLE, ShareSampler

    now = [0.0]
    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    index.shares = ShareSampler(ttl_s=1.0, clock=lambda: now[0])
    sampled: list[str] = []
    index._conn.set_trace_callback(
        lambda sql: sampled.append(sql) if "SELECT rowid FROM" in sql and "ORDER BY" not in sql else None
    )
    try:
        hr = [make_passage(f"orbit hr {i}", doc_id=f"hr{i}.md", acl=("group:hr",)) for i in range(SAMPLE)]
        index.upsert([*hr, make_passage("orbit staff", doc_id="s0.md")])
        fts = index._fts("acme", create=False)
        assert fts is not None
        for _ in range(20):
            assert [h.passage.doc_id for h in index.search("orbit", STAFF, 10, 0.0)] == ["s0.md"]
        assert index.shares.samples == 1 and len(sampled) == 1, sampled
        assert index.shares.latest(fts, STAFF.entries) == 0.0

        index.upsert([make_passage(f"orbit staff {i}", doc_id=f"s{i}.md") for i in range(1, 4 * SAMPLE)])
        index.search("orbit", STAFF, 10, 0.0)
        assert index.shares.samples == 1, "within the interval: the cached figure"
        now[0] += 1.5
        found = index.search("orbit", STAFF, 4 * SAMPLE + 10, 0.0)
        assert index.shares.samples == 2 and len(sampled) == 2
        share = index.shares.latest(fts, STAFF.entries)
        assert share is not None and share >= DENSE_SHARE
        assert {h.passage.doc_id for h in found} == {f"s{i}.md" for i in range(4 * SAMPLE)}
    finally:
        index.close()
