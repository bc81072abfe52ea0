"""Tantivy shards (indexer.tantivy_shards, indexer.tantivy_lexical): a purge rebuilds only the shards that
lost documents, searches over several shards equal filtering and sorting everything, deleted and
revoked passages are never returned and leave no word behind after a purge, and a home of the former
one-index-per-tenant layout is rebuilt into shards on open."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import NOW, make_passage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.tantivy_lexical import TantivyLexicalIndex
from indexer.tantivy_shards import Shard, assign, merge_target, parse_purge_key, purge_key, shard_of
from indexer.tantivy_side import tenant_key
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff",), NOW)
WORDS = ["alpha", "bravo", "charlie", "delta", "echo"]
ENTRIES = ["group:staff", "group:hr", "user:ann"]


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.passage_id for h in hits]


def shard_dirs(path: Path) -> dict[str, float]:
    return {d.name: d.stat().st_mtime_ns for d in (path.parent / f"{path.name}.tantivy").iterdir()}


def doc_freq(index: TantivyLexicalIndex, word: str) -> int:
    """Documents holding the word in any shard's postings, deleted ones not merged away included."""
    shards = index._shards("acme")
    total = 0
    for s in shards:
        side = index._side("acme", s, create=False)
        assert side is not None
        total += int(side.searcher().doc_freq("passage", word))
    return total


def test_assign_fills_the_last_shard_then_starts_new_ones() -> None:
    shards = [Shard(1, 1, 3, "standard", 10), Shard(11, 1, 2, "standard", 14)]
    assert shard_of(shards, 0) == 0 and shard_of(shards, 10) == 0 and shard_of(shards, 11) == 1
    # rid 5 (an ACL change in the first shard), 12 (the last), 15.. new: the last holds 4 of 5
    assert assign(shards, 4, [5, 12, 15, 16, 17, 18, 19, 20, 21], 5) == {
        1: [5],
        11: [12, 15],
        16: [16, 17, 18, 19, 20],
        21: [21],
    }
    assert assign([], 0, [7, 3]) == {3: [3, 7]}
    assert merge_target(shards, 1, [2, 3], 5) == 0 and merge_target(shards, 1, [3, 3], 5) == 1
    assert merge_target(shards, 0, [0, 0], 5) == 0
    assert parse_purge_key(purge_key("a:b", 42)) == ("a:b", 42)
    assert parse_purge_key("fts4_x") is None and parse_purge_key("tantivy:acme") is None


def test_a_purge_rebuilds_only_the_shard_that_lost_a_passage(tmp_path: Path) -> None:
    """20 passages in shards of 4: deleting one rewrites its shard alone (the other directories are
    untouched), its unique word is gone from every file, and every other passage is still found."""
    path = tmp_path / "lexical.db"
    index = TantivyLexicalIndex(path, shard_docs=4)
    try:
        index.upsert([make_passage(f"common unique{i}", doc_id=f"d{i}.md") for i in range(10)])
        index.upsert([make_passage(f"common unique{i}", doc_id=f"d{i}.md") for i in range(10, 20)])
        assert len(index._shards("acme")) == 5
        before = shard_dirs(path)
        index.delete_doc("acme", "d9.md")
        assert index.purge_pending() == 1
        assert doc_freq(index, "unique9") == 1  # still in its segment, marked deleted
        assert index.purge()["rebuilt"] == 1
        after = shard_dirs(path)
        assert len(set(before) - set(after)) == 1 and len(set(after) - set(before)) == 1
        assert all(after[name] == before[name] for name in set(before) & set(after))
        assert doc_freq(index, "unique9") == 0
        assert index.purge_pending() == 0
        assert len(index.search("common", STAFF, 50, 0.0)) == 19
        assert ids(index.search("unique13", STAFF, 5, 0.0)) == ["d13.md@1#root-1"]
    finally:
        index.close()


