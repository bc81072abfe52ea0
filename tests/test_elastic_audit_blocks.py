"""The Elasticsearch audit chain's blocks: the links queued while a create is in flight are created with
one request (one block document), and the chain stays one verifiable total order across workers.

Against the real Elasticsearch (RAGSYNC_REQUIRE_SERVICES=1 fails instead of skipping). Faults are
injected by a wrapper around the real client that holds or rejects chosen creates; every other call,
and every create it lets through, reaches the real cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from conftest import NOW
from waiting import wait_until

from indexer.ports import DeletionRecord, PurgeRecord

ES = "http://127.0.0.1:9200"

pytestmark = pytest.mark.cluster


def record(event_id: str, *, tenant: str = "acme", i: int = 0) -> DeletionRecord:
    at = NOW + timedelta(milliseconds=i)
    return DeletionRecord(
        event_id=event_id,
        tenant=tenant,
        doc_id=f"{event_id}.md",
        version=2,
        received_at=at,
        removed_at={"elasticsearch": at + timedelta(milliseconds=3)},
        cache_invalidated_at=at + timedelta(milliseconds=5),
        passages_removed=i,
    )


class Intercepting:
    """The real client, except that `on_create(document)` runs before each create of the chain index."""

    def __init__(self, audit: Any, on_create: Callable[[dict[str, Any]], None]) -> None:
        self._real = audit._es
        self._index = audit.index
        self._on_create = on_create
        self.creates: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if name != "create":
            return attr

        def create(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("index") == self._index:
                self.creates.append(kwargs["document"])
                self._on_create(kwargs["document"])
            return attr(*args, **kwargs)

        return create


def queue_behind_first(
    audit: Any,
    first: Callable[[], None],
    rest: list[Callable[[], None]],
    then: Callable[[dict[str, Any]], None] = lambda _: None,
) -> list[Future[None]]:
    """Run `first` until its create is in flight and hold it there until `rest` have all queued;
    `then(document)` runs before every later create."""
    held, release = threading.Event(), threading.Event()
    intercepting: Intercepting = audit._es
    start = len(intercepting.creates)

    def hold(document: dict[str, Any]) -> None:
        if len(intercepting.creates) == start + 1:
            held.set()
            release.wait(30)
        else:
            then(document)

    intercepting._on_create = hold
    pool = ThreadPoolExecutor(len(rest) + 1)
    futures = [pool.submit(first)]
    assert held.wait(30)
    futures += [pool.submit(call) for call in rest]
    wait_until(lambda: len(audit._queue) >= len(rest), 10, "the other appends queued")
    release.set()
    pool.shutdown(wait=True)
    return futures


def test_a_block_reads_back_filters_verifies_and_is_continued_after_a_restart(es_prefix: str) -> None:
    from indexer.audit_chain import verify
    from indexer.audit_records import KIND_DELETION, KIND_PURGE
    from indexer.elastic_audit import ElasticDeletionAudit

    audit = ElasticDeletionAudit(ES, prefix=es_prefix)
    audit._es = Intercepting(audit, lambda _: None)  # type: ignore[assignment]
    purge = PurgeRecord(store="qdrant", at=NOW, covers_seq=1, details={"merged": 2})
    try:
        calls: list[Callable[[], None]] = [
            (lambda i=i: audit.append(record(f"b{i}", tenant="acme" if i % 2 else "globex", i=i))) for i in range(1, 9)
        ]
        calls.insert(4, lambda: audit.append_purge(purge))
        futures = queue_behind_first(audit, lambda: audit.append(record("b0", i=0)), calls)
        for f in futures:
            f.result()
        assert len(audit._es.creates) == 2 and "links" in audit._es.creates[1]
        links, head = audit.chain()
        assert [link.seq for link in links] == list(range(1, 11)) and head == (10, links[-1].hash)
        assert verify(links, head) == []
        assert sorted(r.event_id for r in audit.records("acme")) == [f"b{i}" for i in (0, 1, 3, 5, 7)]
        assert sorted(r.event_id for r in audit.records("globex")) == [f"b{i}" for i in (2, 4, 6, 8)]
        (stored,) = audit.purges("qdrant")
        assert audit.purges("lexical") == [] and stored.details == {"merged": 2}
        assert audit.latest(KIND_PURGE) == stored.seq
        assert audit.latest(KIND_DELETION) == max(link.seq for link in links if link.seq != stored.seq)
    finally:
        audit.close()

    again = ElasticDeletionAudit(ES, prefix=es_prefix)  # a restarted worker: its head is inside a block
    try:
        again.append(record("after", i=99))
        links, head = again.chain()
        assert [link.seq for link in links] == list(range(1, 12)) and verify(links, head) == []
        assert again.tip() == 11

        # Edit one record inside the block behind the adapter's back: the chain shows it.
        src = again._es.get(index=again.index, id=again._id(2))["_source"]
        entries = json.loads(src["links"])
        # A deletion record of the block (the queued calls may reach the writer in another order, so the
        # purge record is not always at the same place in it).
        at = next(i for i, e in enumerate(entries) if "passages_removed" in json.loads(e["body"]))
        body = json.loads(entries[at]["body"])
        body["passages_removed"] += 1
        entries[at]["body"] = json.dumps(body)
        again._es.index(index=again.index, id=again._id(2), document={**src, "links": json.dumps(entries)})
        problems = verify(*again.chain())
        assert [p.seq for p in problems] == [entries[at]["seq"]]
    finally:
        again.close()


def test_a_writer_that_takes_the_blocks_number_first_makes_it_link_after_its_record(es_prefix: str) -> None:
    """Another worker creates the seq the block was about to take: the block's create fails as a
    whole (409), the writer reads the chain again and creates every record of the block after the
    other worker's; none is lost, none is stored twice, the chain verifies."""
    from indexer.audit_chain import verify
    from indexer.elastic_audit import ElasticDeletionAudit

    audit = ElasticDeletionAudit(ES, prefix=es_prefix)
    other = ElasticDeletionAudit(ES, prefix=es_prefix)
    intercepting = Intercepting(audit, lambda _: None)
    audit._es = intercepting  # type: ignore[assignment]

    def race(document: dict[str, Any]) -> None:
        """Before the block's first create is sent, the other worker appends at the block's seq."""
        if "links" in document and sum("links" in d for d in intercepting.creates) == 1:
            other.append(record("other"))

    try:
        futures = queue_behind_first(
            audit,
            lambda: audit.append(record("a0")),
            [lambda i=i: audit.append(record(f"a{i}", i=i)) for i in range(1, 7)],
            then=race,
        )
        for f in futures:
            f.result()
        assert [d["seq"] for d in intercepting.creates] == [1, 2, 3], "a0, the block refused at 2, again at 3"
    finally:
        audit.close()
        other.close()

    check = ElasticDeletionAudit(ES, prefix=es_prefix)
    try:
        links, head = check.chain()
        events = [r.event_id for r in check.records()]
        assert sorted(events) == sorted([f"a{i}" for i in range(7)] + ["other"]), "none lost, none twice"
        assert [link.seq for link in links] == list(range(1, 9)) and verify(links, head) == []
    finally:
        check.close()


