"""The other cluster adapters around Elasticsearch: Redis cache policy, Qdrant server adapter
details, and `build_cluster` wiring against the real local services.

The cache and vector contracts cover behaviour shared with the embedded adapters; these cover
what is specific: Redis's failure policy (misses on get/set, never a stale generation, `bump`
raising), its key layout and TTLs, and the Qdrant adapter's collection checks.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import DIM, NOW, make_passage, require_service, unique, unit

from schemas.principal import AccessFilter

REDIS = "redis://127.0.0.1:6379/0"
DEAD_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1

pytestmark = pytest.mark.cluster


def test_redis_outage_degrades_reads_but_bump_raises() -> None:
    import redis

    from indexer.redis_cache import RedisCache

    cache = RedisCache(DEAD_REDIS, namespace=unique("t"))
    try:
        assert cache.get("ragsync:acme:k") is None
        cache.set("ragsync:acme:k", b"v", 30)  # no-op, no exception
        first, second = cache.generation("acme"), cache.generation("acme")
        assert first < 0 and second < 0 and first != second  # never a generation a stored key could have
        with pytest.raises(redis.exceptions.ConnectionError):
            cache.bump("acme")
    finally:
        cache.close()


def test_redis_key_layout_ttl_and_generations() -> None:
    require_service("redis")
    import redis

    from indexer.redis_cache import RedisCache

    namespace = unique("t")
    cache = RedisCache(REDIS, namespace=namespace)
    raw = redis.Redis.from_url(REDIS)
    try:
        cache.set("ragsync:acme:abc", b"payload", 30)
        assert raw.get(f"{namespace}:ragsync:acme:abc") == b"payload"
        assert 0 < int(raw.pttl(f"{namespace}:ragsync:acme:abc")) <= 30_000
        assert cache.generation("acme") == 0
        assert cache.bump("acme") == 1 and cache.bump("acme") == 2
        assert raw.get(f"{namespace}:gen:acme") == b"2"
        assert raw.pttl(f"{namespace}:gen:acme") == -1  # generations never expire
        other = RedisCache(REDIS, namespace=namespace)  # another worker sees the bump at once
        assert other.generation("acme") == 2 and other.generation("globex") == 0
        other.close()
        cache.drop_all()
        assert list(raw.scan_iter(match=f"{namespace}:*")) == []
    finally:
        cache.drop_all()
        cache.close()
        raw.close()


def test_qdrant_collection_dimension_is_checked_and_local_warning_silenced(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    client = QdrantClient(path=str(tmp_path / "q"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the local-mode payload-index warning must not escape
        index = QdrantVectorIndex(client, DIM, collection="c")
    assert index.local
    index.upsert([make_passage("x", anchor="x-1")], np.stack([unit(1, 0)]))
    with pytest.raises(ValueError, match="dimension"):
        QdrantVectorIndex(client, DIM * 2, collection="c")
    again = QdrantVectorIndex(client, DIM, collection="c")  # reopening keeps the points
    assert again.count("acme") == 1
    hits = again.search(unit(1, 0), AccessFilter("acme", ("group:staff",), NOW), 5, 0.0)
    assert [h.passage_id for h in hits] == ["doc.md@1#x-1"]
    index.close()


def test_build_cluster_wires_the_cluster_adapters(tmp_path: Path) -> None:
    for service in ("elasticsearch", "redis", "kafka", "qdrant"):
        require_service(service)
    from indexer.elastic import ElasticLexicalIndex
    from indexer.elastic_audit import ElasticDeletionAudit
    from indexer.elastic_state import ElasticDocStates
    from indexer.qdrant_server import QdrantVectorIndex
    from indexer.redis_cache import RedisCache
    from ragsync.cluster import build_cluster
    from ragsync.settings import Settings
    from streams.kafka_log import KafkaEventLog

    settings = Settings(
        profile="cluster",
        home=tmp_path / "home",
        kafka_topic_prefix=unique("t") + ".",
        es_bm25_k1=1.1,
        es_bm25_b=0.6,
        qdrant_collection=unique("wiring_"),
    )
    components = build_cluster(settings, with_embedder=settings.embed_model_path is not None)
    try:
        assert isinstance(components.events, KafkaEventLog)
        assert isinstance(components.lexical, ElasticLexicalIndex)
        assert (components.lexical.k1, components.lexical.b) == (1.1, 0.6)
        assert isinstance(components.cache, RedisCache)
        assert isinstance(components.docs, ElasticDocStates)
        assert isinstance(components.audit, ElasticDeletionAudit)
        if components.embedder is not None:
            assert isinstance(components.vector, QdrantVectorIndex)
            from indexer.embedding_cache import CachedEmbedder
            from indexer.redis_embeddings import RedisEmbeddingCache

            assert isinstance(components.embedder, CachedEmbedder)
            assert isinstance(components.embedder.cache, RedisEmbeddingCache), "workers share one embedding cache"
            assert not components.vector.local, "the cluster profile uses the Qdrant server by default"
            assert components.vector.dim == components.embedder.dim
            assert components.vector.collection == settings.qdrant_collection
            assert not (settings.home / "qdrant-local").exists()
            components.vector.drop_all()
        else:
            assert components.vector is None
    finally:
        components.close()
    without = build_cluster(settings, with_embedder=False)
    try:
        assert without.vector is None and without.embedder is None
    finally:
        without.close()
