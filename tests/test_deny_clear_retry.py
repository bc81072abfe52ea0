"""A deny-set clear that failed is retried, and no clear takes the entry of an event still to apply.

The quiet cluster bench run of 2026-12-03 (bench/README.md) saw one Redis call time out and a revoked
document's entry stay 15 minutes: the failed clear was logged and dropped. And a clear removed every
entry up to its version, so confirming one event could take the entry another event of the same
version had written (consumed, not yet applied): the second one's revocation stopped being effective
until it was applied, and a retry, later, would widen that window.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import NOW, free_port, require_service, unique
from test_effective_before_converged import record
from test_indexing import acl, delete, upsert

from indexer.deny import DenyEntry, DenyKind, DenySet, DenyUnavailable, SqliteDenySet
from indexer.doc_state import DocState
from indexer.ports import DocStateStore
from indexer.sink import IndexSink
from schemas.events import AclPayload, Event
from streams.tracking import Tracker

DOC = "t:salaries.md"


class FailingClears:
    """A deny set whose next `fail` clears raise DenyUnavailable, as a Redis outage would."""

    name = "failing"

    def __init__(self, inner: Any, fail: int = 1) -> None:
        self.inner, self.fail = inner, fail

    def add(self, entry: DenyEntry) -> None:
        self.inner.add(entry)

    def add_many(self, entries: Sequence[DenyEntry]) -> None:
        self.inner.add_many(entries)

    def lookup(self, tenant: str, doc_ids: Any) -> list[DenyEntry]:
        return cast(list[DenyEntry], self.inner.lookup(tenant, doc_ids))

    def clear(self, *args: Any) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise DenyUnavailable("deny set down (test)")
        self.inner.clear(*args)

    def entries(self, tenant: str | None = None) -> list[DenyEntry]:
        return cast(list[DenyEntry], self.inner.entries(tenant))

    def close(self) -> None:
        self.inner.close()


def redis_deny() -> Any:
    require_service("redis")
    from indexer.redis_deny import RedisDenySet

    return RedisDenySet("redis://127.0.0.1:6379/0", namespace=unique("t"))


@pytest.fixture(params=["sqlite", "redis"])
def deny(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    d = SqliteDenySet(tmp_path / "deny.db") if request.param == "sqlite" else redis_deny()
    yield d
    if request.param == "redis":
        d.drop_all()
    d.close()


def ids(deny: Any, *docs: str) -> list[str]:
    return sorted(e.event_id for e in deny.lookup("acme", list(docs or (DOC,))))


def later(tracker: Tracker, seconds: float = 60.0) -> None:
    """Let the retry come due without waiting: the tracker's monotonic clock moves on."""
    tracker.monotonic = lambda: time.monotonic() + seconds


# ---- the same-version race -------------------------------------------------------------------


def same_version_pair() -> tuple[Event, Event]:
    """Two ACL changes of one document at one version (nothing in the envelope forbids it)."""
    a = acl(4, ("group:hr",), doc=DOC)
    b = a.model_copy(update={"event_id": "b" * 32, "payload": AclPayload(acl=("group:board",))})
    return a, b


def test_confirming_one_event_leaves_the_entry_of_another_at_the_same_version(deny: Any) -> None:
    a, b = same_version_pair()
    tracker = Tracker(deny, None)
    tracker.consumed(record(a))
    tracker.consumed(record(b))  # its entry overwrites A's (an equal version)
    tracker.confirmed([a])  # A applied everywhere; B consumed, not yet applied
    assert ids(deny) == [b.event_id], "B's revocation must stay effective until B is applied"
    tracker.confirmed([b])
    assert ids(deny) == []


def test_a_retried_clear_leaves_an_entry_written_since_at_its_version(deny: Any) -> None:
    a, b = same_version_pair()
    flaky = FailingClears(deny)
    tracker = Tracker(cast(DenySet, flaky), None)
    tracker.consumed(record(a))
    tracker.confirmed([a])  # its clear fails: kept for a retry
    tracker.consumed(record(b))
    later(tracker)
    tracker.retry_clears()
    assert ids(deny) == [b.event_id]
    assert tracker.clears_waiting() == 0
    tracker.confirmed([b])
    assert ids(deny) == []


def test_a_clear_waits_for_an_older_event_of_its_document_consumed_on_another_topic(deny: Any) -> None:
    """A deletion at 3 is consumed, then an ACL change at 4 (its own topic) is applied first: its clear
    would take the deletion's entry before the deletion is applied. It waits for the deletion."""
    gone, narrowed = delete(3, doc=DOC), acl(4, ("group:hr",), doc=DOC)
    tracker = Tracker(deny, None)
    tracker.consumed(record(gone))
    tracker.consumed(record(narrowed))
    tracker.confirmed([narrowed])
    assert sorted((e.kind, e.version) for e in deny.lookup("acme", [DOC])) == [
        (DenyKind.ACL, 4),
        (DenyKind.DELETED, 3),
    ]
    tracker.confirmed([gone])  # the wait is over: both entries go
    assert ids(deny) == [] and tracker.clears_waiting() == 0


