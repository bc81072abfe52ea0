"""A revocation's or deletion's two store writes run side by side when both stores are durable on write
and combine concurrent writes (the cluster's Elasticsearch and Qdrant server), and fail closed: the
event is served (its deny entry may go) only once both returned, a failure in either fails the event
with no write of it still in flight, and no state is recorded. Real SQLite and qdrant-edge stores,
wrapped to declare the cluster stores' durability and combining, with hooks on their writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_indexing import acl, delete, upsert
from test_write_path import FakeEmbedder

from indexer.cache import InProcessCache
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from schemas.events import Event

DOC = "t:p.md"
WAIT_S = 5.0


class Hooked:
    """A store declaring the cluster stores' durability and combining; `hook(what)` runs before its
    revocation and deletion writes (set_acl, delete_doc)."""

    durability = "write"
    combines_writes = True

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.hook: Callable[[str], None] = lambda what: None

    def set_acl(self, *args: Any, **kwargs: Any) -> None:
        self.hook("set_acl")
        self.inner.set_acl(*args, **kwargs)

    def delete_doc(self, *args: Any, **kwargs: Any) -> None:
        self.hook("delete_doc")
        self.inner.delete_doc(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def build(tmp_path: Path) -> tuple[IndexSink, Hooked, Hooked]:
    lexical = Hooked(SqliteLexicalIndex(tmp_path / "lexical.db"))
    vector = Hooked(EdgeVectorIndex(tmp_path / "vectors", FakeEmbedder.dim))
    docs = SqliteDocStates(tmp_path / "state.db")
    audit = SqliteDeletionAudit(tmp_path / "state.db")
    sink = IndexSink(lexical, vector, FakeEmbedder(), docs, audit, InProcessCache())  # type: ignore[arg-type]
    sink.apply(upsert(1, "# Pay\n\nThe salary bands of the staff."))
    sink.flush()
    return sink, lexical, vector


EVENTS = pytest.mark.parametrize("event", [acl(2, ("group:hr",)), delete(2)], ids=["revocation", "deletion"])


@EVENTS
def test_the_two_store_writes_run_side_by_side(tmp_path: Path, event: Event) -> None:
    sink, lexical, vector = build(tmp_path)
    vector_started = threading.Event()
    overlapped: list[bool] = []
    vector.hook = lambda what: vector_started.set()
    lexical.hook = lambda what: overlapped.append(vector_started.wait(WAIT_S))
    served: list[Event] = []
    sink.apply(event, served=served.append)
    assert overlapped == [True], "the vector store's write did not start while the lexical store's ran"
    assert served == [event]
    assert vector.inner.count("acme", DOC) == (1 if event.kind.value == "acl" else 0)
    assert lexical.inner.count("acme", DOC) == (1 if event.kind.value == "acl" else 0)


@EVENTS
@pytest.mark.parametrize("failing", ["lexical", "vector"])
def test_a_failed_store_write_fails_the_event_with_nothing_in_flight_and_nothing_served(
    tmp_path: Path, event: Event, failing: str
) -> None:
    sink, lexical, vector = build(tmp_path)
    bad, good = (lexical, vector) if failing == "lexical" else (vector, lexical)
    raised = threading.Event()
    good_writes = {"started": 0, "finished": 0}

    def fail(what: str) -> None:
        raised.set()
        raise ConnectionError(f"{failing} store down (test)")

    def slow(what: str) -> None:
        good_writes["started"] += 1
        raised.wait(WAIT_S)  # still writing when the other store failed

    bad.hook, good.hook = fail, slow
    name = "set_acl" if event.kind.value == "acl" else "delete_doc"
    original = getattr(good.inner, name)

    def finish(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        good_writes["finished"] += 1

    setattr(good.inner, name, finish)
    served: list[Event] = []
    with pytest.raises(ConnectionError):
        sink.apply(event, served=served.append)
    in_flight = good_writes["started"] - good_writes["finished"]
    assert not served, "served while a store had not taken the write"
    assert in_flight == 0, "apply raised while the other store's write was still in flight"
    state = sink.docs.get("acme", DOC)
    assert state is not None and state.applied_version == 1 and not state.deleted, "state recorded past a failure"

    bad.hook = good.hook = lambda what: None  # the store is back: the retry serves it
    sink.apply(event, served=served.append)
    assert served == [event]
    state = sink.docs.get("acme", DOC)
    assert state is not None and state.applied_version == 2


def test_both_waits_for_the_second_when_the_first_fails_and_the_first_error_wins() -> None:
    from indexer.side_by_side import SideBySide

    side = SideBySide(2)
    second_done = threading.Event()

    def first() -> None:
        raise ValueError("first")

    def second() -> None:
        threading.Event().wait(0.05)
        second_done.set()
        raise KeyError("second")

    with pytest.raises(ValueError, match="first"):
        side.both(first, second)
    assert second_done.is_set()
    with pytest.raises(KeyError):
        side.both(lambda: None, second)
    side.close()


def test_stores_durable_only_on_flush_are_written_one_after_the_other(tmp_path: Path) -> None:
    sink, lexical, vector = build(tmp_path)
    lexical.durability = "flush"
    order: list[str] = []
    lexical.hook = lambda what: order.append("lexical")
    vector.hook = lambda what: order.append("vector")
    sink.apply(acl(2, ("group:hr",)))
    assert order == ["lexical", "vector"]


def _new_threads(before: set[threading.Thread], *prefixes: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.name.startswith(prefixes)]


def test_closing_the_sink_ends_its_side_write_threads(tmp_path: Path) -> None:
    sink, _, _ = build(tmp_path)
    before = set(threading.enumerate())
    sink.apply(acl(2, ("group:hr",)))
    side = _new_threads(before, "ragsync-side-write")
    assert side, "the vector store's write ran on a thread of the sink's pool"
    sink.close()
    assert [t.name for t in side if t.is_alive()] == []


def test_the_faust_indexer_closes_its_sink_and_its_own_pools(tmp_path: Path) -> None:
    import asyncio

    from test_served_before_bookkeeping import record

    from streams.appliers import Indexer

    sink, _, _ = build(tmp_path)
    indexer = Indexer(sink, backoff_s=0.01, max_backoff_s=0.01)
    before = set(threading.enumerate())
    assert asyncio.run(indexer.apply(record(acl(2, ("group:hr",))))) is None
    started = _new_threads(before, "ragsync-side-write", "ragsync-access")
    assert {t.name.rsplit("_", 1)[0] for t in started} == {"ragsync-side-write", "ragsync-access"}, started
    indexer.close()
    assert [t.name for t in started if t.is_alive()] == []


def test_the_embedded_owner_closes_its_worker_when_it_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ragsync.owner import Owner
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded
    from streams.embedded_worker import EmbeddedWorker

    closed: list[IndexSink] = []
    real_close = EmbeddedWorker.close

    def close(worker: EmbeddedWorker) -> None:
        closed.append(worker.sink)
        real_close(worker)

    monkeypatch.setattr(EmbeddedWorker, "close", close)
    settings = Settings(home=tmp_path / "home", profile="embedded", session_secret="s" * 32)
    components = build_embedded(settings, with_embedder=False)
    owner = Owner(components)
    try:
        owner.start()
        assert owner.wait_idle(30)
        assert closed == []
        owner.stop()
        assert owner.worker is not None and closed == [owner.worker.sink]
    finally:
        owner.stop()
        components.close()
