"""The index sink and the embedded worker over real embedded stores (SQLite FTS5, qdrant-edge)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from indexer.apply_rules import Outcome
from indexer.cache import InProcessCache
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import EMBED_FIRST_CALL, IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates, SqliteGenerations
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id
from schemas.principal import AccessFilter
from streams.embedded_worker import EmbeddedWorker
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STAFF = AccessFilter("acme", ("group:staff",), datetime(2026, 11, 1, tzinfo=UTC))


def upsert(
    version: int,
    text: str,
    *,
    acl: tuple[str, ...] = ("group:staff",),
    doc: str = "t:p.md",
    effective: datetime | None = None,
) -> Event:
    return Event(
        event_id=make_event_id("t", "acme", doc, version, EventKind.UPSERT),
        kind=EventKind.UPSERT,
        tenant="acme",
        doc_id=doc,
        version=version,
        source="t",
        occurred_at=T0 + timedelta(days=version),
        payload=UpsertPayload(
            content=text,
            content_type="markdown",
            content_hash=f"{hash(text):016x}",
            acl=acl,
            source_url=f"file:///{doc}",
            effective_from=effective,
        ),
    )


def acl(version: int, entries: tuple[str, ...], doc: str = "t:p.md") -> Event:
    return Event(
        event_id=make_event_id("t", "acme", doc, version, EventKind.ACL),
        kind=EventKind.ACL,
        tenant="acme",
        doc_id=doc,
        version=version,
        source="t",
        payload=AclPayload(acl=entries),
    )


def delete(version: int, doc: str = "t:p.md") -> Event:
    return Event(
        event_id=make_event_id("t", "acme", doc, version, EventKind.DELETE),
        kind=EventKind.DELETE,
        tenant="acme",
        doc_id=doc,
        version=version,
        source="t",
        payload=DeletePayload(),
    )


@pytest.fixture
def parts(tmp_path: Path) -> dict[str, Any]:
    cache = InProcessCache(generations=SqliteGenerations(tmp_path / "state.db"))
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    docs = SqliteDocStates(tmp_path / "state.db")
    audit = SqliteDeletionAudit(tmp_path / "state.db")
    sink = IndexSink(lexical, None, None, docs, audit, cache)
    return {"sink": sink, "lexical": lexical, "docs": docs, "audit": audit, "cache": cache, "tmp": tmp_path}


def texts(lexical: SqliteLexicalIndex, query: str, access: AccessFilter = STAFF) -> list[str]:
    return [h.passage.text for h in lexical.search(query, access, 20, 0.0)]


def test_upsert_twice_is_idempotent_and_older_versions_are_ignored(parts: dict[str, Any]) -> None:
    sink, lexical = parts["sink"], parts["lexical"]
    assert sink.apply(upsert(1, "# Policy\n\nLaptops are replaced every 3 years.")).outcome is Outcome.APPLIED
    assert sink.apply(upsert(1, "# Policy\n\nLaptops are replaced every 3 years.")).outcome is Outcome.STALE
    assert lexical.count("acme") == 1
    sink.apply(upsert(3, "# Policy\n\nLaptops are replaced every 4 years."))
    assert sink.apply(upsert(2, "# Policy\n\nLaptops are replaced every 9 years.")).outcome is Outcome.STALE
    assert texts(lexical, "laptops replaced") == ["Laptops are replaced every 4 years."]
    assert lexical.count("acme") == 2, "the old version is kept, superseded"
    old = AccessFilter("acme", ("group:staff",), T0 + timedelta(days=2))
    assert texts(lexical, "laptops replaced", old) == ["Laptops are replaced every 3 years."]


def test_acl_event_reaches_old_versions_and_bumps_the_cache(parts: dict[str, Any]) -> None:
    sink, lexical, cache = parts["sink"], parts["lexical"], parts["cache"]
    sink.apply(upsert(1, "Budget figures for the year."))
    sink.apply(upsert(2, "Budget figures for the new year."))
    generation = cache.generation("acme")
    result = sink.apply(acl(3, ("group:finance",)))
    assert result.cache_bumped and cache.generation("acme") == generation + 1
    assert texts(lexical, "budget") == [], "the revocation reaches every version, as of any instant"
    staff_then = AccessFilter("acme", ("group:staff",), T0 + timedelta(days=1, hours=1))
    assert texts(lexical, "budget", staff_then) == []
    # Finance was added now (the ACL event's time): it reads the current version from now on, never
    # the old version as of when only staff could read it (issue 18 item 1).
    finance_then = AccessFilter("acme", ("group:finance",), T0 + timedelta(days=1, hours=1))
    assert texts(lexical, "budget", finance_then) == []
    finance_now = AccessFilter("acme", ("group:finance",), datetime.now(UTC))
    assert texts(lexical, "budget", finance_now) == ["Budget figures for the new year."]
    # A replayed older upsert carrying the old ACL cannot undo the revocation.
    assert sink.apply(upsert(2, "Budget figures for the new year.")).outcome is Outcome.STALE
    assert texts(lexical, "budget") == []


def test_upsert_that_changes_acl_is_a_revocation_too(parts: dict[str, Any]) -> None:
    sink, lexical, cache = parts["sink"], parts["lexical"], parts["cache"]
    sink.apply(upsert(1, "Merger plans are secret."))
    generation = cache.generation("acme")
    sink.apply(upsert(2, "Merger plans are secret and final.", acl=("group:board",)))
    assert cache.generation("acme") == generation + 1
    assert texts(lexical, "merger plans") == []


def test_delete_leaves_tombstone_and_audit(parts: dict[str, Any]) -> None:
    sink, lexical, audit, docs = parts["sink"], parts["lexical"], parts["audit"], parts["docs"]
    sink.apply(upsert(1, "# A\n\nAlpha text here.\n\n# B\n\nBeta text here."))
    assert lexical.count("acme", "t:p.md") == 2
    sink.apply(delete(2))
    assert lexical.count("acme", "t:p.md") == 0
    assert sink.apply(upsert(1, "Alpha text here.")).outcome is Outcome.STALE, "no resurrection by a late upsert"
    assert sink.apply(delete(2)).outcome is Outcome.STALE
    records = audit.records("acme")
    assert len(records) == 1
    rec = records[0]
    assert rec.doc_id == "t:p.md" and rec.passages_removed == 2 and "sqlite-fts5" in rec.removed_at
    assert rec.received_at <= rec.removed_at["sqlite-fts5"] <= rec.cache_invalidated_at
    state = docs.get("acme", "t:p.md")
    assert state is not None and state.deleted and state.applied_version == 2
    # A newer version (file re-created) comes back.
    sink.apply(upsert(3, "Alpha text again."))
    assert texts(lexical, "alpha") == ["Alpha text again."]


def test_deletion_audit_is_append_only(parts: dict[str, Any]) -> None:
    import sqlite3

    parts["sink"].apply(upsert(1, "Gamma text."))
    parts["sink"].apply(delete(2))
    conn = sqlite3.connect(parts["tmp"] / "state.db")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE audit_chain SET doc_id = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM audit_chain")


def test_effective_date_in_the_future_keeps_current_version(parts: dict[str, Any]) -> None:
    sink, lexical = parts["sink"], parts["lexical"]
    sink.apply(upsert(1, "Allowance is 50 euros.", effective=T0))
    sink.apply(upsert(2, "Allowance is 70 euros.", effective=datetime(2027, 1, 1, tzinfo=UTC)))
    assert texts(lexical, "allowance") == ["Allowance is 50 euros."]
    later = AccessFilter("acme", ("group:staff",), datetime(2027, 2, 1, tzinfo=UTC))
    assert texts(lexical, "allowance", later) == ["Allowance is 70 euros."]


def test_worker_dead_letters_bad_records_and_keeps_flowing(parts: dict[str, Any]) -> None:
    log = SqliteEventLog(parts["tmp"] / "events.db")
    log.publish_raw(TOPIC_DOCUMENTS, "acme/t:x.md", b"{not json")
    bad = upsert(1, "x").model_dump(mode="json")
    bad["tenant"] = "no spaces allowed"
    log.publish_raw(TOPIC_DOCUMENTS, "acme/t:y.md", json.dumps(bad).encode())
    log.publish_raw(TOPIC_DOCUMENTS, "acme/t:q.md", acl(2, ("group:x",), doc="t:q.md").model_dump_json().encode())
    log.publish(upsert(1, "Valid document about onboarding."))
    worker = EmbeddedWorker(log, parts["sink"])
    stats = worker.drain()
    assert stats.dead_lettered == 3 and stats.applied == 1
    assert texts(parts["lexical"], "onboarding") == ["Valid document about onboarding."]
    letters = [json.loads(r.value) for r in log.poll(TOPIC_DLQ, "inspect", 10)]
    assert [letter["offset"] for letter in letters] == [0, 1, 2]
    assert "invalid event" in letters[0]["reason"] and "tenant" in letters[1]["reason"]
    assert "acl event on the documents topic" in letters[2]["reason"]
    assert letters[0]["value"] == "{not json"
    assert worker.pending() == 0


def test_revocations_overtake_a_document_backlog(parts: dict[str, Any]) -> None:
    log = SqliteEventLog(parts["tmp"] / "events.db")
    log.publish(upsert(1, "Secret roadmap.", doc="t:secret.md"))
    EmbeddedWorker(log, parts["sink"]).drain()
    for i in range(200):
        log.publish(upsert(1, f"Filler document {i}.", doc=f"t:f{i}.md"))
    log.publish(acl(2, ("group:board",), doc="t:secret.md"))
    order: list[str] = []
    sink = parts["sink"]
    original = sink.apply

    def spy(event: Event, *args: Any) -> Any:
        order.append(event.kind.value)
        return original(event, *args)

    sink.apply = spy  # type: ignore[method-assign]
    EmbeddedWorker(log, sink, batch_size=16).drain()
    assert order[0] == "acl", "the revocation is applied before any queued upsert"
    assert texts(parts["lexical"], "secret roadmap") == []


class FlakyLexical(SqliteLexicalIndex):
    """A real SQLite index whose first writes fail, standing in for a store outage."""

    failures = 2

    def upsert(self, passages: Any) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("store unavailable")
        super().upsert(passages)


def test_store_outage_is_retried_and_nothing_is_acknowledged_early(parts: dict[str, Any]) -> None:
    tmp = parts["tmp"]
    flaky = FlakyLexical(tmp / "flaky.db")
    sink = IndexSink(flaky, None, None, parts["docs"], parts["audit"], parts["cache"])
    log = SqliteEventLog(tmp / "events.db")
    log.publish(upsert(1, "Outage-proof text."))
    stats = EmbeddedWorker(log, sink, backoff_s=0.01).drain()
    assert stats.applied == 1 and texts(flaky, "outage") == ["Outage-proof text."]

    flaky.failures = 100
    log.publish(upsert(2, "Second version text."))
    with pytest.raises(ConnectionError):
        EmbeddedWorker(log, sink, backoff_s=0.0, max_retries=2).drain()
    assert log.lag(TOPIC_DOCUMENTS, "ragsync-indexer") == 1, "the failed event stays uncommitted"
    flaky.failures = 0
    EmbeddedWorker(SqliteEventLog(tmp / "events.db"), sink).drain()
    assert texts(flaky, "second version") == ["Second version text."]


def test_dense_index_and_embedding_cache(tmp_path: Path, embedder: Any) -> None:
    from indexer.embedder import CachedEmbedder

    cached = CachedEmbedder(embedder, tmp_path / "emb.db")
    vector = EdgeVectorIndex(tmp_path / "vec", cached.dim)
    lexical = SqliteLexicalIndex(tmp_path / "lex.db")
    sink = IndexSink(
        lexical,
        vector,
        cached,
        SqliteDocStates(tmp_path / "s.db"),
        SqliteDeletionAudit(tmp_path / "s.db"),
        InProcessCache(),
    )
    doc = "# Travel\n\nTrain tickets are booked by the office manager.\n\n# Food\n\nLunch is served at noon."
    assert sink.apply(upsert(1, doc)).passages_embedded == 2
    assert cached.misses == 2
    sink.apply(upsert(2, doc.replace("noon", "one o'clock")))
    assert cached.misses == 3 and cached.hits == 1, "only the changed passage is embedded again"
    hits = vector.search(cached.embed_query("who books rail travel?"), STAFF, 5, 0.2)
    (first,) = lexical.passages(STAFF, [hits[0].passage_id])
    assert first.text.startswith("Train tickets")
    sink.apply(delete(3))
    assert vector.count("acme") == 0


def test_an_acl_event_that_overtakes_older_upserts_does_not_lose_them(parts: dict[str, Any]) -> None:
    """Revocations have their own, prioritised topic, so they can arrive before older upserts."""
    sink, lexical = parts["sink"], parts["lexical"]
    assert sink.apply(acl(3, ("group:board",))).outcome is Outcome.APPLIED
    assert sink.apply(upsert(1, "Roadmap for the first quarter.")).outcome is Outcome.APPLIED
    assert sink.apply(upsert(2, "Roadmap for the second quarter.")).outcome is Outcome.APPLIED
    board = AccessFilter("acme", ("group:board",), datetime.now(UTC))
    assert texts(lexical, "roadmap quarter", board) == ["Roadmap for the second quarter."]
    # Board was granted by the ACL event (now): not as of an instant before it.
    assert texts(lexical, "roadmap quarter", AccessFilter("acme", ("group:board",), STAFF.as_of)) == []
    assert texts(lexical, "roadmap quarter") == [], "the older upserts land under the newer ACL"
    # An upsert newer than the ACL event carries its own ACL, which wins.
    sink.apply(upsert(4, "Roadmap for the third quarter.", acl=("group:staff",)))
    # Staff is granted by v4, which cannot take effect before the ACL change already applied (now):
    # asked now, staff reads it (indexer.grants: the watermark).
    staff_now = AccessFilter("acme", ("group:staff",), datetime.now(UTC))
    assert texts(lexical, "roadmap quarter", staff_now) == ["Roadmap for the third quarter."]
    assert sink.apply(acl(3, ("group:board",))).outcome is Outcome.STALE


def test_deletes_and_recreations_in_any_arrival_order(parts: dict[str, Any]) -> None:
    sink, lexical = parts["sink"], parts["lexical"]
    sink.apply(upsert(1, "Printer manual text."))
    sink.apply(upsert(4, "Printer manual text, re-created."))  # the file came back after being deleted (v3)
    # A deletion older than the re-creation still removes what it deleted (v1, answerable as of its
    # dates otherwise), and nothing newer.
    assert sink.apply(delete(3)).outcome is Outcome.APPLIED
    assert texts(lexical, "printer manual") == ["Printer manual text, re-created."]
    assert {p.version for p in lexical.inventory("acme", "t:p.md")} == {4}
    assert sink.apply(delete(3)).outcome is Outcome.STALE, "a redelivered deletion"
    sink.apply(delete(5))
    assert sink.apply(acl(4, ("group:x",))).outcome is Outcome.STALE
    assert sink.apply(upsert(2, "Printer manual text.")).outcome is Outcome.STALE
    assert lexical.count("acme", "t:p.md") == 0


def test_staleness_rules() -> None:
    from indexer.apply_rules import is_stale
    from indexer.ports import DocState

    live = DocState("acme", "t:p.md", applied_version=5, acl=("group:a",), content_version=3, acl_version=5)
    assert is_stale(upsert(3, "x"), live) and not is_stale(upsert(4, "x"), live)
    assert is_stale(acl(5, ("group:b",)), live) and not is_stale(acl(6, ("group:b",)), live)
    assert not is_stale(delete(5), live), "a deletion overtaken by newer events still removes older content"
    floored = DocState("acme", "t:p.md", applied_version=5, content_version=5, tombstone_version=4)
    assert is_stale(delete(4), floored) and is_stale(upsert(4, "x"), floored) and not is_stale(delete(6), floored)
    gone = DocState("acme", "t:p.md", applied_version=7, deleted=True)
    assert is_stale(upsert(7, "x"), gone) and not is_stale(upsert(8, "x"), gone)
    assert is_stale(acl(6, ("group:b",)), gone) and is_stale(delete(7), gone)
    assert not is_stale(upsert(1, "x"), None)


def test_worker_embeds_a_batch_of_upserts_in_one_call(tmp_path: Path, embedder: Any) -> None:
    calls: list[int] = []

    class Counting:
        model_name, dim = embedder.model_name, embedder.dim

        def embed(self, texts: Any) -> Any:
            calls.append(len(texts))
            return embedder.embed(texts)

        def embed_query(self, text: str) -> Any:
            return embedder.embed_query(text)

        def token_counts(self, texts: Any) -> Any:
            return embedder.token_counts(texts)

        cache = None  # the port's `cache`: no embedding cache in front of the model

    sink = IndexSink(
        SqliteLexicalIndex(tmp_path / "l.db"),
        EdgeVectorIndex(tmp_path / "v", embedder.dim),
        Counting(),
        SqliteDocStates(tmp_path / "s.db"),
        SqliteDeletionAudit(tmp_path / "s.db"),
        InProcessCache(),
    )
    log = SqliteEventLog(tmp_path / "events.db")
    for i in range(5):
        log.publish(
            upsert(1, f"# Doc {i}\n\nFirst paragraph {i}.\n\n## More\n\nSecond paragraph {i}.", doc=f"t:d{i}.md")
        )
    stats = EmbeddedWorker(log, sink, batch_size=32).drain()
    assert stats.applied == 5 and stats.passages_embedded == 10
    # One pass for the whole batch, not one per document: a first call bounded by EMBED_FIRST_CALL
    # (a pass that may give way to a revocation starts small), then the rest together.
    assert calls == [EMBED_FIRST_CALL, 10 - EMBED_FIRST_CALL], "one embedding pass for the whole batch"
