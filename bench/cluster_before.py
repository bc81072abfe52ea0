"""The cluster's dense half as main 1fb722c ran it, beside this build's in one process (`dense-before`,
`fused-before` rows of bench/retrieval_scale.py), on the same stores and queries.

Before: qdrant-client's own defaults for a server on this host (a new TCP connection per request,
answers gzipped) and its `query_points` (the inference inspector on every call), and a Retriever whose
dense half reads back every hit from Elasticsearch, also those the BM25 half of the same search returned.
"""

from __future__ import annotations

from typing import Any

from qdrant_client import QdrantClient, models

from indexer.ports import Hit
from indexer.qdrant_server import QdrantVectorIndex
from query.retrieval import Retriever
from schemas.principal import AccessFilter


class BeforeQdrant(QdrantVectorIndex):
    """`QdrantVectorIndex` searching through `QdrantClient.query_points`, as on main."""

    def _query(
        self, query: Any, using: str | None, flt: models.Filter, limit: int, floor: float
    ) -> list[models.ScoredPoint]:
        response = self._client.query_points(
            self.collection,
            query=query,
            using=using,
            query_filter=flt,
            score_threshold=floor,
            limit=limit,
            with_payload=True,
            with_vectors=False,
        )
        return list(response.points)


def before_vector(url: str, dim: int, collection: str) -> BeforeQdrant:
    """On a client made as main's `connect` made it (qdrant-client's defaults: keep-alive off locally)."""
    return BeforeQdrant(QdrantClient(url=url, timeout=30, check_compatibility=False), dim, collection=collection)


class BeforeRetriever(Retriever):
    """Every dense hit read back (main): the BM25 half's passages are not handed to the dense half."""

    def dense_hits(
        self,
        query: str,
        access: AccessFilter,
        limit: int | None = None,
        floor: float | None = None,
        lexical: Any = None,
    ) -> list[Hit]:
        return super().dense_hits(query, access, limit, floor, None)
