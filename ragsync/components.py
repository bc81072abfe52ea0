"""The ports of one profile as one object, each adapter opened on first use: what every command,
the owner and the workers hold.

Adapters are opened on first use, never up front. A command therefore opens exactly the stores it
touches: a sync that only publishes opens the event log and nothing else, an `ask` opens the read
side, a worker the write side. That is what lets any number of syncs, askers and workers run at
once against servers, and what keeps a publisher from taking the embedded vector shard's lock.

Which adapter serves each port is the profile's `AdapterFactory` (ragsync.embedded,
ragsync.cluster); ragsync.wiring picks the profile. The settings are read here and in those
factories only: the adapters take plain arguments.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from connectors.extract import Extractor
from indexer.budget import Budget, ChildPool
from indexer.chunker import IsolatedChunker
from indexer.deny import DenySet
from indexer.embedder import load_embedder
from indexer.embedding_cache import CachedEmbedder
from indexer.ports import (
    Cache,
    DeletionAudit,
    DocStateStore,
    Embedder,
    EmbeddingCache,
    FieldWeights,
    LexicalIndex,
    VectorIndex,
)
from indexer.propagation import PropagationLog, PropagationRecord
from indexer.sink import IndexSink
from query.adapter import QueryAdapter
from query.ports import Model, ModelUnavailable, Reranker
from query.retrieval import RetrievalSettings, Retriever, passage_sentence_texts
from query.worker import QueryWorker, WorkerSettings
from ragsync.home_model import EMBEDDING_MODEL_STAMP as EMBEDDING_MODEL_STAMP  # re-export
from ragsync.home_model import stamp_home_model as stamp_home_model  # re-export
from ragsync.query_adapter import PACKAGED, load_adapter
from ragsync.settings import Settings
from ragsync.tokens import token_verifier
from streams.ports import EventLog
from streams.tracking import Tracker

if TYPE_CHECKING:
    from query.anthropic_model import AnthropicModel

log = logging.getLogger(__name__)


class AdapterFactory(Protocol):
    """How one profile opens each port's adapter; called at most once per port by Components."""

    def events(self) -> EventLog: ...

    def lexical(self) -> LexicalIndex: ...

    def embedder(self) -> Embedder | None: ...

    def vector(self, dim: int) -> VectorIndex: ...

    def cache(self) -> Cache: ...

    def docs(self) -> DocStateStore: ...

    def audit(self) -> DeletionAudit: ...

    def deny(self) -> DenySet: ...

    def propagation(self) -> PropagationLog: ...


