"""Cluster vector index: a Qdrant server through qdrant-client (or its local mode, one process only).

Layout: one collection for every tenant, the Qdrant way to do multitenancy. `tenant` is a keyword
payload index with `is_tenant=True`, so the server stores each tenant's points together and plans
tenant-filtered searches over that tenant's points alone; `acl` and `doc_id` are keyword indexes;
`effective_from` and `superseded_on` are datetime indexes. The permission filter (tenant, ACL
entries, validity at the as-of instant) travels inside `query_points`, so the engine never scores a
point the principal may not read, and `score_threshold` is the dense ranker's floor.

Why one collection rather than a collection per tenant: tenants here are many and uneven (a few
large, a long tail of small ones). Every collection costs the server its own segments, WAL,
optimizer threads and HNSW graph, and a new tenant would mean creating a collection (and its
indexes) on the write path; Qdrant's guidance is one collection partitioned by a tenant key unless
tenants need different vector configurations or hard resource isolation. A tenant is still never
searched without its filter: `access_filter` always starts with the tenant condition, and a point
ID is a UUID of (tenant, passage) so two tenants never share one.

Writes: every write passes `wait=True`, so it is applied (and visible to the next search) when the
call returns. For revocations and deletions that is the promise itself; for upserts it is what
lets the sink record a document as applied only once every store shows it. ACL changes are
payload-only (`set_payload` by filter on tenant+doc_id): the vectors are never re-uploaded.

Sentence vectors (`sentences=True`, VectorIndex.sentence_vectors): a named max-sim multivector beside
the unnamed passage vector on the same point, so every write above reaches them in the same request.

Connecting and the version check (`connect`, `open_local`): indexer.qdrant_connect.

The adapter owns the client it is given and closes it in `close()`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx
import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from indexer.combine import Combiner
from indexer.payload import granted_as_of, iso, passage_to_point, point_id, point_to_hit, since_ms, stored_passage
from indexer.ports import (
    MAX_SENTENCE_VECTORS,
    SENTENCE_VECTOR,
    Durability,
    StoredPassage,
    VectorHit,
    Vectors,
)
from indexer.qdrant_connect import LOCAL_MODE_NOTE as LOCAL_MODE_NOTE  # re-export (indexer.qdrant_connect)
from indexer.qdrant_connect import QdrantUnavailable as QdrantUnavailable  # re-export
from indexer.qdrant_connect import client_version as client_version  # re-export
from indexer.qdrant_connect import compatible as compatible  # re-export
from indexer.qdrant_connect import connect as connect  # re-export
from indexer.qdrant_connect import open_local as open_local  # re-export
from indexer.qdrant_connect import rest_query
from indexer.qdrant_connect import version_problem as version_problem  # re-export
from schemas._time import to_epoch_ms
from schemas.passages import Passage
from schemas.principal import AccessFilter, since_key

log = logging.getLogger(__name__)

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


def _chunks(sizes: Sequence[int], budget: int) -> Iterator[tuple[int, int]]:
    """(start, end) runs of points whose vectors (`sizes`, in vectors of the collection's dimension) stay
    within `budget` vectors per request; a point larger than the budget goes alone."""
    start, used = 0, 0
    for i, size in enumerate(sizes):
        if i > start and used + size > max(1, budget):
            yield start, i
            start, used = i, 0
        used += size
    if start < len(sizes):
        yield start, len(sizes)


UPSERT_FLOATS = 400_000
"""Vector components per upsert request (1,041 points of 384). The server refuses a JSON body over
32 MB and a component takes up to ~20 bytes as JSON (a point of 384 with its payload: ~8 KB), so one
request for a document of ~4,000 passages or more was refused (HTTP 400) and the document could never
be indexed on the cluster profile; a request now stays near 8 MB whatever the dimension."""


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


def access_filter(access: AccessFilter, *, instants: bool = True) -> models.Filter:
    """Tenant, validity and an entry granted as of the instant (schemas.principal.grants_allow): an
    entry matches unless its grant instant (`acl_since.<key>`, absent: from the beginning) is later.

    `instants=False` leaves the grant instants out, so every condition left is on an indexed field:
    the instants are keyed by entry (no payload index can hold them) and Qdrant reads each candidate
    point's payload to check them (`granted_as_of` checks them on the hits instead: QdrantVectorIndex.search)."""
    as_of = iso(access.as_of)
    must: list[models.Condition] = [
        _match("tenant", access.tenant),
        models.FieldCondition(key="acl", match=models.MatchAny(any=list(access.entries))),
        models.FieldCondition(key="effective_from", range=models.DatetimeRange(lte=as_of)),
        _open_at(as_of),
    ]
    if instants:
        as_of_ms = float(to_epoch_ms(access.as_of))
        granted: list[models.Condition] = [
            models.Filter(
                must=[_match("acl", entry)],
                must_not=[models.FieldCondition(key=f"acl_since.{since_key(entry)}", range=models.Range(gt=as_of_ms))],
            )
            for entry in access.entries
        ]
        must.append(models.Filter(should=granted))
    return models.Filter(must=must)


VACUUM = models.OptimizersConfigDiff(deleted_threshold=0.0, vacuum_min_vector_number=100)
"""The server vacuums a segment as soon as it holds a deleted point (100 is the smallest segment the
server accepts for vacuuming; the defaults wait for 20 % deleted in segments of 1000+ vectors)."""

PURGE_TIMEOUT_S = 30.0


class QdrantVectorIndex:
    name = "qdrant"
    combines_writes = True  # set_acl, delete_doc (indexer.combine)

    def __init__(
        self, client: QdrantClient, dim: int, *, collection: str = "ragsync_passages", sentences: bool = False
    ) -> None:
        self._client = client
        self.sentence_vectors = sentences
        """Asked for, and the collection has the sentence multivector (a collection created without it keeps
        none: adding a named vector to it is not done here, so the list stays off until it is re-created)."""
        self.dim = dim
        self.collection = collection
        options = client.init_options
        self.local = bool(options.get("path")) or options.get("location") == ":memory:"
        # The server acknowledges a `wait=True` write once its WAL holds it; local mode makes no such promise.
        self.durability: Durability = "flush" if self.local else "write"
        self._lock = threading.RLock()
        self._ensure_collection()
        # The ACL changes and deletions of concurrent appliers share one request (indexer.combine).
        self._writes: Combiner[models.SetPayloadOperation | models.DeleteOperation] = Combiner(
            self._batch, name="ragsync-qdrant-writes"
        )

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
        passage = models.VectorParams(size=self.dim, distance=models.Distance.COSINE)
        if not self._client.collection_exists(self.collection):
            config: models.VectorParams | dict[str, models.VectorParams] = passage
            if self.sentence_vectors:
                max_sim = models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)
                sentence = models.VectorParams(
                    size=self.dim, distance=models.Distance.COSINE, multivector_config=max_sim
                )
                config = {"": passage, SENTENCE_VECTOR: sentence}
            with contextlib.suppress(Exception):  # another worker may create it at the same moment
                self._client.create_collection(self.collection, vectors_config=config, optimizers_config=VACUUM)
            if not self._client.collection_exists(self.collection):
                raise QdrantUnavailable(f"could not create the Qdrant collection {self.collection!r}")
        params = self._client.get_collection(self.collection).config.params.vectors
        named = params if isinstance(params, dict) else {"": params} if params is not None else {}
        size = named[""].size if "" in named else None
        if size is not None and size != self.dim:
            raise ValueError(f"collection {self.collection!r} has dimension {size}, the embedder {self.dim}")
        self._layout = SENTENCE_VECTOR in named
        if self.sentence_vectors and not self._layout:
            log.warning(
                "Qdrant collection %r has no sentence vectors (created before sentence_vectors was on):"
                " the sentence list stays off until it is re-created and re-synced",
                self.collection,
            )
            self.sentence_vectors = False
        if not self.local:
            optimizer = self._client.get_collection(self.collection).config.optimizer_config
            if (optimizer.deleted_threshold, optimizer.vacuum_min_vector_number) != (
                VACUUM.deleted_threshold,
                VACUUM.vacuum_min_vector_number,
            ):
                self._client.update_collection(self.collection, optimizers_config=VACUUM)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_LOCAL_INDEX_WARNING, category=UserWarning)
            existing = self._client.get_collection(self.collection).payload_schema
            for field_name, schema in _INDEXED_FIELDS.items():
                if field_name not in existing:
                    self._client.create_payload_index(self.collection, field_name, field_schema=schema, wait=True)

    def upsert(self, passages: Sequence[Passage], vectors: Vectors, sentences: Sequence[Vectors] | None = None) -> None:
        if not passages:
            return
        if len(passages) != len(vectors) or (sentences is not None and len(sentences) != len(passages)):
            raise ValueError("one vector (and one set of sentence vectors) per passage")
        # One Batch (columns of ids, vectors, payloads) rather than a PointStruct per point: the client
        # inspects and serialises each model field by field, 3-4x the CPU for the same request body.
        ids: list[models.ExtendedPointId] = [point_id(p.tenant, p.passage_id) for p in passages]
        rows = np.asarray(vectors, dtype=np.float32).reshape(len(passages), -1).tolist()
        payloads = [passage_to_point(p) for p in passages]
        per: list[list[list[float]]] | None = None
        if sentences is not None and self.sentence_vectors:
            per = [
                np.asarray(s, dtype=np.float32).reshape(-1, self.dim)[:MAX_SENTENCE_VECTORS].tolist() for s in sentences
            ]
        with self._guard():
            for start, end in _chunks(
                [1 + (len(per[i]) if per else 0) for i in range(len(ids))], UPSERT_FLOATS // self.dim
            ):
                if per is None:
                    batch = models.Batch(ids=ids[start:end], vectors=rows[start:end], payloads=payloads[start:end])
                    self._client.upsert(self.collection, points=batch, wait=True)
                    continue
                points = [
                    models.PointStruct(
                        id=ids[i],
                        vector={"": rows[i], SENTENCE_VECTOR: per[i]} if per[i] else {"": rows[i]},
                        payload=payloads[i],
                    )
                    for i in range(start, end)
                ]
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

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None:
        # `acl_since` is replaced whole: set_payload overwrites a top-level key, it does not merge into it.
        payload = {"acl": list(acl), "acl_since": since_ms(since)}
        change = models.SetPayload(payload=payload, filter=_doc_filter(tenant, doc_id))
        self._writes.submit(models.SetPayloadOperation(set_payload=change), (tenant, doc_id))

    def delete_doc(self, tenant: str, doc_id: str) -> None:
        selector = models.FilterSelector(filter=_doc_filter(tenant, doc_id))
        self._writes.submit(models.DeleteOperation(delete=selector), (tenant, doc_id))

    def _batch(self, operations: list[models.SetPayloadOperation | models.DeleteOperation]) -> None:
        """One request, applied in order and acknowledged once durable (wait=True), as each alone was."""
        with self._guard():
            self._client.batch_update_points(self.collection, update_operations=operations, wait=True)

    def search(self, vector: Vectors, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        """The nearest points the filter admits: searched first on the indexed conditions only (a
        superset of the admitted points) with the grant instants checked on the hits (`granted_as_of`);
        if every hit passes they are the nearest admitted points too, and if one fails (an entry granted
        after the instant asked about) the search runs again with the whole filter. The same answers as
        the whole filter (tests/test_qdrant_server_instants.py), without Qdrant reading every candidate's
        payload for the per-entry instants."""
        return self._search([float(x) for x in vector.reshape(-1)], None, access, limit, floor)

    def search_sentences(self, vector: Vectors, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        """Passages by their best sentence (max-sim of a one-vector query), searched as `search` is."""
        if not self.sentence_vectors:
            return []
        return self._search([[float(x) for x in vector.reshape(-1)]], SENTENCE_VECTOR, access, limit, floor)

    def _search(self, query: Any, using: str | None, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        if not access.entries or limit <= 0:
            return []
        points = self._query(query, using, access_filter(access, instants=False), limit, floor)
        if not all(granted_as_of(p.payload or {}, access) for p in points):
            points = self._query(query, using, access_filter(access), limit, floor)
        return [point_to_hit(dict(p.payload or {}), float(p.score)) for p in points]

    def _query(
        self, query: Any, using: str | None, flt: models.Filter, limit: int, floor: float
    ) -> list[models.ScoredPoint]:
        try:
            with self._guard():
                if not self.local:  # the REST call itself (qdrant_connect.rest_query: the same request)
                    return rest_query(self._client, self.collection, query, using, flt, limit, floor)
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
        except (ResponseHandlingException, httpx.TransportError) as exc:  # no answer from the server
            raise QdrantUnavailable(f"Qdrant could not be reached for a search: {type(exc).__name__}") from exc
        except UnexpectedResponse as exc:
            if exc.status_code is not None and exc.status_code < 500:
                raise
            raise QdrantUnavailable(f"Qdrant could not answer a search: HTTP {exc.status_code}") from exc
        return list(response.points)

    def delete_superseded(self, before: datetime) -> None:
        """Delete every point superseded before the instant (retention), every tenant."""
        flt = models.Filter(
            must=[models.FieldCondition(key="superseded_on", range=models.DatetimeRange(lt=iso(before)))]
        )
        with self._guard():
            self._client.delete(self.collection, points_selector=models.FilterSelector(filter=flt), wait=True)

    def deleted_vectors(self) -> int | None:
        """Deleted vectors still held by the collection's vacuumable segments (telemetry); None unknown.

        Segments under VACUUM's minimum size are not counted: the server never vacuums them (a
        deleted point there stays a marked vector, never text: the payload holds no text).
        """
        url = self._client.init_options.get("url")
        if self.local or not url:
            return None
        import httpx

        try:
            body = httpx.get(f"{url.rstrip('/')}/telemetry", params={"details_level": 4}, timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return None
        floor = VACUUM.vacuum_min_vector_number or 0
        for collection in body.get("result", {}).get("collections", {}).get("collections", []):
            if collection.get("id") != self.collection:
                continue
            total = 0
            for shard in collection.get("shards", []):
                for segment in (shard.get("local") or {}).get("segments", []):
                    info = segment.get("info", {})
                    if int(info.get("num_vectors", 0)) + int(info.get("num_deleted_vectors", 0)) >= floor:
                        total += int(info.get("num_deleted_vectors", 0))
            return total
        return None

    def purge(self, timeout_s: float = PURGE_TIMEOUT_S) -> dict[str, object]:
        """Wait for the server's vacuum (it runs on its own once a segment holds a deleted point)."""
        import time

        deadline = time.monotonic() + timeout_s
        left = self.deleted_vectors()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self.deleted_vectors()
        return {"deleted_vectors_left": left, "complete": left == 0 or left is None}

    def held(self, point_ids: Sequence[str]) -> int:
        """How many of these points the collection still holds (deletion certificates)."""
        if not point_ids:
            return 0
        with self._guard():
            return len(self._client.retrieve(self.collection, ids=list(point_ids), with_payload=False))

    def point_ids(self, ids: Sequence[int | str]) -> set[str]:
        """Which of these point IDs the collection holds."""
        if not ids:
            return set()
        with self._guard():
            records = self._client.retrieve(self.collection, ids=list(ids), with_payload=False)
        return {str(r.id) for r in records}

    def indexed(self) -> tuple[int, int] | None:
        """The server builds its HNSW index itself: not ours to report."""
        return None

    def optimize_due(self, changed_at_least: int, quiet_s: float) -> bool:
        """The server optimizes on its own: never due here."""
        return False

    def optimize(self) -> bool:
        """The server optimizes on its own: nothing to do."""
        return False

    def payload_of(self, tenant: str, passage_id: str) -> dict[str, Any] | None:
        """What the collection holds for one passage (audits, tests); None when it holds nothing."""
        with self._guard():
            records = self._client.retrieve(self.collection, ids=[point_id(tenant, passage_id)], with_payload=True)
        return dict(records[0].payload or {}) if records else None

    def count(self, tenant: str, doc_id: str | None = None) -> int:
        must: list[models.Condition] = [_match("tenant", tenant)]
        if doc_id is not None:
            must.append(_match("doc_id", doc_id))
        with self._guard():
            result = self._client.count(self.collection, count_filter=models.Filter(must=must), exact=True)
        return int(result.count)

    def inventory(self, tenant: str, doc_id: str) -> list[StoredPassage]:
        out: list[StoredPassage] = []
        offset: models.ExtendedPointId | None = None
        while True:
            with self._guard():
                points, offset = self._client.scroll(
                    self.collection,
                    scroll_filter=_doc_filter(tenant, doc_id),
                    limit=256,
                    offset=offset,
                    with_payload=True,
                    with_vectors=False,
                )
            for point in points:
                payload = dict(point.payload or {})
                out.append(stored_passage(payload))
            if offset is None or not points:
                return sorted(out, key=lambda s: s.passage_id)

    def drop_all(self) -> None:
        """Delete the collection (tests)."""
        with self._guard():
            self._client.delete_collection(self.collection)

    def flush(self) -> None:
        """Every write waits for the server's acknowledgement (durable in its WAL): nothing to do."""

    def close(self) -> None:
        self._writes.close()
        with self._guard():
            self._client.close()
