"""Cluster profile wiring: Kafka, Elasticsearch, Qdrant, Redis behind the same ports as embedded.

Each adapter is built from Settings only and opened lazily by `ragsync.wiring.Components`, so a
command touches only the services it needs (a publishing sync opens Kafka alone). Modules are
imported inside each method so the embedded profile never needs the cluster libraries installed.
Qdrant: a server when `qdrant_url` is set, otherwise qdrant-client's local mode under a path.
"""

from __future__ import annotations

from indexer.ports import Cache, DeletionAudit, DocStateStore, Embedder, LexicalIndex, VectorIndex
from ragsync.settings import Settings
from ragsync.wiring import Components, build_embedder
from streams.ports import EventLog


class ClusterAdapters:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.home.mkdir(parents=True, exist_ok=True)

    def events(self) -> EventLog:
        from streams.kafka_log import KafkaEventLog

        s = self.settings
        return KafkaEventLog(s.kafka_bootstrap, topic_prefix=s.kafka_topic_prefix, partitions=s.kafka_partitions)

    def lexical(self) -> LexicalIndex:
        from indexer.elastic import ElasticLexicalIndex

        s = self.settings
        return ElasticLexicalIndex(s.es_url, prefix=s.es_index_prefix, k1=s.es_bm25_k1, b=s.es_bm25_b)

    def embedder(self) -> Embedder | None:
        return build_embedder(self.settings)

    def vector(self, dim: int) -> VectorIndex:
        from qdrant_client import QdrantClient

        from indexer.qdrant_server import QdrantVectorIndex

        s = self.settings
        if s.qdrant_url:
            client = QdrantClient(url=s.qdrant_url)
        else:
            client = QdrantClient(path=str(s.qdrant_path or s.home / "qdrant-local"))
        return QdrantVectorIndex(client, dim, collection=s.qdrant_collection)

    def cache(self) -> Cache:
        from indexer.redis_cache import RedisCache

        return RedisCache(self.settings.redis_url, namespace=self.settings.redis_namespace)

    def docs(self) -> DocStateStore:
        from indexer.elastic_state import ElasticDocStates

        return ElasticDocStates(self.settings.es_url, prefix=self.settings.es_index_prefix)

    def audit(self) -> DeletionAudit:
        from indexer.elastic_state import ElasticDeletionAudit

        return ElasticDeletionAudit(self.settings.es_url, prefix=self.settings.es_index_prefix)


def build_cluster(settings: Settings, *, with_embedder: bool = True) -> Components:
    return Components(settings, ClusterAdapters(settings), with_embedder=with_embedder)