class Components:
    """The ports of one profile, each adapter opened the first time it is used and closed by close()."""

    def __init__(self, settings: Settings, factory: AdapterFactory, *, with_embedder: bool = True) -> None:
        self.settings = settings
        self.factory = factory
        self.with_embedder = with_embedder
        self.closers: list[Any] = []
        self._opened: list[Any] = []

    def _open(self, adapter: Any) -> Any:
        if adapter is not None:
            self._opened.append(adapter)
        return adapter

    @cached_property
    def events(self) -> EventLog:
        return self._open(self.factory.events())  # type: ignore[no-any-return]

    @cached_property
    def lexical(self) -> LexicalIndex:
        return self._open(self.factory.lexical())  # type: ignore[no-any-return]

    @cached_property
    def embedder(self) -> Embedder | None:
        return self._open(self.factory.embedder()) if self.with_embedder else None  # type: ignore[no-any-return]

    @cached_property
    def vector(self) -> VectorIndex | None:
        embedder = self.embedder
        return self._open(self.factory.vector(embedder.dim)) if embedder is not None else None  # type: ignore[no-any-return]

    @cached_property
    def cache(self) -> Cache:
        return self._open(self.factory.cache())  # type: ignore[no-any-return]

    @cached_property
    def docs(self) -> DocStateStore:
        return self._open(self.factory.docs())  # type: ignore[no-any-return]

    @cached_property
    def audit(self) -> DeletionAudit:
        return self._open(self.factory.audit())  # type: ignore[no-any-return]

    @cached_property
    def deny(self) -> DenySet:
        return self._open(self.factory.deny())  # type: ignore[no-any-return]

    @cached_property
    def propagation(self) -> PropagationLog:
        return self._open(self.factory.propagation())  # type: ignore[no-any-return]

    @cached_property
    def children(self) -> ChildPool:
        """The processes that read documents within the budget (what reading one document may cost),
        shared by the scanner's extraction and the indexer's chunking: one interpreter start per process
        that needs one, kept for its life (serve keeps them warm)."""
        s = self.settings
        budget = Budget(
            timeout_s=s.extract_timeout_s,
            memory_bytes=s.extract_memory_mib * 1024 * 1024,
            inline_bytes=s.extract_in_process_kib * 1024,
            max_reply_bytes=128 * 1024 * 1024,  # passages may hold 8x a document's text
        )
        return self._open(ChildPool(budget))  # type: ignore[no-any-return]

    @cached_property
    def extractor(self) -> Extractor:
        return Extractor(pool=self.children)

    @cached_property
    def chunker(self) -> IsolatedChunker:
        return IsolatedChunker(pool=self.children)

    @cached_property
    def reranker(self) -> Reranker | None:
        """A configured cross-encoder, else the sentence reranker on the loaded embedder, else none."""
        from query.rerank import SentenceReranker, load_reranker

        if self.settings.rerank_depth <= 0:
            return None
        cross_encoder = load_reranker(self.settings.rerank_model_path)
        if cross_encoder is not None:
            return cross_encoder
        embedder = self.embedder
        return SentenceReranker(embedder) if embedder is not None else None

    def opened(self) -> list[str]:
        """Names of the ports opened so far (tests check that a command opened only what it needs)."""
        ports = ("events", "lexical", "embedder", "vector", "cache", "docs", "audit", "deny", "propagation")
        return [name for name in ports if name in self.__dict__ and self.__dict__[name] is not None]

    def sink(self) -> IndexSink:
        return IndexSink(
            self.lexical,
            self.vector,
            self.embedder,
            self.docs,
            self.audit,
            self.cache,
            max_chars=self.settings.chunk_max_chars,
            chunker=self.chunker,
            sentence_texts=passage_sentence_texts if self.settings.sentence_vectors else None,
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
                rerank_depth=s.rerank_depth,
                fusion_weight=s.rerank_fusion_weight,
                concurrent=s.concurrent_rankers,
                sentence_weight=s.sentence_weight,
                subquery_weight=s.subquery_weight,
            ),
            self.reranker,
            deny=self.deny,
            adapter=self._query_adapter(),
        )

    def _query_adapter(self) -> QueryAdapter | None:
        """The learned query adapter when its strength is above 0 and a model is loaded; a file that cannot
        be read or does not fit the model is an error, not a silent fallback."""
        s, embedder = self.settings, self.embedder
        if s.query_adapter_strength <= 0 or embedder is None:
            return None
        return load_adapter(s.query_adapter_path or PACKAGED, s.query_adapter_strength, embedder.dim)

    def tracker(self, observe: Callable[[PropagationRecord], None] | None = None) -> Tracker:
        """What a worker uses around revocations and deletions: deny first, record, confirm."""
        return Tracker(self.deny, self.propagation, observe=observe)

    def model(self) -> Model:
        if self.settings.model == "anthropic":
            return anthropic_model(self.settings)
        if self.settings.model == "openai":
            from ragsync.openai_model import openai_model_from_settings

            return openai_model_from_settings(self.settings)
        from query.extractive import ExtractiveModel

        return ExtractiveModel(self.embedder)

    def query_worker(self, model: Model | None = None) -> QueryWorker:
        s = self.settings
        return QueryWorker(
            self.retriever(),
            model or self.model(),
            token_verifier(s),
            WorkerSettings(
                abstain_when_first_search_empty=s.abstain_when_first_search_empty, max_searches=s.max_searches
            ),
        )

    def flush(self) -> None:
        """Make what was written through these ports durable, stores first and doc states last (the
        order IndexSink.flush keeps). The embedded worker flushes per batch; this is for the rest."""
        for name in ("vector", "lexical", "docs"):
            port = self.__dict__.get(name)
            if port is not None:
                port.flush()

    def close(self) -> None:
        """Flush (best effort), then close every adapter opened."""
        try:
            self.flush()
        except Exception:  # a store that cannot flush keeps its writes out; redelivery re-applies them
            log.warning("flush before close failed", exc_info=True)
        for closer in reversed([*self._opened, *self.closers]):
            try:
                closer.close()
            except Exception:  # closing is best effort; a failed close must not mask the real error
                log.debug("close failed", exc_info=True)
        self._opened.clear()
        self.closers.clear()


def field_weights(settings: Settings) -> FieldWeights:
    return FieldWeights(title=settings.bm25_title_weight, heading=settings.bm25_heading_weight)


def build_embedder(settings: Settings, cache: Callable[[], EmbeddingCache] | None = None) -> Embedder | None:
    """The model behind its embedding cache: `cache` opens the profile's shared one, else SQLite in the home."""
    inner = load_embedder(
        settings.embed_model_path,
        settings.embed_model_name,
        cache_dir=settings.embed_cache_dir,
        download=settings.embed_download,
        query_prefix=settings.embed_query_prefix,
        threads=settings.embed_threads,
        query_batch=settings.embed_query_batch,
    )
    if inner is None:
        return None
    return CachedEmbedder(inner, cache() if cache is not None else settings.home / "embeddings.db")


def anthropic_model(settings: Settings) -> AnthropicModel:
    """The key comes from ANTHROPIC_API_KEY only, so it never lands in a settings file or dump.

    A missing key fails here, at startup, rather than on the first question.
    """
    from query.anthropic_model import AnthropicModel

    api_key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not api_key:
        raise ModelUnavailable("ANTHROPIC_API_KEY is not set (RAGSYNC_MODEL=anthropic needs it)", retryable=False)
    return AnthropicModel.connect(
        settings.anthropic_model, api_key=api_key, base_url=settings.anthropic_base_url, citations=settings.citations
    )
