"""The batched embedded write path: one flush per batch, offsets only after it, revocations first.

Real stores throughout (SQLite FTS5, qdrant-edge, SQLite state and log); failures are injected
by subclassing a real adapter, never by replacing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_indexing import STAFF, acl, texts, upsert

from indexer.cache import InProcessCache
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates, SqliteGenerations, StateDb
from streams.embedded_worker import GROUP, EmbeddedWorker
from streams.ports import TOPIC_ACL, TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog


class Journal:
    """Order of the operations that matter for durability, across stores and the log."""

    def __init__(self) -> None:
        self.calls: list[str] = []


class RecordingLexical(SqliteLexicalIndex):
    def __init__(self, path: Path, journal: Journal, fail_flush: int = 0) -> None:
        super().__init__(path, deferred=True)
        self.journal = journal
        self.fail_flush = fail_flush

    def flush(self) -> None:
        if self.fail_flush > 0:
            self.fail_flush -= 1
            raise OSError("disk full")
        self.journal.calls.append("lexical.flush")
        super().flush()


class RecordingLog(SqliteEventLog):
    def __init__(self, path: Path, journal: Journal) -> None:
        super().__init__(path)
        self.recorder = journal  # not `journal`: the port's own attribute (the log's applied journal)

    def commit_applied(self, group: str, records: Any, entries: Any) -> None:
        self.recorder.calls.append(f"commit:{len(records)}")
        super().commit_applied(group, records, entries)


class FakeEmbedder:
    """A deterministic stand-in for the model (no dense quality is tested here), with a hook per call."""

    model_name = "fake"
    dim = 8

    def __init__(self) -> None:
        self.calls = 0
        self.on_call: Any = None

    def embed(self, items: Any) -> np.ndarray:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)
        rows = np.ones((len(items), self.dim), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]  # type: ignore[no-any-return]

    def token_counts(self, texts: Any) -> list[int]:
        """The port's cost measure; characters will do for a stand-in."""
        return [len(t) for t in texts]

    cache = None
    """No embedding cache in front of it (the port's `cache`: None without one)."""

    def forget(self, texts: Any) -> tuple[int, list[bytes]]:
        """Holds no cache: nothing to forget (the port's answer without one)."""
        return 0, []

    def present(self, keys: Any) -> int:
        return 0


def home(tmp: Path, journal: Journal, *, fail_flush: int = 0, embedder: Any = None) -> dict[str, Any]:
    state = StateDb(tmp / "state.db", deferred=True)
    lexical = RecordingLexical(tmp / "lexical.db", journal, fail_flush)
    vector = EdgeVectorIndex(tmp / "vectors", FakeEmbedder.dim) if embedder is not None else None
    docs = SqliteDocStates(state)
    sink = IndexSink(
        lexical,
        vector,
        embedder,
        docs,
        SqliteDeletionAudit(state),
        InProcessCache(generations=SqliteGenerations(state)),
    )
    log = RecordingLog(tmp / "events.db", journal)
    return {"sink": sink, "lexical": lexical, "vector": vector, "docs": docs, "log": log, "state": state}


def test_one_flush_per_batch_and_offsets_only_after_it(tmp_path: Path) -> None:
    journal = Journal()
    h = home(tmp_path, journal)
    h["log"].publish_many([upsert(1, f"Alpha fact number {i}.", doc=f"t:d{i}.md") for i in range(10)])
    stats = EmbeddedWorker(h["log"], h["sink"], documents_batch_size=4).drain()
    assert stats.applied == 10
    assert journal.calls == ["lexical.flush", "commit:4"] * 2 + ["lexical.flush", "commit:2"]
    entries = h["log"].applied(GROUP, TOPIC_DOCUMENTS, 0, 100)
    assert [e.offset for e in entries] == list(range(10))
    assert {e.outcome for e in entries} == {"applied"} and all(e.passages_written == 1 for e in entries)


def test_a_failed_flush_acknowledges_nothing_and_state_never_runs_ahead(tmp_path: Path) -> None:
    journal = Journal()
    h = home(tmp_path, journal, fail_flush=1)
    h["log"].publish_many([upsert(1, f"Beta fact number {i}.", doc=f"t:d{i}.md") for i in range(3)])
    with pytest.raises(OSError, match="disk full"):
        EmbeddedWorker(h["log"], h["sink"], max_retries=0).drain()
    assert h["log"].lag(TOPIC_DOCUMENTS, GROUP) == 3, "nothing committed"
    assert h["docs"].get("acme", "t:d0.md") is None, "the batch's states were discarded with the failed flush"
    # Restart on the same files: everything is applied again, once.
    stats = EmbeddedWorker(h["log"], h["sink"]).drain()
    assert stats.applied == 3 and h["log"].lag(TOPIC_DOCUMENTS, GROUP) == 0
    assert h["lexical"].count("acme") == 3


def test_unflushed_writes_are_not_durable_and_flushed_ones_are(tmp_path: Path) -> None:
    from conftest import make_passage

    lexical = SqliteLexicalIndex(tmp_path / "lex.db", deferred=True)
    lexical.upsert([make_passage("kept after flush", anchor="a-1")])
    lexical.flush()
    lexical.upsert([make_passage("lost without flush", anchor="b-1")])
    assert lexical.count("acme") == 2, "visible at once to the writer's own searches"
    lexical.close()
    reopened = SqliteLexicalIndex(tmp_path / "lex.db", deferred=True)
    assert [h.passage.text for h in reopened.search("flush", STAFF, 10, 0.0)] == ["kept after flush"]
    reopened.close()


