"""Cluster profile wiring: Kafka, Elasticsearch, Qdrant, Redis behind the same ports as embedded.

Each adapter is built from Settings only and opened lazily by `ragsync.components.Components`, so a
command touches only the services it needs (a publishing sync opens Kafka alone). Modules are
imported inside each method so the embedded profile never needs the cluster libraries installed.
Qdrant: the server at `qdrant_url` (default http://127.0.0.1:6333, what compose/local/services
starts). qdrant-client's local mode is only an explicit choice, `qdrant_url = "local"` or a
`qdrant_path` without a URL: it keeps the collection in a folder one process may open at a time,
so it cannot serve a worker and askers at once; errors say so.
"""

from __future__ import annotations

from pathlib import Path

from indexer.deny import DenySet
from indexer.ports import (
    Cache,
    DeletionAudit,
    DocStateStore,
    Embedder,
    EmbeddingCache,
    LexicalIndex,
    StoreUnavailable,
    VectorIndex,
)
from indexer.propagation import PropagationLog
from ragsync.components import Components, build_embedder, field_weights
from ragsync.home import secure_home
from ragsync.settings import Settings
from streams.ports import EventLog

DEFAULT_QDRANT_URL = "http://127.0.0.1:6333"
LOCAL = "local"


def qdrant_target(settings: Settings) -> str | Path:
    """The server URL to use, or the folder of an explicitly chosen local mode."""
    url = (settings.qdrant_url or "").strip()
    if url.lower() == LOCAL or (not url and settings.qdrant_path is not None):
        return settings.qdrant_path or settings.home / "qdrant-local"
    if settings.qdrant_path is not None:
        raise StoreUnavailable(
            f"qdrant_url={url!r} and qdrant_path are both set: a path is for local mode only"
            ' (qdrant_url = "local"); unset one of them'
        )
    return url or DEFAULT_QDRANT_URL


class ClusterAdapters:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        secure_home(settings.home)  # 0700, and every file created in it 0600

    def events(self) -> EventLog:
        """Kafka, reached within kafka_connect_timeout_s or a one-line KafkaUnavailable (a StoreUnavailable)."""
        from streams.kafka_log import KafkaEventLog

        s = self.settings
        return KafkaEventLog(
            s.kafka_bootstrap,
            topic_prefix=s.kafka_topic_prefix,
            partitions=s.kafka_partitions,
            connect_timeout_s=s.kafka_connect_timeout_s,
            delivery_timeout_s=s.kafka_delivery_timeout_s,
        )

    def lexical(self) -> LexicalIndex:
        from indexer.elastic import ElasticLexicalIndex

        s = self.settings
        return ElasticLexicalIndex(
            s.es_url,
            prefix=s.es_index_prefix,
            k1=s.es_bm25_k1,
            b=s.es_bm25_b,
            weights=field_weights(s),
            analyzer=s.lexical_analyzer,
        )

    def embedder(self) -> Embedder | None:
        """The model behind the Redis embedding cache: a text any worker embedded is never embedded again."""

        def shared() -> EmbeddingCache:
            from indexer.redis_embeddings import RedisEmbeddingCache

            return RedisEmbeddingCache(self.settings.redis_url, namespace=self.settings.redis_namespace)

        return build_embedder(self.settings, shared)

    def vector(self, dim: int) -> VectorIndex:
        from indexer.qdrant_server import QdrantVectorIndex, connect, open_local

        target = qdrant_target(self.settings)
        client = open_local(target) if isinstance(target, Path) else connect(target)
        return QdrantVectorIndex(
            client, dim, collection=self.settings.qdrant_collection, sentences=self.settings.sentence_vectors
        )

    def cache(self) -> Cache:
        from indexer.redis_cache import RedisCache

        return RedisCache(self.settings.redis_url, namespace=self.settings.redis_namespace)

    def docs(self) -> DocStateStore:
        from indexer.elastic_state import ElasticDocStates

        return ElasticDocStates(self.settings.es_url, prefix=self.settings.es_index_prefix)

    def audit(self) -> DeletionAudit:
        from indexer.elastic_audit import ElasticDeletionAudit

        return ElasticDeletionAudit(self.settings.es_url, prefix=self.settings.es_index_prefix)

    def deny(self) -> DenySet:
        from indexer.redis_deny import RedisDenySet

        return RedisDenySet(self.settings.redis_url, namespace=self.settings.redis_namespace)

    def propagation(self) -> PropagationLog:
        from indexer.elastic_propagation import ElasticPropagationLog

        return ElasticPropagationLog(self.settings.es_url, prefix=self.settings.es_index_prefix)


def build_cluster(settings: Settings, *, with_embedder: bool = True) -> Components:
    return Components(settings, ClusterAdapters(settings), with_embedder=with_embedder)
