"""Profile wiring: which adapter serves each port. The only module that knows both profiles.

embedded: SQLite log, SQLite FTS5, qdrant-edge, in-process cache (generations in SQLite),
          extractive model; everything under RAGSYNC_HOME, no servers.
cluster:  Kafka, Elasticsearch, Qdrant (server, or qdrant-client local mode with a path),
          Redis, Anthropic; see ragsync/cluster.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from indexer.cache import InProcessCache
from indexer.embedder import CachedEmbedder, load_embedder
from indexer.ports import Cache, DeletionAudit, DocStateStore, Embedder, LexicalIndex, VectorIndex
from indexer.sink import IndexSink
from query.ports import Model
from query.retrieval import RetrievalSettings, Retriever
from query.worker import QueryWorker, WorkerSettings
from ragsync.settings import Settings
from streams.ports import EventLog

log = logging.getLogger(__name__)


@dataclass
class Components:
    settings: Settings
    events: EventLog
    lexical: LexicalIndex
    vector: VectorIndex | None
    embedder: Embedder | None
    cache: Cache
    docs: DocStateStore
    audit: DeletionAudit
    closers: list[Any] = field(default_factory=list)

    def sink(self) -> IndexSink:
        return IndexSink(
            self.lexical,
            self.vector,
            self.embedder,
            self.docs,
            self.audit,
            self.cache,
            max_chars=self.settings.chunk_max_chars,
        )

    def retriever(self) -> Retriever:
        s = self.settings
        return Retriever(
            self.lexical,
            self.vector,
            self.embedder,
            self.cache,
            RetrievalSettings(
                k=s.top_k,
                candidates=s.candidates,
                bm25_floor=s.bm25_floor,
                dense_floor=s.dense_floor,
                rrf_k=s.rrf_k,
                cache_ttl_s=s.cache_ttl_s,
            ),
        )

    def model(self) -> Model:
        if self.settings.model == "anthropic":
            from query.anthropic_model import AnthropicModel

            return AnthropicModel.from_settings(self.settings)
        from query.extractive import ExtractiveModel

        return ExtractiveModel()

    def query_worker(self, model: Model | None = None) -> QueryWorker:
        s = self.settings
        return QueryWorker(
            self.retriever(),
            model or self.model(),
            s.secret(),
            WorkerSettings(
                abstain_when_first_search_empty=s.abstain_when_first_search_empty, max_searches=s.max_searches
            ),
        )

    def close(self) -> None:
        for closer in reversed(
            [self.events, self.lexical, self.vector, self.cache, self.docs, self.audit, *self.closers]
        ):
            if closer is not None:
                try:
                    closer.close()
                except Exception:  # closing is best effort; a failed close must not mask the real error
                    log.debug("close failed", exc_info=True)


def build_embedder(settings: Settings) -> Embedder | None:
    inner = load_embedder(settings.embed_model_path, settings.embed_model_name)
    if inner is None:
        return None
    return CachedEmbedder(inner, settings.home / "embeddings.db")


def build_embedded(settings: Settings, *, with_embedder: bool = True) -> Components:
    from indexer.qdrant_edge import EdgeVectorIndex
    from indexer.sqlite_fts import SqliteLexicalIndex
    from indexer.state import SqliteDeletionAudit, SqliteDocStates, SqliteGenerations
    from streams.sqlite_log import SqliteEventLog

    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    embedder = build_embedder(settings) if with_embedder else None
    vector = EdgeVectorIndex(home / "vectors", embedder.dim) if embedder is not None else None
    generations = SqliteGenerations(home / "state.db")
    return Components(
        settings=settings,
        events=SqliteEventLog(home / "events.db"),
        lexical=SqliteLexicalIndex(home / "lexical.db"),
        vector=vector,
        embedder=embedder,
        cache=InProcessCache(generations=generations),
        docs=SqliteDocStates(home / "state.db"),
        audit=SqliteDeletionAudit(home / "state.db"),
        closers=[embedder] if isinstance(embedder, CachedEmbedder) else [],
    )


def build(settings: Settings, *, with_embedder: bool = True) -> Components:
    if settings.profile == "cluster":
        from ragsync.cluster import build_cluster

        return build_cluster(settings, with_embedder=with_embedder)
    return build_embedded(settings, with_embedder=with_embedder)
