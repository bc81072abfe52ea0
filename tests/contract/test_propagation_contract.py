"""PropagationLog contract: SQLite (embedded) and Elasticsearch (cluster), the records `ragsync
propagation` and the metrics read back (when a revocation or deletion reached each copy)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import require_service, unique

from indexer.propagation import PropagationRecord
from schemas._time import utcnow

START = utcnow().replace(microsecond=0) - timedelta(hours=1)  # recent: SQLite drops records past its retention


def _sqlite(tmp: Path) -> Callable[[], Any]:
    from indexer.propagation import SqlitePropagationLog

    return lambda: SqlitePropagationLog(tmp / "propagation.db")


def _elastic(tmp: Path) -> Callable[[], Any]:
    require_service("elasticsearch")
    from indexer.elastic_propagation import ElasticPropagationLog

    prefix = unique("ragsync-test-")
    return lambda: ElasticPropagationLog("http://127.0.0.1:9200", prefix=prefix)


FACTORIES: dict[str, Callable[[Path], Callable[[], Any]]] = {"sqlite": _sqlite, "elasticsearch": _elastic}


@pytest.fixture(params=list(FACTORIES))
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Opens the same log again on each call (a second worker, a restarted one)."""
    factory = FACTORIES[request.param](tmp_path)
    opened: list[Any] = []

    def open_one() -> Any:
        opened.append(factory())
        return opened[-1]

    yield open_one
    if opened:
        drop = getattr(opened[0], "drop_all", None)
        if drop:
            drop()
    for log in opened:
        log.close()


def record(event_id: str, at_s: float, *, kind: str = "acl", published: bool = True, **extra: Any) -> PropagationRecord:
    occurred = START + timedelta(seconds=at_s)
    return PropagationRecord(
        event_id=event_id,
        kind=kind,
        tenant="acme",
        doc_id="a.md",
        version=3,
        occurred_at=occurred - timedelta(seconds=5),
        published_at=occurred if published else None,
        consumed_at=occurred + timedelta(milliseconds=40),
        **extra,
    )


def test_records_round_trip_every_field(open_log: Callable[[], Any]) -> None:
    log = open_log()
    full = record(
        "e1",
        0,
        kind="delete",
        applied_at={"sqlite-fts5": START + timedelta(milliseconds=90), "qdrant-edge": START + timedelta(seconds=1)},
        cache_invalidated_at=START + timedelta(milliseconds=95),
        converged_at=START + timedelta(seconds=1, milliseconds=5),
        outcome="stale",
    )
    bare = record("e2", 1, published=False)  # no publish time known: it starts at the occurrence
    log.record([full, bare])
    assert log.records() == [bare, full]  # oldest start first: bare started 4 s before full was published
    assert log.records()[1].delays()["converged"] == pytest.approx(1.005)


def test_a_redelivered_event_replaces_its_record(open_log: Callable[[], Any]) -> None:
    log = open_log()
    log.record([record("e1", 0)])
    later = record("e1", 0, converged_at=START + timedelta(seconds=2))
    log.record([later])
    assert log.records() == [later]


def test_since_and_order_and_empty_batches(open_log: Callable[[], Any]) -> None:
    log = open_log()
    log.record([])
    assert log.records() == []
    log.record([record("c", 20), record("a", 10)])
    log.record([record("b", 10), record("d", 30)])
    assert [r.event_id for r in log.records()] == ["a", "b", "c", "d"]  # by start, then event_id
    assert [r.event_id for r in log.records(START + timedelta(seconds=20))] == ["c", "d"]  # since is inclusive
    assert log.records(START + timedelta(seconds=31)) == []


def test_records_are_durable_and_shared_across_handles(open_log: Callable[[], Any]) -> None:
    first = open_log()
    first.record([record("e1", 0)])
    second = open_log()  # another worker, or the same one restarted
    second.record([record("e2", 1)])
    assert [r.event_id for r in first.records()] == ["e1", "e2"] == [r.event_id for r in second.records()]
