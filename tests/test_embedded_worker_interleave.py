"""The embedded worker under a steady stream of revocations: the backlog drains between them, and a
revocation waits for one round and one small embedding call, never for the documents.

Bounds are in rounds (flushes) and embedding calls, not wall-clock time; real stores throughout
(SQLite FTS5, qdrant-edge, SQLite state, log and embedding cache), with the test_write_path stand-in
model where only the order of calls matters.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_indexing import STAFF, acl, delete, texts, upsert
from test_write_path import FakeEmbedder, Journal, SlowEmbedder, home

from indexer.embedding_cache import CachedEmbedder, embedding_key
from indexer.sink import EMBED_FIRST_CALL, Preempted
from schemas.events import Event, EventKind
from streams.embedded_worker import GROUP, EmbeddedWorker
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog

STREAM = 10
BACKLOG = 40


def spy_applies(h: dict[str, Any], journal: Journal, after: Any = None) -> None:
    """Note every event the sink applies in the journal (between the flushes that end each round)."""
    original = h["sink"].apply

    def spy(event: Event, *args: Any) -> Any:
        journal.calls.append(f"{event.kind.value}:{event.doc_id}")
        result = original(event, *args)
        if after is not None:
            after(event)
        return result

    h["sink"].apply = spy


def rounds(calls: list[str]) -> list[list[str]]:
    """The journal cut at each lexical flush: what each durable round applied."""
    out: list[list[str]] = [[]]
    for call in calls:
        if call == "lexical.flush":
            out.append([])
        elif not call.startswith("commit:"):
            out[-1].append(call)
    return out


def test_the_backlog_drains_between_revocations_that_keep_arriving(tmp_path: Path) -> None:
    """A new ACL change arrives during every round. Before, the worker drained revocations until
    none was left and every upsert batch gave way, so the backlog waited for a pause that never came
    (the benchmark: 0 documents applied in a 13 s events phase). Now each round carries a slice of
    documents, applied after the round's revocations, and each revocation is applied in the round
    after the one during which it was published."""
    journal = Journal()
    h = home(tmp_path, journal, embedder=FakeEmbedder())
    log: SqliteEventLog = h["log"]
    log.publish_many([upsert(1, f"Secret plan number {i}.", doc=f"t:r{i}.md") for i in range(STREAM)])
    EmbeddedWorker(log, h["sink"]).drain()
    log.publish_many([upsert(1, f"Epsilon fact number {i}.", doc=f"t:e{i}.md") for i in range(BACKLOG)])
    other = SqliteEventLog(tmp_path / "events.db")  # another process's publisher
    published_in_round: dict[str, int] = {}

    def publish_next(event: Event) -> None:
        """The stream: while an ACL change is applied, the next one is published."""
        if event.kind is EventKind.ACL and len(published_in_round) < STREAM:
            doc = f"t:r{len(published_in_round)}.md"
            other.publish(acl(2, ("group:board",), doc=doc))
            published_in_round[doc] = journal.calls.count("lexical.flush")

    journal.calls.clear()
    spy_applies(h, journal, publish_next)
    other.publish(acl(2, ("group:board",), doc="t:r0.md"))  # the first of the stream, before round 0
    published_in_round["t:r0.md"] = -1
    worker = EmbeddedWorker(log, h["sink"])
    worker.drain()

    by_round = rounds(journal.calls)
    last_acl_round = max(i for i, r in enumerate(by_round) if any(c.startswith("acl:") for c in r))
    applied_before = sum(1 for r in by_round[:last_acl_round] for c in r if c.startswith("upsert:"))
    assert applied_before == BACKLOG, f"the backlog drained while the stream went on: {by_round}"
    for i, r in enumerate(by_round):
        kinds = [c.split(":")[0] for c in r]
        assert kinds == sorted(kinds), f"round {i}: the ACL changes before the documents: {r}"
        for call in r:
            if call.startswith("acl:"):
                doc = call.split(":", 1)[1]
                assert i == published_in_round[doc] + 1, f"{doc} published in round {published_in_round[doc]}"
    assert worker.interleaved == BACKLOG
    assert texts(h["lexical"], "secret plan") == []
    assert len(texts(h["lexical"], "epsilon fact")) == min(20, BACKLOG)
    assert h["vector"].count("acme") == h["lexical"].count("acme") == STREAM + BACKLOG
    assert log.lag(TOPIC_ACL, GROUP) == log.lag(TOPIC_DOCUMENTS, GROUP) == 0


def test_a_revocation_waits_for_one_small_call_however_fast_the_last_batch_was(tmp_path: Path) -> None:
    """The pace a batch learnt can be from a quiet moment: when the model slows down (other
    processes start), the first call of the next batch must not be a full one. A revocation
    published as that call starts is applied after at most EMBED_FIRST_CALL texts."""
    model = StartHook(per_text_s=0.0)
    journal = Journal()
    h = home(tmp_path, journal, embedder=model)
    log: SqliteEventLog = h["log"]
    log.publish(upsert(1, "Secret roadmap for the next year.", doc="t:roadmap.md"))
    log.publish_many([upsert(1, f"Zeta fact number {i}.", doc=f"t:z{i}.md") for i in range(64)])
    EmbeddedWorker(log, h["sink"]).drain()  # a fast model: full calls after the first
    assert max(model.sizes) == 32
    log.publish_many([upsert(1, f"Eta fact number {i}.", doc=f"t:h{i}.md") for i in range(80)])
    other = SqliteEventLog(tmp_path / "events.db")
    embedded_before: list[int] = []

    def revoke_as_the_first_call_starts() -> None:
        if not embedded_before:
            model.per_text_s = 0.001  # the machine got busy
            other.publish(acl(2, ("group:board",), doc="t:roadmap.md"))
            embedded_before.append(sum(model.sizes))

    def note_texts(event: Event) -> None:
        if event.kind is EventKind.ACL:
            journal.calls.append(f"texts:{sum(model.sizes)}")

    model.on_start = revoke_as_the_first_call_starts
    spy_applies(h, journal, note_texts)
    EmbeddedWorker(log, h["sink"]).drain()
    at_apply = next(int(c.split(":")[1]) for c in journal.calls if c.startswith("texts:"))
    assert at_apply - embedded_before[0] <= EMBED_FIRST_CALL, model.sizes
    assert texts(h["lexical"], "secret roadmap") == []
    assert h["vector"].count("acme") == h["lexical"].count("acme") == 1 + 64 + 80


class StartHook(SlowEmbedder):
    """The slow stand-in with a hook as each call starts (SlowEmbedder's `on_call` runs as it ends)."""

    def __init__(self, per_text_s: float) -> None:
        super().__init__(per_text_s)
        self.on_start: Any = None

    def embed(self, items: Any) -> Any:
        if self.on_start is not None:
            self.on_start()
        return super().embed(items)


class FlakyLog(SqliteEventLog):
    """A log whose poll of the ACL topic fails once, after `fail_after` polls of it (an I/O error)."""

    def __init__(self, path: Path, fail_after: int) -> None:
        super().__init__(path)
        self.fail_after = fail_after
        self.acl_polls = 0

    def poll(self, topic: str, group: str, max_records: int = 100, timeout_s: float = 0.0) -> Any:
        if topic == TOPIC_ACL:
            self.acl_polls += 1
            if self.acl_polls == self.fail_after:
                raise OSError("disk I/O error")
        return super().poll(topic, group, max_records, timeout_s)


def test_a_failure_between_rounds_loses_no_document_of_the_slice_in_hand(tmp_path: Path) -> None:
    """A slice is polled and embedded in one round and applied in the next: a failure in between
    (here the next revocation poll) must leave its documents to be polled again, not skipped by the
    documents topic's position and then acknowledged past."""
    journal = Journal()
    h = home(tmp_path, journal, embedder=FakeEmbedder())
    log = FlakyLog(tmp_path / "events.db", fail_after=0)
    log.publish_many([upsert(1, f"Secret plan number {i}.", doc=f"t:r{i}.md") for i in range(4)])
    EmbeddedWorker(log, h["sink"]).drain()
    log.publish_many([upsert(1, f"Theta fact number {i}.", doc=f"t:t{i}.md") for i in range(BACKLOG)])
    log.publish_many([acl(2, ("group:board",), doc=f"t:r{i}.md") for i in range(4)])
    # One ACL change a round: round 1 applies the first slice, round 2 fails to poll with the second in hand.
    log.acl_polls, log.fail_after = 0, 3
    worker = EmbeddedWorker(log, h["sink"], batch_size=1)
    errors = 0
    while True:
        try:
            if worker.step() == 0:
                break
        except OSError:
            errors += 1
    assert errors == 1
    assert log.lag(TOPIC_DOCUMENTS, GROUP) == log.lag(TOPIC_ACL, GROUP) == 0
    assert h["lexical"].count("acme") == h["vector"].count("acme") == 4 + BACKLOG
    assert len(texts(h["lexical"], "theta fact")) == 20 and texts(h["lexical"], "secret plan") == []


def test_a_rounds_removals_are_one_commit_per_file_and_durable_before_the_ack(tmp_path: Path) -> None:
    """Each deletion's embedding-cache removal, and its erasure from the log, was a commit of its own
    (an fsync each: 1.9 s for a round of 30 deletions on a busy disk). Now a round's removals commit
    once in the embedding cache, with the stores' flush, before the round is acknowledged (another
    process sees them gone by then), and its erasures commit with the offsets, once."""
    journal = Journal()
    model = CachedEmbedder(FakeEmbedder(), tmp_path / "embeddings.db")  # type: ignore[arg-type]
    h = home(tmp_path, journal, embedder=model)
    log: SqliteEventLog = h["log"]
    docs = [upsert(1, f"Iota fact number {i}.", doc=f"t:i{i}.md") for i in range(6)]
    log.publish_many(docs)
    EmbeddedWorker(log, h["sink"]).drain()
    keys = [embedding_key(model.model_name, f"Iota fact number {i}.") for i in range(6)]
    reader = sqlite3.connect(tmp_path / "embeddings.db")
    marks = ",".join("?" for _ in keys)

    def present() -> int:
        return int(reader.execute(f"SELECT count(*) FROM vectors WHERE key IN ({marks})", keys).fetchone()[0])

    assert present() == 6
    statements: list[str] = []
    model.cache._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    log.publish_many([delete(2, doc=f"t:i{i}.md") for i in range(6)])
    log_statements: list[str] = []
    log._conn.set_trace_callback(log_statements.append)
    acked: list[int] = []
    original = log.commit_applied

    def commit_applied(group: str, records: Any, entries: Any) -> None:
        acked.append(present())  # what another process sees as the round is acknowledged
        original(group, records, entries)

    log.commit_applied = commit_applied  # type: ignore[method-assign]
    EmbeddedWorker(log, h["sink"]).drain()
    writes = [s for s in statements if s.startswith(("BEGIN", "COMMIT", "DELETE"))]
    assert sum(1 for s in writes if s.startswith("DELETE")) == 6
    assert sum(1 for s in writes if s.startswith("COMMIT")) == 1 and writes[0].startswith("BEGIN"), writes
    assert acked == [0], "durable, for every process, before the deletions were acknowledged"
    erasures = [s for s in log_statements if s.startswith("UPDATE records SET value")]
    assert len(erasures) == 6, "each deletion's content left the log"
    assert sum(1 for s in log_statements if s.startswith("COMMIT")) == 1, "with the offsets, in one commit"
    assert log.lag(TOPIC_DELETIONS, GROUP) == 0 and h["lexical"].count("acme") == 0
    reader.close()
    assert texts(h["lexical"], "iota fact", STAFF) == []


def test_a_batch_gives_way_while_it_is_being_prepared(tmp_path: Path) -> None:
    """Chunking a batch of 256 documents before its first model call took seconds on the loaded
    machine, and a revocation waited for it: the preparation looks at `interrupt` too."""
    model = FakeEmbedder()
    h = home(tmp_path, Journal(), embedder=model)
    events = [upsert(1, f"Kappa fact number {i}.", doc=f"t:k{i}.md") for i in range(64)]
    with pytest.raises(Preempted):
        h["sink"].embed_upserts(events, lambda: True)
    assert model.calls == 0, "gave way before the model was called"
    assert h["sink"].embed_upserts(events, lambda: False).keys() == {e.event_id for e in events}
