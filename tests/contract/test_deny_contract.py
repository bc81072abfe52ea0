"""DenySet contract: SQLite + in-process (embedded) and Redis (cluster), and the pure deny rules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import NOW, make_passage, require_service, unique

from indexer.deny import DenyEntry, DenyKind, apply_deny, clears
from schemas.principal import AccessFilter


def _sqlite(tmp: Path) -> Any:
    from indexer.deny import SqliteDenySet

    return SqliteDenySet(tmp / "deny.db")


def _redis(tmp: Path) -> Any:
    require_service("redis")
    from indexer.redis_deny import RedisDenySet

    return RedisDenySet("redis://127.0.0.1:6379/0", namespace=unique("t"))


FACTORIES: dict[str, Callable[[Path], Any]] = {"sqlite": _sqlite, "redis": _redis}


@pytest.fixture(params=list(FACTORIES))
def deny(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    d = FACTORIES[request.param](tmp_path)
    yield d
    drop = getattr(d, "drop_all", None)
    if drop:
        drop()
    d.close()


def entry(doc: str, kind: DenyKind, version: int, acl: tuple[str, ...] = (), tenant: str = "acme") -> DenyEntry:
    return DenyEntry(tenant=tenant, doc_id=doc, kind=kind, version=version, since=NOW, acl=acl, event_id=f"e{version}")


def test_add_keeps_the_highest_version_and_lookup_is_per_tenant(deny: Any) -> None:
    deny.add(entry("a.md", DenyKind.ACL, 5, ("group:hr",)))
    deny.add(entry("a.md", DenyKind.ACL, 3, ("group:all",)))  # older, arrives late: ignored
    deny.add(entry("a.md", DenyKind.DELETED, 6))
    deny.add(entry("b.md", DenyKind.DELETED, 1, tenant="globex"))
    got = {(e.doc_id, e.kind): e for e in deny.lookup("acme", ["a.md", "b.md", "zz.md"])}
    assert set(got) == {("a.md", DenyKind.ACL), ("a.md", DenyKind.DELETED)}
    assert got[("a.md", DenyKind.ACL)].acl == ("group:hr",) and got[("a.md", DenyKind.ACL)].version == 5
    assert got[("a.md", DenyKind.ACL)].since == NOW
    assert deny.lookup("acme", []) == []
    assert [e.doc_id for e in deny.lookup("globex", ["b.md"])] == ["b.md"]
    assert len(deny.entries()) == 3 and len(deny.entries("globex")) == 1


def test_clear_is_conditional_on_the_version(deny: Any) -> None:
    deny.add(entry("a.md", DenyKind.ACL, 5, ("group:hr",)))
    deny.add(entry("a.md", DenyKind.DELETED, 7))
    deny.clear("acme", "a.md", 5, "e5")  # event 5 confirmed everywhere: the newer deletion entry stays
    assert [(e.kind, e.version) for e in deny.lookup("acme", ["a.md"])] == [(DenyKind.DELETED, 7)]
    deny.clear("acme", "a.md", 7, "e7")
    assert deny.lookup("acme", ["a.md"]) == []


def test_clear_at_its_version_takes_only_its_own_events_entry(deny: Any) -> None:
    """Two events of one document at one version: A's entry, then B's over it (an equal version
    overwrites). A's confirmation must leave B's entry, consumed and not yet applied, in place; an
    upsert of that version (no event ID) clears nothing at it; only what is older goes."""
    a = replace(entry("a.md", DenyKind.ACL, 4, ("group:hr",)), event_id="event-a")
    b = replace(entry("a.md", DenyKind.ACL, 4, ("group:board",)), event_id="event-b")
    deleted = replace(entry("a.md", DenyKind.DELETED, 4), event_id="event-d")
    deny.add_many([a, b, deleted])
    deny.add(replace(entry("b.md", DenyKind.ACL, 3), event_id=""))  # an entry without an event ID

    def held(doc: str = "a.md") -> list[tuple[DenyKind, str]]:
        return sorted((e.kind, e.event_id) for e in deny.lookup("acme", [doc]))

    deny.clear("acme", "a.md", 4, "event-a")  # A confirmed: B's entry is not A's
    assert held() == [(DenyKind.ACL, "event-b"), (DenyKind.DELETED, "event-d")]
    deny.clear("acme", "a.md", 4, "")  # an upsert of version 4 supersedes nothing at 4
    deny.clear("acme", "b.md", 3, "")  # "" names no event, not the entries without one
    assert held() == [(DenyKind.ACL, "event-b"), (DenyKind.DELETED, "event-d")]
    assert held("b.md") == [(DenyKind.ACL, "")]
    deny.clear("acme", "a.md", 4, "event-b")
    assert held() == [(DenyKind.DELETED, "event-d")]
    deny.clear("acme", "a.md", 5, "")  # anything older than 5
    deny.clear("acme", "b.md", 4, "")
    assert held() == [] and held("b.md") == []


def test_the_clear_rule() -> None:
    e = replace(entry("a.md", DenyKind.ACL, 4), event_id="event-a")
    assert clears(e, 5, "") and clears(e, 5, "other") and clears(e, 4, "event-a")
    assert not clears(e, 4, "event-b") and not clears(e, 4, "") and not clears(e, 3, "event-a")
    assert not clears(replace(e, event_id=""), 4, "")


def test_odd_document_ids_round_trip(deny: Any) -> None:
    odd = "drive:dir/ü n:i@c#o d*e?.md"
    deny.add(entry(odd, DenyKind.DELETED, 2))
    (got,) = deny.lookup("acme", [odd])
    assert got.doc_id == odd
    assert [e.doc_id for e in deny.entries("acme")] == [odd]


def test_entries_written_by_one_process_are_seen_by_another(tmp_path: Path, deny: Any) -> None:
    """A query answered by another process (or after a restart) sees what the writer added."""
    if deny.name == "redis":
        from indexer.redis_deny import RedisDenySet

        other: Any = RedisDenySet("redis://127.0.0.1:6379/0", namespace=deny.namespace)
    else:
        other = _sqlite(tmp_path)
    try:
        deny.add(entry("a.md", DenyKind.DELETED, 2))
        assert [e.version for e in other.lookup("acme", ["a.md"])] == [2]
        other.clear("acme", "a.md", 2, "e2")
        if deny.name == "sqlite":
            deny.clear("acme", "a.md", 2, "e2")  # the writer's in-process map is its own; it clears on confirmation
        assert deny.lookup("acme", ["a.md"]) == []
    finally:
        other.close()


STAFF = AccessFilter("acme", ("group:staff", "user:ann"), NOW)


def test_apply_deny_rules() -> None:
    v1 = make_passage("one", version=1, anchor="a-1")
    v2 = make_passage("two", version=2, anchor="a-1", effective_from=NOW - timedelta(days=1))
    other = make_passage("other", doc_id="other.md")
    passages = [v1, v2, other]
    # A deletion at version 1 denies version 1 only: version 2 re-created the document.
    assert apply_deny(passages, [entry("doc.md", DenyKind.DELETED, 1)], STAFF) == [v2, other]
    # A new ACL without the asker denies every version; one that keeps the asker denies nothing.
    assert apply_deny(passages, [entry("doc.md", DenyKind.ACL, 3, ("group:hr",))], STAFF) == [other]
    assert apply_deny(passages, [entry("doc.md", DenyKind.ACL, 3, ("user:ann",))], STAFF) == passages
    # Another tenant's entry for the same doc ID denies nothing here.
    assert apply_deny(passages, [entry("doc.md", DenyKind.DELETED, 9, tenant="globex")], STAFF) == passages
    assert apply_deny(passages, [], STAFF) == passages


def test_add_many_is_add_for_each(deny: Any) -> None:
    """Declared on the port, so a worker's deny path writes a fetched batch at once on any adapter (it
    used to probe for the method and fall back to one write per event): the same keep-the-highest-
    version rule per entry, entries of several kinds and tenants in one call, an empty call a no-op."""
    deny.add(entry("a.md", DenyKind.ACL, 5, ("group:hr",)))
    deny.add_many([])
    deny.add_many(
        [
            entry("a.md", DenyKind.ACL, 3, ("group:all",)),  # older than the one there: ignored
            entry("a.md", DenyKind.DELETED, 6),
            entry("b.md", DenyKind.DELETED, 1),
            entry("c.md", DenyKind.ACL, 2, ("group:x",), tenant="globex"),
        ]
    )
    got = {(e.doc_id, e.kind): e for e in deny.lookup("acme", ["a.md", "b.md"])}
    assert set(got) == {("a.md", DenyKind.ACL), ("a.md", DenyKind.DELETED), ("b.md", DenyKind.DELETED)}
    assert got[("a.md", DenyKind.ACL)].version == 5 and got[("a.md", DenyKind.ACL)].acl == ("group:hr",)
    assert got[("a.md", DenyKind.DELETED)].version == 6
    assert [e.acl for e in deny.lookup("globex", ["c.md"])] == [("group:x",)]


def test_redis_add_many_is_add_for_each_in_one_round_trip() -> None:
    """The cluster worker's deny agent writes the entries of the events fetched together at once:
    the same keep-the-highest-version rule per entry, one pipeline to Redis."""
    require_service("redis")
    from indexer.redis_deny import RedisDenySet

    deny = RedisDenySet("redis://127.0.0.1:6379/0", namespace=unique("t"))
    try:
        deny.add(entry("a.md", DenyKind.ACL, 5, ("group:hr",)))
        sent: list[int] = []
        real = deny._redis.pipeline

        def counting(*args: Any, **kwargs: Any) -> Any:
            pipe = real(*args, **kwargs)
            run = pipe.execute
            pipe.execute = lambda *a, **k: sent.append(len(pipe.command_stack)) or run(*a, **k)
            return pipe

        deny._redis.pipeline = counting  # type: ignore[method-assign]
        deny.add_many(
            [
                entry("a.md", DenyKind.ACL, 3, ("group:all",)),  # older than the one there: ignored
                entry("a.md", DenyKind.DELETED, 6),
                entry("b.md", DenyKind.DELETED, 1),
                entry("c.md", DenyKind.ACL, 2, ("group:x",), tenant="globex"),
            ]
        )
        assert len(sent) == 1, "one round trip"
        got = {(e.doc_id, e.kind): e for e in deny.lookup("acme", ["a.md", "b.md"])}
        assert got[("a.md", DenyKind.ACL)].version == 5 and got[("a.md", DenyKind.ACL)].acl == ("group:hr",)
        assert got[("a.md", DenyKind.DELETED)].version == 6 and ("b.md", DenyKind.DELETED) in got
        assert [e.acl for e in deny.lookup("globex", ["c.md"])] == [("group:x",)]
    finally:
        deny.drop_all()
        deny.close()


def test_a_query_sees_the_entries_cleared_since_its_mark(deny: Any) -> None:
    """A query reads the deny set after its searches: an entry cleared while they ran (its event now
    served) must still deny, for the searches may have read the stores before the event reached them."""
    deny.add(entry("a.md", DenyKind.DELETED, 4))
    deny.add(entry("b.md", DenyKind.ACL, 2, ("group:hr",)))
    deny.add(entry("c.md", DenyKind.DELETED, 1, tenant="globex"))
    before = deny.mark()
    deny.clear("acme", "a.md", 4, "e4")
    deny.clear("globex", "c.md", 1, "e1")
    assert deny.lookup("acme", ["a.md"]) == []  # gone for a query that starts now
    seen = deny.lookup_since("acme", ["a.md", "b.md", "zz.md"], before)
    assert {(e.doc_id, e.kind, e.version) for e in seen} == {("a.md", DenyKind.DELETED, 4), ("b.md", DenyKind.ACL, 2)}
    assert [e.acl for e in seen if e.doc_id == "b.md"] == [("group:hr",)]
    assert deny.lookup_since("acme", ["b.md"], before) == deny.lookup("acme", ["b.md"])  # another document's clear
    after = deny.mark()
    assert after > before
    assert deny.lookup_since("acme", ["a.md"], after) == []  # a query that began after the clear
    assert [e.doc_id for e in deny.lookup_since("globex", ["c.md"], before)] == ["c.md"]  # per tenant
    assert deny.lookup_since("acme", [], before) == []


def test_a_clear_that_removes_nothing_moves_no_mark(deny: Any) -> None:
    deny.add(entry("a.md", DenyKind.DELETED, 9))
    before = deny.mark()
    deny.clear("acme", "a.md", 4, "e4")  # older than the entry: it stays
    assert deny.mark() == before
    assert [e.version for e in deny.lookup_since("acme", ["a.md"], before)] == [9]


def test_a_log_trimmed_past_the_mark_denies_everything(deny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clears leave the log after CLEAR_LOG_KEEP_S; a query whose mark is older than what left cannot
    tell what it missed, so every candidate is denied (fail closed)."""
    import indexer.deny
    import indexer.redis_deny

    deny.add(entry("a.md", DenyKind.DELETED, 1))
    deny.add(entry("b.md", DenyKind.DELETED, 1))
    before = deny.mark()
    deny.clear("acme", "a.md", 1, "e1")
    monkeypatch.setattr(indexer.deny, "CLEAR_LOG_KEEP_S", -1.0)  # the next clear trims everything older
    monkeypatch.setattr(indexer.redis_deny, "CLEAR_LOG_KEEP_S", -1.0)
    deny.clear("acme", "b.md", 1, "e1")
    got = deny.lookup_since("acme", ["a.md", "zz.md"], before)
    assert {e.doc_id for e in got} == {"a.md", "zz.md"}
    assert all(e.kind is DenyKind.DELETED and e.version >= 2**62 for e in got)
    assert apply_deny([make_passage("x", doc_id="zz.md")], got, AccessFilter("acme", ("group:all",), NOW)) == []
