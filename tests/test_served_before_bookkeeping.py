"""A revocation's or deletion's deny entry goes once every store answering queries holds it durably,
before the bookkeeping writes (doc state, deletion audit) when the stores are durable on write (the
cluster's Elasticsearch and Qdrant server), and never before the stores: with stores durable only
on flush (embedded), it goes after the flush as before. Real SQLite stores wrapped to declare their
durability, the Faust worker's applier (streams.appliers.Indexer) and tracker."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from test_indexing import acl, delete, upsert

from indexer.cache import InProcessCache
from indexer.deny import SqliteDenySet
from indexer.propagation import SqlitePropagationLog
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from schemas._time import utcnow
from schemas.events import Event
from streams.appliers import Indexer
from streams.ports import Record, topic_for
from streams.tracking import Tracker

DOC = "t:p.md"


def ms(at: datetime) -> datetime:
    """At the millisecond, as propagation records keep their instants."""
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def record(event: Event) -> Record:
    return Record(topic_for(event), 0, 0, event.key, event.model_dump_json().encode(), int(time.time() * 1000))


class Seen:
    """What each write saw of the document's deny entry: (what, entry present)."""

    def __init__(self, deny: SqliteDenySet) -> None:
        self.deny = deny
        self.log: list[tuple[str, bool]] = []
        self.at: list[datetime] = []

    def note(self, what: str) -> None:
        self.log.append((what, bool(self.deny.lookup("acme", [DOC]))))
        self.at.append(utcnow())


class Lexical:
    def __init__(self, inner: SqliteLexicalIndex, seen: Seen, durability: str, fail: bool = False) -> None:
        self.inner, self.seen, self.durability, self.fail = inner, seen, durability, fail

    def set_acl(self, *args: Any) -> None:
        self.seen.note("set_acl")
        if self.fail:
            raise ConnectionError("lexical store down (test)")
        self.inner.set_acl(*args)

    def delete_doc(self, *args: Any, **kwargs: Any) -> None:
        self.seen.note("delete_doc")
        self.inner.delete_doc(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Noting:
    """The doc states or the deletion audit: `method` notes `what` (Seen) before the real write."""

    def __init__(self, inner: Any, seen: Seen, method: str, what: str) -> None:
        self.inner, self.seen, self.method, self.what = inner, seen, method, what

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)
        if name != self.method:
            return real

        def write(*args: Any) -> Any:
            self.seen.note(self.what)
            return real(*args)

        return write


def build(
    tmp_path: Path, durability: str, fail: bool = False
) -> tuple[Indexer, Seen, SqliteDenySet, Lexical, SqlitePropagationLog]:
    deny = SqliteDenySet(tmp_path / "deny.db")
    seen = Seen(deny)
    lexical = Lexical(SqliteLexicalIndex(tmp_path / "lexical.db"), seen, durability, fail)
    docs = Noting(SqliteDocStates(tmp_path / "state.db"), seen, "put", "state")
    audit = Noting(SqliteDeletionAudit(tmp_path / "state.db"), seen, "append", "audit")
    sink = IndexSink(lexical, None, None, docs, audit, InProcessCache())  # type: ignore[arg-type]
    propagation = SqlitePropagationLog(tmp_path / "propagation.db")
    indexer = Indexer(sink, tracker=Tracker(deny, propagation), backoff_s=0.01, max_backoff_s=0.01)
    sink.apply(upsert(1, "# Pay\n\nThe salary bands of the staff."))
    sink.flush()
    seen.log.clear()
    seen.at.clear()
    return indexer, seen, deny, lexical, propagation


@pytest.fixture(params=[acl(2, ("group:hr",)), delete(2)], ids=["revocation", "deletion"])
def event(request: pytest.FixtureRequest) -> Event:
    """A revocation or a deletion of the document the setup indexed."""
    return request.param  # type: ignore[no-any-return]


async def consume_then_apply(indexer: Indexer, event: Event) -> None:
    await indexer.deny(record(event))  # the deny agent runs ahead of the applier
    assert await indexer.apply(record(event)) is None


def test_stores_durable_on_write_clear_the_entry_before_the_bookkeeping(tmp_path: Path, event: Event) -> None:
    indexer, seen, deny, _, propagation = build(tmp_path, "write")
    asyncio.run(consume_then_apply(indexer, event))
    store = "set_acl" if event.kind.value == "acl" else "delete_doc"
    bookkeeping = ["state"] if store == "set_acl" else ["audit", "state"]
    assert seen.log == [(store, True)] + [(what, False) for what in bookkeeping]
    assert not deny.lookup("acme", [DOC])
    (rec,) = propagation.records()
    assert rec.converged_at is not None and ms(seen.at[0]) <= rec.converged_at <= seen.at[1], (
        "the record says it converged when the deny entry went, before the bookkeeping"
    )


def test_stores_durable_on_flush_keep_the_entry_until_confirmed(tmp_path: Path, event: Event) -> None:
    indexer, seen, deny, _, propagation = build(tmp_path, "flush")
    asyncio.run(consume_then_apply(indexer, event))
    assert seen.log and all(present for _, present in seen.log), seen.log
    assert not deny.lookup("acme", [DOC])  # cleared once confirmed, after the flush
    (rec,) = propagation.records()
    assert rec.converged_at is not None and rec.converged_at >= ms(seen.at[-1])


def test_a_store_that_failed_never_clears_the_entry(tmp_path: Path) -> None:
    indexer, seen, deny, lexical, _ = build(tmp_path, "write", fail=True)
    revocation = acl(2, ("group:hr",))

    async def scenario() -> None:
        await indexer.deny(record(revocation))
        applying = asyncio.create_task(indexer.apply(record(revocation)))
        await asyncio.sleep(0.3)  # several attempts, each failing in the lexical store
        assert not applying.done()
        assert deny.lookup("acme", [DOC]), "the deny entry went while the store still showed the old ACL"
        assert [w for w, _ in seen.log if w != "set_acl"] == [], "bookkeeping written before the stores"
        lexical.fail = False
        assert await applying is None

    asyncio.run(scenario())
    assert not deny.lookup("acme", [DOC])
    assert seen.log[-1] == ("state", False)
