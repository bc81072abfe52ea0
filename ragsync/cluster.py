"""Cluster profile wiring: Kafka, Elasticsearch, Qdrant, Redis behind the same ports as embedded.

Each adapter is built from Settings only; the pattern follows `ragsync.wiring.build_embedded`.
Qdrant: a server when `qdrant_url` is set, otherwise qdrant-client's local mode under a path
(no server binary can be had on the development machines; local mode speaks the same API).
Modules are imported inside the function so the embedded profile never needs the cluster
libraries installed, and a half-built set of adapters is closed if a later one fails to start.
"""

from __future__ import annotations

import logging
from typing import Any

from indexer.embedder import CachedEmbedder
from ragsync.settings import Settings
from ragsync.wiring import Components, build_embedder

log = logging.getLogger(__name__)


def build_cluster(settings: Settings, *, with_embedder: bool = True) -> Components:
    from qdrant_client import QdrantClient

    from indexer.elastic import ElasticLexicalIndex
    from indexer.elastic_state import ElasticDeletionAudit, ElasticDocStates
    from indexer.qdrant_server import QdrantVectorIndex
    from indexer.redis_cache import RedisCache
    from streams.kafka_log import KafkaEventLog

    built: list[Any] = []

    def keep(component: Any) -> Any:
        built.append(component)
        return component

    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        embedder = keep(build_embedder(settings)) if with_embedder else None
        vector = None
        if embedder is not None:
            if settings.qdrant_url:
                client = QdrantClient(url=settings.qdrant_url)
            else:
                client = QdrantClient(path=str(settings.qdrant_path or settings.home / "qdrant-local"))
            vector = keep(QdrantVectorIndex(client, embedder.dim, collection=settings.qdrant_collection))
        prefix = settings.es_index_prefix
        lexical = keep(
            ElasticLexicalIndex(settings.es_url, prefix=prefix, k1=settings.es_bm25_k1, b=settings.es_bm25_b)
        )
        docs = keep(ElasticDocStates(settings.es_url, prefix=prefix))
        audit = keep(ElasticDeletionAudit(settings.es_url, prefix=prefix))
        cache = keep(RedisCache(settings.redis_url, namespace=settings.redis_namespace))
        events = keep(
            KafkaEventLog(
                settings.kafka_bootstrap,
                topic_prefix=settings.kafka_topic_prefix,
                partitions=settings.kafka_partitions,
            )
        )
    except BaseException:
        for component in reversed(built):
            close = getattr(component, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # best effort: the startup error is the one to report
                    log.debug("close after failed startup failed", exc_info=True)
        raise
    return Components(
        settings=settings,
        events=events,
        lexical=lexical,
        vector=vector,
        embedder=embedder,
        cache=cache,
        docs=docs,
        audit=audit,
        closers=[embedder] if isinstance(embedder, CachedEmbedder) else [],
    )