def test_background_merge_finishes(tmp_path: Path) -> None:
    from conftest import make_passage

    lexical = SqliteLexicalIndex(tmp_path / "lex.db", deferred=True)
    for i in range(40):  # one segment per flushed batch
        lexical.upsert([make_passage(f"segment text {i}", anchor=f"s{i}-1", doc_id=f"t:d{i}.md")])
        lexical.flush()
    steps = 0
    while lexical.merge_step(pages=64):
        steps += 1
        assert steps < 1000
    assert steps >= 1, "forty segments left something to merge"
    assert len(lexical.search("segment text", STAFF, 100, 0.0)) == 40
    lexical.close()


def test_upserts_being_embedded_give_way_to_a_revocation(tmp_path: Path) -> None:
    """A revocation published while a large upsert batch embeds is applied before that batch."""
    journal = Journal()
    embedder = FakeEmbedder()
    h = home(tmp_path, journal, embedder=embedder)
    log: SqliteEventLog = h["log"]
    log.publish(upsert(1, "Secret roadmap for the next year.", doc="t:roadmap.md"))
    EmbeddedWorker(log, h["sink"]).drain()
    # 80 documents of 1 passage: three embedding calls of 32 texts.
    log.publish_many([upsert(1, f"Gamma fact number {i}.", doc=f"t:g{i}.md") for i in range(80)])
    other = SqliteEventLog(tmp_path / "events.db")  # another process's publisher
    order: list[str] = []

    def revoke_during_first_call(call: int) -> None:
        if call == 2:
            other.publish(acl(2, ("group:board",), doc="t:roadmap.md"))
            order.append("revocation published")

    embedder.on_call = revoke_during_first_call
    original = h["sink"].apply

    def spy(event: Any, *args: Any) -> Any:
        order.append(event.kind.value)
        return original(event, *args)

    h["sink"].apply = spy
    worker = EmbeddedWorker(log, h["sink"])
    stats = worker.drain()
    assert order[:2] == ["revocation published", "acl"], "the ACL change went before any of the 80 upserts"
    assert worker.preemptions >= 1 and stats.applied == 81
    assert texts(h["lexical"], "secret roadmap") == []
    assert log.lag(TOPIC_ACL, GROUP) == 0 and log.lag(TOPIC_DOCUMENTS, GROUP) == 0
    assert h["vector"].count("acme") == h["lexical"].count("acme") == 81


class SlowEmbedder(FakeEmbedder):
    """The model on a contended CPU: every text costs `per_text_s` of wall time; notes each call's size."""

    def __init__(self, per_text_s: float) -> None:
        super().__init__()
        self.per_text_s = per_text_s
        self.sizes: list[int] = []

    def embed(self, items: Any) -> np.ndarray:
        import time

        self.sizes.append(len(items))
        time.sleep(self.per_text_s * len(items))
        return super().embed(items)


def test_embedding_calls_shrink_to_the_budget_when_the_model_is_slow(tmp_path: Path) -> None:
    """A revocation waits for the embedding call in progress: on a busy machine one call of 32 texts
    took seconds. Once a call shows the pace, the next ones hold only what fits the budget, and every
    text is still embedded exactly once; a fast model keeps full calls."""
    from indexer.sink import EMBED_CALL_BUDGET_S, EMBED_FIRST_CALL

    slow = SlowEmbedder(per_text_s=0.025)
    h = home(tmp_path / "slow", Journal(), embedder=slow)
    log: SqliteEventLog = h["log"]
    log.publish_many([upsert(1, f"Delta fact number {i}.", doc=f"t:d{i}.md") for i in range(80)])
    EmbeddedWorker(log, h["sink"]).drain()
    assert slow.sizes[0] == EMBED_FIRST_CALL, "a pass starts small, whatever pace was learnt before"
    fits = int(EMBED_CALL_BUDGET_S / slow.per_text_s)
    assert slow.sizes[1:] and max(slow.sizes[1:]) <= fits, slow.sizes
    assert sum(slow.sizes) == 80 and h["vector"].count("acme") == 80

    fast = SlowEmbedder(per_text_s=0.0)
    h = home(tmp_path / "fast", Journal(), embedder=fast)
    h["log"].publish_many([upsert(1, f"Delta fact number {i}.", doc=f"t:d{i}.md") for i in range(80)])
    EmbeddedWorker(h["log"], h["sink"]).drain()
    # Embedded a slice of EMBED_AHEAD_DOCS (32) documents ahead of the apply: full calls inside each
    # slice, the first one short, the later slices resuming at the pace learnt.
    assert fast.sizes == [EMBED_FIRST_CALL, 32 - EMBED_FIRST_CALL, 32, 80 - 64]


def test_sub_batch_size_fits_the_budget_between_one_and_the_model_batch() -> None:
    from indexer.sink import EMBED_CALL_BUDGET_S, EMBED_SUB_BATCH, sub_batch_size

    assert sub_batch_size(32, 0.01) == EMBED_SUB_BATCH
    assert sub_batch_size(32, 3.2) == max(1, int(EMBED_CALL_BUDGET_S * 10))
    assert sub_batch_size(4, 100.0) == 1
    assert sub_batch_size(0, 0.0) == EMBED_SUB_BATCH