def test_an_upsert_supersedes_older_entries_only(deny: Any) -> None:
    """Entries no event of this worker is pending for (a worker died before clearing them): an upsert
    at 3 clears the one older than it; an ACL change at 3 is newer than the upsert of 3, and a
    deletion at 3 stops it, so theirs stay."""
    left = [
        DenyEntry("acme", DOC, DenyKind.ACL, 2, NOW, ("group:hr",), "acl-2"),
        DenyEntry("acme", "t:b.md", DenyKind.ACL, 3, NOW, ("group:hr",), "acl-3"),
        DenyEntry("acme", "t:c.md", DenyKind.DELETED, 3, NOW, (), "deleted-3"),
    ]
    deny.add_many(left)
    Tracker(deny, None).confirmed([upsert(3, "# S\n\nText.", doc=d) for d in (DOC, "t:b.md", "t:c.md")])
    assert ids(deny, DOC, "t:b.md", "t:c.md") == ["acl-3", "deleted-3"]


# ---- a failed clear is retried ----------------------------------------------------------------


def test_a_failed_clear_is_retried_by_the_next_confirmation(deny: Any) -> None:
    revoke, other = acl(2, ("group:hr-leads",), doc=DOC), acl(2, ("group:staff",), doc="t:other.md")
    tracker = Tracker(cast(DenySet, FailingClears(deny)), None)
    tracker.consumed(record(revoke))
    tracker.confirmed([revoke])  # the clear fails
    assert ids(deny) == [revoke.event_id] and tracker.clears_waiting() == 1
    later(tracker)
    tracker.consumed(record(other))
    tracker.confirmed([other])  # and the next confirmation retries it
    assert ids(deny, DOC, "t:other.md") == []
    assert tracker.clears_waiting() == 0


class _NoSink:
    def close(self) -> None:
        pass


async def test_the_faust_workers_timer_retries_failed_clears() -> None:
    from streams.appliers import Indexer

    deny = redis_deny()
    tracker = Tracker(cast(DenySet, FailingClears(deny)), None)
    indexer = Indexer(cast(IndexSink, _NoSink()), tracker=tracker)
    try:
        revoke = acl(2, ("group:hr-leads",), doc=DOC)
        tracker.consumed(record(revoke))
        tracker.confirmed([revoke])
        assert ids(deny) == [revoke.event_id]
        later(tracker)
        await indexer.retry_clears()  # what the worker's CLEAR_RETRY_S timer calls
        assert ids(deny) == [] and tracker.clears_waiting() == 0
    finally:
        indexer.close()
        deny.drop_all()
        deny.close()


def test_the_embedded_owners_maintenance_retries_failed_clears(tmp_path: Path) -> None:
    from ragsync.maintenance import Maintenance
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    settings = Settings(home=tmp_path / "home", embed_model_path=tmp_path / "no-model")
    home = build_embedded(settings, with_embedder=False)
    deny = FailingClears(home.deny)
    tracker = Tracker(cast(DenySet, deny), None)
    try:
        revoke = acl(2, ("group:hr-leads",), doc=DOC)
        tracker.consumed(record(revoke))
        tracker.confirmed([revoke])
        assert ids(deny) == [revoke.event_id]
        later(tracker)
        Maintenance(home, tracker=tracker).step()  # what the idle owner runs
        assert ids(deny) == [] and tracker.clears_waiting() == 0
    finally:
        home.close()


def test_past_the_cap_a_clear_is_dropped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    deny = SqliteDenySet(tmp_path / "deny.db")
    tracker = Tracker(cast(DenySet, FailingClears(deny, fail=10)), None, retry_cap=2)
    events = [acl(2, ("group:hr",), doc=f"t:{i}.md") for i in range(3)]
    for event in events:
        tracker.consumed(record(event))
    with caplog.at_level("WARNING", logger="streams.deny_clears"):
        tracker.confirmed(events)
    assert tracker.clears_waiting() == 2 and tracker.retries.dropped == 1
    assert any("further ones are dropped" in r.getMessage() for r in caplog.records)
    deny.close()


# ---- a real Redis whose clear times out ------------------------------------------------------


