"""Applied document state in Elasticsearch (DocStateStore), and how every bookkeeping index is made.

The cluster's bookkeeping (doc states here, the deletion audit in indexer.elastic_audit, propagation
records in indexer.elastic_propagation) lives in the same cluster as the passages, so the cluster
profile has no extra database to run. No write waits for a refresh: a worker that reads state right
after another worker wrote it (a redelivery, a rebalance) reads it with a real-time GET by ID, and
the few searches (chunker versions, audit listings) refresh the index first.

Doc state `_id` is a hash of (tenant, doc_id): IDs of any length, no separator ambiguity, and
a `get` by ID is real-time (no refresh needed). The stored tenant and doc_id are compared on
read as well, so a hash collision can never hand one tenant another's state.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from indexer.combine import Combiner
from indexer.elastic_client import check_prefix, connect, raise_bulk_errors
from indexer.ports import DocState, grants_json, with_grants_json

PAGE_SIZE = 1000

STORED_ONLY = {"type": "keyword", "index": False, "doc_values": False}
"""Kept in `_source`, never indexed: bodies and JSON values read back whole, never searched."""


def create_index(es: Elasticsearch, name: str, prefix: str, kind: str, properties: dict[str, Any]) -> None:
    """Create once with a strict mapping; a concurrent creator winning the race is fine."""
    if es.indices.exists(index=name):
        return
    try:
        es.indices.create(
            index=name,
            settings={"number_of_shards": 1, "number_of_replicas": 0},
            mappings={
                "dynamic": "strict",
                "_meta": {"ragsync": {"prefix": prefix, "kind": kind}},
                "properties": properties,
            },
        )
    except BadRequestError as exc:
        if exc.error != "resource_already_exists_exception":
            raise


def state_id(tenant: str, doc_id: str) -> str:
    return hashlib.sha256(f"{tenant}\x00{doc_id}".encode()).hexdigest()


def _state(src: dict[str, Any]) -> DocState:
    state = DocState(
        tenant=src["tenant"],
        doc_id=src["doc_id"],
        applied_version=int(src["applied_version"]),
        deleted=bool(src["deleted"]),
        acl=tuple(src.get("acl") or ()),
        content_version=src.get("content_version"),
        acl_version=src.get("acl_version"),
        content_hash=src.get("content_hash"),
        chunker_version=src.get("chunker_version"),
        passage_ids=list(src.get("passage_ids") or []),
        tombstone_version=src.get("tombstone_version"),
    )
    return with_grants_json(state, src.get("grants"))


class ElasticDocStates:
    """DocStateStore: one document per (tenant, doc_id) in `<prefix>-docstate`."""

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-docstate"
        create_index(
            self._es,
            self.index,
            self.prefix,
            "docstate",
            {
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "applied_version": {"type": "long"},
                "deleted": {"type": "boolean"},
                "acl": {"type": "keyword"},
                "content_version": {"type": "long"},
                "acl_version": {"type": "long"},
                "content_hash": {"type": "keyword"},
                "chunker_version": {"type": "keyword"},
                "passage_ids": STORED_ONLY,
                "tombstone_version": {"type": "long"},
                "grants": STORED_ONLY,
            },
        )
        # Indexes created before the fields existed (the mapping is strict): add them.
        self._es.indices.put_mapping(
            index=self.index, properties={"tombstone_version": {"type": "long"}, "grants": STORED_ONLY}
        )
        # The states of concurrent appliers share one `_bulk` (indexer.combine): a request each was
        # where a loaded machine's revocations and deletions waited longest after the stores (py-spy).
        self._puts: Combiner[tuple[str, dict[str, Any]]] = Combiner(self._put_many, name="ragsync-es-states")

    def get(self, tenant: str, doc_id: str) -> DocState | None:
        try:
            response = self._es.get(index=self.index, id=state_id(tenant, doc_id))
        except NotFoundError:
            return None
        src = response["_source"]
        if src["tenant"] != tenant or src["doc_id"] != doc_id:
            return None
        return _state(src)

    def states(self) -> list[DocState]:
        """Paged by search_after on (tenant, doc_id); the index is refreshed first so nothing is missed."""
        self._es.indices.refresh(index=self.index)
        out: list[DocState] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query={"match_all": {}},
                size=500,
                sort=[{"tenant": "asc"}, {"doc_id": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            out.extend(_state(h["_source"]) for h in hits)
            if len(hits) < 500:
                return out
            after = hits[-1]["sort"]

    def put(self, state: DocState) -> None:
        skip = {"acl_since", "acl_since_version", "acl_changed_at"}
        doc = {f.name: getattr(state, f.name) for f in fields(DocState) if f.name not in skip}
        doc["grants"] = grants_json(state)
        doc["acl"] = list(state.acl)
        doc["passage_ids"] = list(state.passage_ids)
        # No refresh wait: every read of a state is a real-time GET by ID, and a revocation or deletion
        # must not wait a refresh interval (1 s) for its bookkeeping. Searches refresh first.
        key = state_id(state.tenant, state.doc_id)
        self._puts.submit((key, doc), key)

    def _put_many(self, states: list[tuple[str, dict[str, Any]]]) -> None:
        """One `_bulk` of index operations, acknowledged durable (translog) like one `index` each."""
        ops: list[dict[str, Any]] = []
        for key, doc in states:
            ops += [{"index": {"_index": self.index, "_id": key}}, doc]
        raise_bulk_errors(self._es.bulk(operations=ops).body, ignore_missing=False)

    def chunker_versions(self) -> set[str]:
        """Chunker versions of live documents (a terms aggregation), like SqliteDocStates'."""
        self._es.indices.refresh(index=self.index)
        response = self._es.search(
            index=self.index,
            size=0,
            query={"bool": {"filter": [{"term": {"deleted": False}}, {"exists": {"field": "chunker_version"}}]}},
            aggregations={"versions": {"terms": {"field": "chunker_version", "size": 1000}}},
        )
        return {str(b["key"]) for b in response["aggregations"]["versions"]["buckets"]}

    def counts_by_tenant(self) -> dict[str, int]:
        """Live (not deleted) documents per tenant (a terms aggregation), like SqliteDocStates'."""
        self._es.indices.refresh(index=self.index)
        response = self._es.search(
            index=self.index,
            size=0,
            query={"bool": {"filter": [{"term": {"deleted": False}}]}},
            aggregations={"tenants": {"terms": {"field": "tenant", "size": 10_000}}},
        )
        return {str(b["key"]): int(b["doc_count"]) for b in response["aggregations"]["tenants"]["buckets"]}

    def drop_all(self) -> None:
        """Delete this prefix's doc-state index (tests)."""
        self._es.indices.delete(index=self.index, ignore_unavailable=True)

    def flush(self) -> None:
        """Each put is acknowledged durable by Elasticsearch: nothing is held back."""

    def discard(self) -> None:
        """Nothing is held back, so nothing to forget."""

    def close(self) -> None:
        self._puts.close()
        self._es.close()
