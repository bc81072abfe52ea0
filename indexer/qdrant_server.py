"""Cluster vector index: a Qdrant server (or qdrant-client's local mode) through qdrant-client.

Same semantics as the embedded `indexer.qdrant_edge` adapter, through the server API: one
collection for all tenants, with `tenant` indexed as the tenant key (`is_tenant=True` lets the
server lay points out per tenant), and the permission filter passed with the query as a payload
filter, so the engine never scores a point the principal may not read. `score_threshold` is the
dense ranker's floor. Every write uses `wait=True`: it is applied and searchable when the call
returns, so a revocation is visible to the very next query.

Point IDs come from `indexer.payload.point_id` (a UUID per tenant and passage), the payload from
`indexer.payload.passage_to_doc`, exactly as in the embedded adapter.

The adapter owns the client it is given and closes it in `close()`.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator, Sequence
from datetime import datetime

from qdrant_client import QdrantClient, models

from indexer.payload import doc_to_passage, iso, passage_to_doc, point_id
from indexer.ports import Hit, Vectors
from schemas.passages import Passage
from schemas.principal import AccessFilter

_INDEXED_FIELDS: dict[str, models.PayloadSchemaType | models.KeywordIndexParams] = {
    "tenant": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    "doc_id": models.PayloadSchemaType.KEYWORD,
    "acl": models.PayloadSchemaType.KEYWORD,
    "version": models.PayloadSchemaType.INTEGER,
    "effective_from": models.PayloadSchemaType.DATETIME,
    "superseded_on": models.PayloadSchemaType.DATETIME,
}

_LOCAL_INDEX_WARNING = r"Payload indexes have no effect in the local Qdrant"
"""qdrant-client's local mode warns that it filters point by point; only its warning is silenced."""


def _match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _open_at(at: str) -> models.Filter:
    """No `superseded_on` (missing or null), or one strictly after the instant."""
    return models.Filter(
        should=[
            models.IsEmptyCondition(is_empty=models.PayloadField(key="superseded_on")),
            models.FieldCondition(key="superseded_on", range=models.DatetimeRange(gt=at)),
        ]
    )


def _doc_filter(tenant: str, doc_id: str, *extra: models.Condition) -> models.Filter:
    return models.Filter(must=[_match("tenant", tenant), _match("doc_id", doc_id), *extra])


def access_filter(access: AccessFilter) -> models.Filter:
    as_of = iso(access.as_of)
    return models.Filter(
        must=[
            _match("tenant", access.tenant),
            models.FieldCondition(key="acl", match=models.MatchAny(any=list(access.entries))),
            models.FieldCondition(key="effective_from", range=models.DatetimeRange(lte=as_of)),
            _open_at(as_of),
        ]
    )


class QdrantVectorIndex:
    name = "qdrant"

    def __init__(self, client: QdrantClient, dim: int, *, collection: str = "ragsync_passages") -> None:
        self._client = client
        self.dim = dim
        self.collection = collection
        options = client.init_options
        self.local = bool(options.get("path")) or options.get("location") == ":memory:"
        self._lock = threading.RLock()
        self._ensure_collection()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialise calls in local mode only: QdrantLocal is not thread-safe, the server client is."""
        if self.local:
            with self._lock:
                yield
        else:
            yield

    def _ensure_collection(self) -> None:
        """Create the cosine collection if missing; refuse one of another dimension."""
        if self._client.collection_exists(self.collection):
            info = self._client.get_collection(self.collection)
            params = info.config.params.vectors
            size = params.size if isinstance(params, models.VectorParams) else None
            if size is not None and size != self.dim:
                raise ValueError(f"collection {self.collection!r} has dimension {size}, the embedder {self.dim}")
        else:
            self._client.create_collection(
                self.collection,
                vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.COSINE),
            )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LOCAL_INDEX_WARNING, category=UserWarning)
            for field_name, schema in _INDEXED_FIELDS.items():
                self._client.create_payload_index(self.collection, field_name, field_schema=schema, wait=True)

    def upsert(self, passages: Sequence[Passage], vectors: Vectors) -> None:
        if not passages:
            return
        if len(passages) != len(vectors):
            raise ValueError("one vector per passage")
        points = [
            models.PointStruct(
                id=point_id(p.tenant, p.passage_id), vector=[float(x) for x in v], payload=passage_to_doc(p)
            )
            for p, v in zip(passages, vectors, strict=True)
        ]
        with self._guard():
            self._client.upsert(self.collection, points=points, wait=True)

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None:
        if not passage_ids:
            return
        selector = models.PointIdsList(points=[point_id(tenant, p) for p in passage_ids])
        with self._guard():
            self._client.delete(self.collection, points_selector=selector, wait=True)

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None:
        at = iso(superseded_on)
        flt = _doc_filter(
            tenant,
            doc_id,
            models.FieldCondition(key="version", range=models.Range(lt=before_version)),
            _open_at(at),
        )
        with self._guard():
            self._client.set_payload(self.collection, payload={"superseded_on": at}, points=flt, wait=True)

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str]) -> None:
        with self._guard():
            self._client.set_payload(
                self.collection, payload={"acl": list(acl)}, points=_doc_filter(tenant, doc_id), wait=True
            )

    def delete_doc(self, tenant: str, doc_id: str) -> None:
        selector = models.FilterSelector(filter=_doc_filter(tenant, doc_id))
        with self._guard():
            self._client.delete(self.collection, points_selector=selector, wait=True)

    def search(self, vector: Vectors, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        if not access.entries or limit <= 0:
            return []
        with self._guard():
            response = self._client.query_points(
                self.collection,
                query=[float(x) for x in vector.reshape(-1)],
                query_filter=access_filter(access),
                score_threshold=floor,
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return [Hit(passage=doc_to_passage(dict(p.payload or {})), score=float(p.score)) for p in response.points]

    def count(self, tenant: str, doc_id: str | None = None) -> int:
        must: list[models.Condition] = [_match("tenant", tenant)]
        if doc_id is not None:
            must.append(_match("doc_id", doc_id))
        with self._guard():
            result = self._client.count(self.collection, count_filter=models.Filter(must=must), exact=True)
        return int(result.count)

    def drop_all(self) -> None:
        """Delete the collection (tests)."""
        with self._guard():
            self._client.delete_collection(self.collection)

    def close(self) -> None:
        with self._guard():
            self._client.close()