@dataclass
class PrivateRedis:
    """A Redis of this test's own (never the shared one), with an append-only file fsynced on every
    write, so it can be killed and come back with what it held."""

    binary: str
    port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.directory)]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen([self.binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the private redis did not start")

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()  # a stopped process dies too
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (compose/local/services up redis installs it)")
    server = PrivateRedis(binary, free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.cluster
def test_a_clear_that_timed_out_on_redis_is_retried(private_redis: PrivateRedis) -> None:
    """The bench run's failure, on a real Redis: the clear's call times out (the client's 0.5 s socket
    timeout) and never runs (here the stopped server is killed before it reads it, and comes back
    from its append-only file with the entry). The next confirmation's retry clears it."""
    from indexer.redis_deny import RedisDenySet

    deny = RedisDenySet(private_redis.url, namespace="retry")
    tracker = Tracker(deny, None)
    revoke, other = acl(2, ("group:hr-leads",), doc=DOC), acl(2, ("group:staff",), doc="t:other.md")
    try:
        tracker.consumed(record(revoke))
        assert ids(deny) == [revoke.event_id]
        private_redis.signal(signal.SIGSTOP)
        tracker.confirmed([revoke])  # the clear times out
        assert tracker.deny_failures == 1
        private_redis.kill()
        private_redis.start()
        assert ids(deny) == [revoke.event_id], "the entry outlived its event"
        later(tracker)
        tracker.consumed(record(other))
        tracker.confirmed([other])
        assert ids(deny, DOC, "t:other.md") == [], "retried with the next confirmation"
        assert tracker.clears_waiting() == 0
    finally:
        deny.close()


# ---- the start sweep --------------------------------------------------------------------------


@dataclass
class States:
    by_doc: dict[str, DocState]

    def get(self, tenant: str, doc_id: str) -> DocState | None:
        return self.by_doc.get(doc_id)


def test_the_sweep_clears_entries_the_stores_hold_and_keeps_the_others(deny: Any) -> None:
    def entry(doc: str, kind: DenyKind, version: int, event_id: str, acl: tuple[str, ...] = ()) -> DenyEntry:
        return DenyEntry("acme", doc, kind, version, NOW - timedelta(minutes=1), acl, event_id)

    def state(doc: str, **fields: Any) -> DocState:
        return DocState(tenant="acme", doc_id=doc, **fields)

    deny.add_many(
        [
            entry("t:applied.md", DenyKind.ACL, 3, "applied-3", ("group:hr",)),  # the stores hold it
            entry("t:twin.md", DenyKind.ACL, 3, "twin-3", ("group:board",)),  # another event's ACL at 3
            entry("t:newer.md", DenyKind.ACL, 3, "newer-3", ("group:hr",)),  # an ACL at 5 since
            entry("t:deleted.md", DenyKind.DELETED, 2, "deleted-2"),  # re-created at 3 after it
            entry("t:overtaken.md", DenyKind.DELETED, 5, "overtaken-5"),  # an ACL at 6 applied, not it
        ]
    )
    docs = States(
        {
            "t:applied.md": state("t:applied.md", applied_version=3, acl=("group:hr",), acl_version=3),
            "t:twin.md": state("t:twin.md", applied_version=3, acl=("group:hr",), acl_version=3),
            "t:newer.md": state("t:newer.md", applied_version=5, acl=("group:all",), acl_version=5),
            "t:deleted.md": state("t:deleted.md", applied_version=3, acl_version=3, tombstone_version=2),
            "t:overtaken.md": state("t:overtaken.md", applied_version=6, acl_version=6, content_version=4),
        }
    )
    tracker = Tracker(deny, None)
    assert tracker.sweep(cast(DocStateStore, docs)) == 3
    assert sorted(e.event_id for e in deny.entries()) == ["overtaken-5", "twin-3"]


# ---- the pure rules ---------------------------------------------------------------------------


def test_waiting_clears_merge_into_one_that_removes_both() -> None:
    from streams.deny_clears import Clear, ClearRetries, combine, covers

    old, new = Clear("acme", DOC, 3, frozenset({"x"})), Clear("acme", DOC, 5, frozenset({"y"}))
    twin = Clear("acme", DOC, 5, frozenset({"z"}))
    assert combine(old, new) == combine(new, old) == new, "the newer one removes all the older one would"
    assert combine(new, twin).event_ids == {"y", "z"} and combine(new, twin).calls() == ["y", "z"]
    assert Clear("acme", DOC, 5).calls() == [""]
    assert covers(6, "", new) and covers(5, "y", new) and not covers(5, "z", new) and not covers(5, "", new)
    assert covers(5, "", Clear("acme", DOC, 5)), "an upsert's clear at 5 is covered by another one at 5"
    retries = ClearRetries(cap=10)
    for clear in (old, new, twin, Clear("acme", "t:b.md", 2)):
        retries.keep(clear)
    assert len(retries) == 2
    retries.done("acme", DOC, 5, "y")  # removed y's entry only: z's clear still waits
    assert len(retries) == 2
    retries.done("acme", DOC, 6, "")
    assert len(retries) == 1
    assert retries.failed(100.0) == 0.5 and retries.take(100.2) == [] and len(retries) == 1
    assert retries.take(100.6) == [Clear("acme", "t:b.md", 2)] and len(retries) == 0
