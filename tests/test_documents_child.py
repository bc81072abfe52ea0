"""The cluster worker's documents child (indexer.documents_child): chunking and the model in a niced child
process, the stores written by the worker. Killed mid-document, the event is retried and applied, never
acknowledged before; a document that kills every child is dead-lettered, not retried forever. Real SQLite
and qdrant-edge stores, the real model in a real child, the Faust worker's applier (streams.appliers)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from conftest import MODEL_PATH
from test_indexing import STAFF, upsert

from indexer.budget import Budget
from indexer.cache import InProcessCache
from indexer.chunker import IsolatedChunker, chunk_document
from indexer.documents_child import ChildDied, ChildEmbedder, DocumentsChild, ModelSpec, _embed
from indexer.embedding_cache import CachedEmbedder
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from schemas.events import Event
from streams.appliers import Indexer
from streams.ports import Record, topic_for

T = TypeVar("T")

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no model at {MODEL_PATH}")

PASSAGES = 150
DOC = "\n\n".join(
    f"# Section {i}\n\n" + f"Paragraph {i} of the travel policy, on trains. " * 12 for i in range(PASSAGES)
)
"""A document of PASSAGES passages: its embedding takes a second or more, so a kill 0.1 s in lands during it."""


class Killing(DocumentsChild):
    """Kills its child with SIGKILL while the next `kills` embedding calls are in flight."""

    def __init__(self, *args: Any, kills: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kills = kills
        self.embed_calls = 0

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        if fn is _embed:
            self.embed_calls += 1
            if self.kills > 0:
                self.kills -= 1
                pid, _ = self.identity()
                threading.Timer(0.1, os.kill, (pid, signal.SIGKILL)).start()
        return super().call(fn, *args)


def record(event: Event, offset: int = 0) -> Record:
    return Record(topic_for(event), 0, offset, event.key, event.model_dump_json().encode(), int(time.time() * 1000))


def world(tmp_path: Path, child: DocumentsChild) -> tuple[Indexer, IndexSink, CachedEmbedder]:
    inner = ChildEmbedder.start(child)
    assert inner is not None
    embedder = CachedEmbedder(inner, tmp_path / "emb.db")
    chunker = IsolatedChunker(Budget(), inline=child.chunk)
    sink = IndexSink(
        SqliteLexicalIndex(tmp_path / "lex.db"),
        EdgeVectorIndex(tmp_path / "vec", embedder.dim),
        embedder,
        SqliteDocStates(tmp_path / "s.db"),
        SqliteDeletionAudit(tmp_path / "s.db"),
        InProcessCache(),
        chunker=chunker,
    )
    return Indexer(sink, backoff_s=0.01, max_backoff_s=0.05), sink, embedder


@pytest.fixture
def spec() -> ModelSpec:
    return ModelSpec(MODEL_PATH)


@pytest.fixture
def killing(spec: ModelSpec) -> Iterator[Killing]:
    child = Killing(spec, nice=5)
    yield child
    child.close()


def test_the_child_is_niced_and_embeds_as_this_process_does(spec: ModelSpec, embedder: Any) -> None:
    child = DocumentsChild(spec, nice=5)
    try:
        inner = ChildEmbedder.start(child)
        assert inner is not None and inner.model_name == embedder.model_name and inner.dim == embedder.dim
        pid, niceness = child.identity()
        assert pid != os.getpid()
        assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
        texts = ["Train tickets are booked by the office manager.", "Lunch is served at noon."]
        assert np.allclose(inner.embed(texts), embedder.embed(texts), atol=1e-6)
        assert inner.token_counts(texts) == embedder.token_counts(texts)
        assert child.chunk(DOC, "markdown", max_chars=1000, title="") == chunk_document(DOC, "markdown")
    finally:
        child.close()


def test_a_child_killed_mid_document_fails_the_call_and_the_next_starts_another(killing: Killing) -> None:
    inner = ChildEmbedder.start(killing)
    assert inner is not None
    before, _ = killing.identity()
    with pytest.raises(ChildDied):
        inner.embed([DOC] * 4)
    assert inner.embed(["again"]).shape == (1, inner.dim)
    after, _ = killing.identity()
    assert after != before and killing.started == 2


def test_a_document_whose_child_was_killed_is_applied_by_the_retry(tmp_path: Path, killing: Killing) -> None:
    indexer, sink, embedder = world(tmp_path, killing)
    event = upsert(1, DOC)
    assert asyncio.run(indexer.apply(record(event))) is None, "applied, not dead-lettered"
    assert killing.started == 2 and killing.embed_calls == 2, "killed during the first try, applied by the second"
    state = sink.docs.get("acme", "t:p.md")
    assert state is not None and state.content_version == 1 and len(state.passage_ids) == PASSAGES
    assert sink.vector is not None and sink.vector.count("acme") == PASSAGES
    hits = sink.vector.search(embedder.embed_query("paragraph 7 of the travel policy"), STAFF, PASSAGES, 0.0)
    assert {h.passage_id for h in hits} == set(state.passage_ids)
    assert indexer.stats["documents"].applied == 1


def test_a_document_that_kills_every_child_is_dead_lettered(tmp_path: Path, spec: ModelSpec) -> None:
    child = Killing(spec, nice=5, kills=99, max_deaths=1)
    try:
        indexer, sink, _ = world(tmp_path, child)
        reason = asyncio.run(indexer.apply(record(upsert(1, DOC))))
        assert reason is not None and "died 2 times in a row" in reason
        assert sink.docs.get("acme", "t:p.md") is None, "nothing of it was written"
        assert indexer.stats["documents"].dead_lettered == 1
    finally:
        child.close()


def test_the_wiring_puts_the_child_behind_the_cache_and_the_chunker(tmp_path: Path, spec: ModelSpec) -> None:
    from ragsync.settings import Settings
    from ragsync.wiring import build

    settings = Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH)
    child = DocumentsChild(spec, nice=5)
    components = build(settings, documents_child=child)
    try:
        assert components.chunker.inline == child.chunk
        embedder = components.embedder
        assert isinstance(embedder, CachedEmbedder) and isinstance(embedder._inner, ChildEmbedder)
        assert child.started == 1
        assert build(settings).chunker.inline is not child.chunk, "without a child: in-process"
    finally:
        components.close()
        child.close()
