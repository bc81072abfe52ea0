"""A query whose searches straddle a deletion's confirmation must not show the deleted document.

The query reads the deny set after its store searches. A search can read the store before the
deletion reached it; the worker then applies the deletion, every store serves it, and the deny entry
is cleared, all before the query reads the deny set. Reading only the entries left then finds none,
and the query returned the deleted passage (seen once in the cluster fault suite: a probe was shown a
deleted document after its deletion was consumed). The deny set's log of clears closes it: the query
takes a mark before searching and reads what was cleared since (indexer.deny). Real embedded stores and
both deny sets (SQLite, and Redis as the cluster runs it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import require_service, unique
from test_indexing import delete, upsert

from indexer.cache import InProcessCache
from indexer.deny import DenySet, SqliteDenySet
from indexer.ports import Hit
from indexer.propagation import SqlitePropagationLog
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates, SqliteGenerations
from query.retrieval import RetrievalSettings, Retriever
from schemas.events import Event
from schemas.principal import AccessFilter, Principal
from streams.ports import Record, topic_for
from streams.tracking import Tracker

HAL = Principal(tenant="acme", user="hal", groups=("staff", "hr"))
TEXT = "# Salaries\n\nThe salary band for a senior engineer is 90,000 to 120,000 euros per year."
QUESTION = "What is the salary band for a senior engineer?"
DOC = "t:salaries.md"


class SlowSearch(SqliteLexicalIndex):
    """The real store; `during` runs after a search read it and before the query goes on."""

    during: Callable[[], None] | None = None

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        hits = super().search(query, access, limit, floor)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return hits


def _sqlite(tmp: Path) -> DenySet:
    return SqliteDenySet(tmp / "deny.db")


def _redis(tmp: Path) -> DenySet:
    require_service("redis")
    from indexer.redis_deny import RedisDenySet

    return RedisDenySet("redis://127.0.0.1:6379/0", namespace=unique("straddle"))


@pytest.fixture(params=["sqlite", "redis"])
def deny(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DenySet]:
    d = {"sqlite": _sqlite, "redis": _redis}[request.param](tmp_path)
    yield d
    drop: Any = getattr(d, "drop_all", None)  # the Redis test namespace only
    if drop is not None:
        drop()
    d.close()


def record(event: Event) -> Record:
    return Record(topic_for(event), 0, 0, event.key, event.model_dump_json().encode(), int(time.time() * 1000))


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "cached read-back"])
def test_a_deletion_confirmed_while_the_query_searched_is_not_shown(
    tmp_path: Path, deny: DenySet, cached: bool
) -> None:
    lexical = SlowSearch(tmp_path / "lexical.db")
    cache = InProcessCache(generations=SqliteGenerations(tmp_path / "state.db"))
    states = SqliteDocStates(tmp_path / "state.db")
    sink = IndexSink(lexical, None, None, states, SqliteDeletionAudit(tmp_path / "state.db"), cache)
    tracker = Tracker(deny, SqlitePropagationLog(tmp_path / "propagation.db"))
    retriever = Retriever(lexical, None, None, cache if cached else None, RetrievalSettings(k=4), deny=deny)
    sink.apply(upsert(1, TEXT, acl=("group:hr",), doc=DOC))
    now = upsert(1, TEXT).occurred_at.replace(year=2026, month=11, day=30)
    assert [p.doc_id for p in retriever.search(HAL, QUESTION, now).passages] == [DOC]

    gone = delete(2, doc=DOC)
    tracker.consumed(record(gone))  # effective: the worker wrote its deny entry
    if not cached:
        assert retriever.search(HAL, QUESTION, now).passages == [], "denied while the stores still hold it"

    def worker_finishes() -> None:
        """What the worker does meanwhile: apply the deletion everywhere, confirm it, clear the entry."""
        result = sink.apply(gone, served=tracker.served)
        tracker.applied(record(gone), gone, result)
        tracker.confirmed([gone])
        assert deny.lookup("acme", [DOC]) == []

    if cached:
        # The ranking cached before the deletion is read back from the store of record; the worker
        # finishes between that read and the deny lookup.
        original = lexical.passages

        def passages(access: AccessFilter, ids: list[str]) -> Any:
            found = original(access, ids)
            lexical.passages = original  # type: ignore[method-assign]
            worker_finishes()
            return found

        lexical.passages = passages  # type: ignore[method-assign]
    else:
        lexical.during = worker_finishes
    shown = retriever.search(HAL, QUESTION, now).passages
    assert [p.doc_id for p in shown] == [], "a search that read the store before the deletion shows nothing"
    assert retriever.search(HAL, QUESTION, now).passages == [], "and a query that starts after it finds nothing"