def test_a_record_that_cannot_be_created_fails_only_its_own_append(es_prefix: str) -> None:
    """The block is refused because of one record: each record is created alone, the refused one's
    append raises (its deletion is retried, never acknowledged), the others are recorded."""
    from indexer.audit_chain import verify
    from indexer.elastic_audit import ElasticDeletionAudit

    audit = ElasticDeletionAudit(ES, prefix=es_prefix)
    intercepting = Intercepting(audit, lambda _: None)
    audit._es = intercepting  # type: ignore[assignment]

    def refuse_poison(document: dict[str, Any]) -> None:
        if "poison" in document.get("event_id", ()) or document.get("event_id") == "poison":
            raise RuntimeError("refused")

    try:
        calls = [lambda i=i: audit.append(record(f"p{i}", i=i)) for i in range(1, 5)]
        calls.insert(2, lambda: audit.append(record("poison")))
        audit.append(record("p0"))
        futures = queue_behind_first(audit, lambda: audit.append(record("p-first")), calls, then=refuse_poison)
        errors = [f.exception() for f in futures]
        assert [type(e).__name__ if e else None for e in errors] == [None, None, None, "RuntimeError", None, None]
        links, head = audit.chain()
        assert verify(links, head) == []
        assert sorted(r.event_id for r in audit.records()) == sorted(["p0", "p-first"] + [f"p{i}" for i in range(1, 5)])
    finally:
        audit.close()


def test_an_append_costs_three_requests_and_its_marker_still_stops_a_redelivery(es_prefix: str) -> None:
    """Once the head is known, an append is: is the event recorded, create the record, then one
    `_bulk` moving the head (compare-and-set on the version this process wrote) with the event's
    marker. It was five (the head read, the head write and the marker each a request of their own)."""
    from indexer.audit_chain import verify
    from indexer.elastic_audit import ElasticDeletionAudit

    audit = ElasticDeletionAudit(ES, prefix=es_prefix)
    other = ElasticDeletionAudit(ES, prefix=es_prefix)
    calls: list[str] = []
    real = audit._es

    class Counting:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if not callable(attr) or name == "indices":
                return attr

            def call(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return attr(*args, **kwargs)

            return call

    try:
        audit.append(record("warm"))
        audit._es = Counting()  # type: ignore[assignment]
        for i in range(3):
            audit.append(record(f"c{i}", i=i))
        assert calls == ["exists", "create", "bulk"] * 3
        audit.append(record("c1", i=1))  # redelivered
        assert calls[-1] == "exists" and len(calls) == 10
        other.append(record("from-other"))  # moves the head: this process's version is stale
        audit.append(record("c3", i=3))
        links, head = audit.chain()
        assert head == (6, links[-1].hash) and verify(links, head) == []
        assert sorted(r.event_id for r in audit.records()) == sorted(["warm", "c0", "c1", "c2", "from-other", "c3"])
    finally:
        audit._es = real
        audit.close()
        other.close()
