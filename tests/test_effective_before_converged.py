"""A revocation or deletion is effective the moment a worker consumes it, before any store converged,
and no cached entry can show what the asker lost. Real embedded stores, the real query worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_indexing import T0, acl, delete, upsert

from indexer.cache import InProcessCache
from indexer.deny import DenyKind, DenyUnavailable, SqliteDenySet
from indexer.propagation import CONVERGED, EFFECTIVE, SqlitePropagationLog
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates, SqliteGenerations
from query.extractive import ExtractiveModel
from query.retrieval import RetrievalSettings, Retriever
from query.worker import QueryWorker
from schemas.events import Event
from schemas.principal import Principal
from streams.ports import Record, topic_for
from streams.tracking import Tracker

ANN = Principal(tenant="acme", user="ann", groups=("staff",))
HAL = Principal(tenant="acme", user="hal", groups=("staff", "hr"))
TEXT = "# Salaries\n\nThe salary band for a senior engineer is 90,000 to 120,000 euros per year."
QUESTION = "What is the salary band for a senior engineer?"
AS_OF = T0.replace(year=2026, month=11)


def record(event: Event, offset: int = 0) -> Record:
    published_ms = int(time.time() * 1000)
    return Record(topic_for(event), 0, offset, event.key, event.model_dump_json().encode(), published_ms)


class FlakyDeny(SqliteDenySet):
    """The SQLite deny set, with an outage switch (a Redis outage's behaviour, without a Redis)."""

    down = False

    def lookup(self, tenant: str, doc_ids: Any) -> Any:
        if self.down:
            raise DenyUnavailable("deny set down (test)")
        return super().lookup(tenant, doc_ids)


@pytest.fixture
def parts(tmp_path: Path) -> dict[str, Any]:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    cache = InProcessCache(generations=SqliteGenerations(tmp_path / "state.db"))
    sink = IndexSink(
        lexical, None, None, SqliteDocStates(tmp_path / "state.db"), SqliteDeletionAudit(tmp_path / "state.db"), cache
    )
    deny = FlakyDeny(tmp_path / "deny.db")
    propagation = SqlitePropagationLog(tmp_path / "propagation.db")
    retriever = Retriever(lexical, None, None, cache, RetrievalSettings(k=4), deny=deny)
    worker = QueryWorker(retriever, ExtractiveModel(), "secret")
    sink.apply(upsert(1, TEXT, acl=("group:hr",), doc="t:salaries.md"))
    return {
        "sink": sink,
        "deny": deny,
        "worker": worker,
        "cache": cache,
        "tracker": Tracker(deny, propagation),
        "propagation": propagation,
    }


def ask(parts: dict[str, Any], who: Principal = HAL) -> Any:
    return parts["worker"].ask(who, QUESTION, AS_OF)


def test_a_consumed_revocation_is_effective_before_any_store_changed(parts: dict[str, Any]) -> None:
    first = ask(parts)
    assert first.answered and "90,000" in (first.answer or "")
    assert ask(parts).trace.searches[0].cached, "the second ask is served from the cache"

    revoke = acl(2, ("group:hr-leads",), doc="t:salaries.md")
    pending = parts["tracker"].consumed(record(revoke))  # the worker read it; nothing applied yet
    assert pending is not None
    (entry,) = parts["deny"].lookup("acme", ["t:salaries.md"])
    assert entry.kind is DenyKind.ACL and entry.acl == ("group:hr-leads",)

    after = ask(parts)
    assert not after.answered, "the next query abstains although every store still has the old ACL"
    assert not after.trace.searches[0].cached, "the cached entry is unusable"
    assert after.trace.searches[0].selected_ids == []

    # Applied and confirmed: the stores hold it, the deny entry goes, the answer stays the same.
    result = parts["sink"].apply(revoke)
    parts["tracker"].applied(record(revoke), revoke, result)
    (tracked,) = parts["tracker"].confirmed([revoke])
    assert parts["deny"].lookup("acme", ["t:salaries.md"]) == []
    assert not ask(parts).answered
    delays = tracked.delays()
    assert set(delays) >= {EFFECTIVE, "sqlite-fts5", "cache", CONVERGED}
    assert delays[EFFECTIVE] <= delays["sqlite-fts5"] <= delays[CONVERGED]
    assert [r.event_id for r in parts["propagation"].records()] == [revoke.event_id]


def test_a_consumed_deletion_is_effective_for_fresh_and_cached_queries(parts: dict[str, Any]) -> None:
    assert ask(parts).answered
    gone = delete(3, doc="t:salaries.md")
    parts["tracker"].consumed(record(gone))
    after = ask(parts)
    assert not after.answered and not after.trace.searches[0].cached
    # A re-created document (a later version) is not held back by the old deletion's entry.
    parts["sink"].apply(gone)
    parts["sink"].apply(upsert(4, TEXT, acl=("group:hr",), doc="t:salaries.md"))
    assert ask(parts).answered, "version 4 is past the deletion at version 3"


def test_a_cached_entry_is_read_back_from_the_store_of_record(parts: dict[str, Any]) -> None:
    """Stores revoked but the cache never invalidated (the bump lost, as after a Redis outage)."""
    assert ask(parts).answered
    cache = parts["cache"]
    entries = dict(cache._entries)
    assert entries and all(b"salary band" not in value for _, value in entries.values()), "IDs only in the cache"
    parts["sink"].lexical.set_acl("acme", "t:salaries.md", ["group:hr-leads"], {})  # no bump, no deny entry
    after = ask(parts)
    assert not after.answered and not after.trace.searches[0].cached


def test_without_the_deny_set_answers_come_from_the_stores(parts: dict[str, Any]) -> None:
    """A deny-set outage: consumption cannot write, queries cannot read; the stores still decide."""
    parts["deny"].down = True
    assert ask(parts).answered
    revoke = acl(2, ("group:hr-leads",), doc="t:salaries.md")
    parts["sink"].apply(revoke)  # converged in the stores
    assert not ask(parts).answered
    assert parts["worker"].retriever.deny_unavailable >= 1
    assert ask(parts, ANN).answered is False


def test_records_fetched_together_are_denied_with_one_write_and_confirmed_as_before() -> None:
    """The cluster deny agent hands the tracker every record fetched together: one deny-set write
    for all (Redis), each event pending from the instant before it, cleared by its confirmation; a
    record seen again adds nothing, and an upsert or a bad record is skipped."""
    from conftest import require_service, unique

    from indexer.redis_deny import RedisDenySet

    require_service("redis")
    deny = RedisDenySet("redis://127.0.0.1:6379/0", namespace=unique("t"))
    writes: list[int] = []
    real = deny.add_many
    deny.add_many = lambda entries: writes.append(len(entries)) or real(entries)  # type: ignore[method-assign]
    tracker = Tracker(deny, None)
    try:
        events = [acl(2, ("group:hr",), doc=f"t:{i}.md") for i in range(3)] + [delete(3, doc="t:gone.md")]
        bad = Record("acl", 0, 9, "acme/t:x.md", b"{not json", None)
        records = [record(e, i) for i, e in enumerate(events)] + [record(upsert(1, TEXT), 7), bad]
        tracker.consumed_many(records)
        assert writes == [4] and tracker.pending() == 4
        denied = deny.lookup("acme", [f"t:{i}.md" for i in range(3)] + ["t:gone.md"])
        assert sorted((e.doc_id, e.kind) for e in denied) == sorted(
            [(f"t:{i}.md", DenyKind.ACL) for i in range(3)] + [("t:gone.md", DenyKind.DELETED)]
        )
        tracker.consumed_many(records[:2])  # redelivered: already pending
        assert writes == [4, 0]
        tracker.confirmed(events)
        assert tracker.pending() == 0 and deny.entries() == []
    finally:
        deny.drop_all()
        deny.close()