def test_small_shards_merge_on_purge_and_a_reader_follows(tmp_path: Path) -> None:
    """Emptying shards merges them into the one before; a reader opened beside the owner follows the
    shards SQLite names, whatever its own shard size."""
    path = tmp_path / "lexical.db"
    owner = TantivyLexicalIndex(path, shard_docs=3, deferred=True)
    reader = TantivyLexicalIndex(path)
    try:
        owner.upsert([make_passage(f"kestrel w{i}", doc_id=f"k{i}.md") for i in range(9)])
        owner.flush()
        assert len(owner._shards("acme")) == 3
        for i in (3, 4, 6, 7):
            owner.delete_doc("acme", f"k{i}.md")
        owner.flush()
        assert len(reader.search("kestrel", STAFF, 50, 0.0)) == 5  # deleted: gone before any purge
        owner.purge()
        assert len(owner._shards("acme")) == 2  # 1 + 1 left in the last two: merged
        assert sorted(ids(reader.search("kestrel", STAFF, 50, 0.0))) == sorted(
            f"k{i}.md@1#root-1" for i in (0, 1, 2, 5, 8)
        )
        assert all(doc_freq(owner, f"w{i}") == 0 for i in (3, 4, 6, 7))
    finally:
        reader.close()
        owner.close()


def test_a_home_of_the_former_layout_is_rebuilt_into_shards(tmp_path: Path) -> None:
    """One index per tenant (table `tantivy_indexes`, a directory without a shard): on open the table
    and its purge rows go, shards are built from SQLite and the former directory is removed."""
    path = tmp_path / "lexical.db"
    index = TantivyLexicalIndex(path)
    index.upsert([make_passage("plover dunes", doc_id="p.md")])
    index._conn.execute("CREATE TABLE tantivy_indexes (tenant TEXT PRIMARY KEY, gen INTEGER, stamp INTEGER)")
    index._conn.execute("INSERT INTO purge_pending(fts) VALUES ('tantivy:acme')")
    index._conn.execute("DELETE FROM tantivy_shards")
    index._conn.commit()
    index.close()
    former = tmp_path / "lexical.db.tantivy" / f"{tenant_key('acme')}-standard-p1-g3"
    former.mkdir()
    reopened = TantivyLexicalIndex(path)
    try:
        assert ids(reopened.search("plover", STAFF, 10, 0.0)) == ["p.md@1#root-1"]
        assert reopened.purge_pending() == 0
        assert not former.exists()
        names = {r[0] for r in reopened._conn.execute("SELECT name FROM sqlite_master")}
        assert "tantivy_indexes" not in names
    finally:
        reopened.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), st.sampled_from(ENTRIES)),
        st.tuples(st.just("delete"), st.integers(0, 40), st.just("")),
        st.tuples(st.just("revoke"), st.integers(0, 40), st.just("")),
        st.tuples(st.just("purge"), st.just(0), st.just("")),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2), shard_docs=st.integers(1, 4))
def test_sharded_search_equals_filtering_everything_through_writes_and_purges(
    tmp_path_factory: Any, ops: list[tuple[str, Any, str]], query: list[str], shard_docs: int
) -> None:
    """Passages added, deleted, revoked and purged in any order over small shards: a search returns the
    admitted passages holding a query word, best first, never a deleted or revoked one, and after a
    purge no shard holds a deleted passage's own word."""
    index = TantivyLexicalIndex(tmp_path_factory.mktemp("sh") / "lexical.db", shard_docs=shard_docs)
    try:
        live: dict[int, tuple[set[str], str]] = {}
        gone: set[int] = set()
        for k, (op, arg, entry) in enumerate(ops):
            if op == "add":
                index.upsert([make_passage(" ".join([*arg, f"own{k}"]), doc_id=f"d{k}.md", acl=(entry,))])
                live[k] = (set(arg), entry)
            elif op == "delete" and arg in live:
                index.delete_doc("acme", f"d{arg}.md")
                del live[arg]
                gone.add(arg)
            elif op == "revoke" and arg in live:
                index.set_acl("acme", f"d{arg}.md", ["user:nobody"], {})
                live[arg] = (live[arg][0], "user:nobody")
            elif op == "purge":
                index.purge()
                assert all(doc_freq(index, f"own{g}") == 0 for g in gone)
        for principal in ENTRIES:
            access = AccessFilter("acme", (principal,), NOW)
            expected = {f"d{k}.md@1#root-1" for k, (words, e) in live.items() if e == principal and words & set(query)}
            hits = index.search(" ".join(query), access, 100, 0.0)
            assert set(ids(hits)) == expected
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            top = index.search(" ".join(query), access, 2, 0.0)
            assert len(top) == min(2, len(expected)) and set(ids(top)) <= expected
        index.purge()
        assert all(doc_freq(index, f"own{g}") == 0 for g in gone)
    finally:
        index.close()
