"""Cluster bookkeeping in Elasticsearch: applied document state and the deletion audit.

Both live in the same cluster as the passages so the cluster profile has no extra database to
run, and both are written with `refresh=wait_for`: a worker that reads state right after
another worker wrote it (a redelivery, a rebalance) sees the write.

Doc state `_id` is a hash of (tenant, doc_id): IDs of any length, no separator ambiguity, and
a `get` by ID is real-time (no refresh needed). The stored tenant and doc_id are compared on
read as well, so a hash collision can never hand one tenant another's state.

The deletion audit is append-only: each record is written with `op_type=create` and
`_id = event_id`, so a redelivered delete hits a 409 conflict, which is the "already recorded"
answer, never an overwrite. The adapter has no update or delete method. Instants are stored as
epoch milliseconds in `date` fields with format `epoch_millis`: `_source` returns the exact
integer written (ms round-trip), and the fields stay range-queryable as dates.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from dataclasses import fields
from datetime import datetime
from typing import Any

from elasticsearch import BadRequestError, ConflictError, Elasticsearch, NotFoundError

from indexer.elastic import check_prefix, connect
from indexer.ports import DeletionRecord, DocState
from schemas._time import from_epoch_ms, to_epoch_ms

PAGE_SIZE = 1000

_MS_DATE = {"type": "date", "format": "epoch_millis"}
_STORED_ONLY = {"type": "keyword", "index": False, "doc_values": False}


def _create_index(es: Elasticsearch, name: str, prefix: str, kind: str, properties: dict[str, Any]) -> None:
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


class ElasticDocStates:
    """DocStateStore: one document per (tenant, doc_id) in `<prefix>-docstate`."""

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-docstate"
        _create_index(
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
                "passage_ids": _STORED_ONLY,
            },
        )

    def get(self, tenant: str, doc_id: str) -> DocState | None:
        try:
            response = self._es.get(index=self.index, id=state_id(tenant, doc_id))
        except NotFoundError:
            return None
        src = response["_source"]
        if src["tenant"] != tenant or src["doc_id"] != doc_id:
            return None
        return DocState(
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
        )

    def put(self, state: DocState) -> None:
        doc = {f.name: getattr(state, f.name) for f in fields(DocState)}
        doc["acl"] = list(state.acl)
        doc["passage_ids"] = list(state.passage_ids)
        self._es.index(index=self.index, id=state_id(state.tenant, state.doc_id), document=doc, refresh="wait_for")

    def chunker_versions(self) -> set[str]:
        """Chunker versions of live documents (a terms aggregation), like SqliteDocStates'."""
        response = self._es.search(
            index=self.index,
            size=0,
            query={"bool": {"filter": [{"term": {"deleted": False}}, {"exists": {"field": "chunker_version"}}]}},
            aggregations={"versions": {"terms": {"field": "chunker_version", "size": 1000}}},
        )
        return {str(b["key"]) for b in response["aggregations"]["versions"]["buckets"]}

    def drop_all(self) -> None:
        """Delete this prefix's doc-state index (tests)."""
        self._es.indices.delete(index=self.index, ignore_unavailable=True)

    def close(self) -> None:
        self._es.close()


class ElasticDeletionAudit:
    """DeletionAudit: `<prefix>-deletion-audit`, one create-only document per delete event.

    Records are listed by `received_at`, then by `appended_ns` (a per-process strictly
    increasing wall-clock stamp taken at append), then by event_id: receipt order, with
    appends of the same millisecond kept in the order they were made.
    """

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-deletion-audit"
        self._lock = threading.Lock()
        self._last_ns = 0
        _create_index(
            self._es,
            self.index,
            self.prefix,
            "deletion-audit",
            {
                "event_id": {"type": "keyword"},
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "version": {"type": "long"},
                "received_at": _MS_DATE,
                "removed_at": {"type": "object", "enabled": False},
                "cache_invalidated_at": _MS_DATE,
                "passages_removed": {"type": "long"},
                "appended_ns": {"type": "long"},
            },
        )

    def _stamp(self) -> int:
        with self._lock:
            self._last_ns = max(self._last_ns + 1, time.time_ns())
            return self._last_ns

    def append(self, record: DeletionRecord) -> None:
        doc = {
            "event_id": record.event_id,
            "tenant": record.tenant,
            "doc_id": record.doc_id,
            "version": record.version,
            "received_at": to_epoch_ms(record.received_at),
            "removed_at": {store: to_epoch_ms(at) for store, at in record.removed_at.items()},
            "cache_invalidated_at": to_epoch_ms(record.cache_invalidated_at),
            "passages_removed": record.passages_removed,
            "appended_ns": self._stamp(),
        }
        with contextlib.suppress(ConflictError):  # a redelivered event: the first record stands, unchanged
            self._es.create(index=self.index, id=record.event_id, document=doc, refresh="wait_for")

    def records(self, tenant: str | None = None) -> list[DeletionRecord]:
        query: dict[str, Any] = {"bool": {"filter": [{"term": {"tenant": tenant}}]}} if tenant else {"match_all": {}}
        out: list[DeletionRecord] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query=query,
                size=PAGE_SIZE,
                sort=[{"received_at": "asc"}, {"appended_ns": "asc"}, {"event_id": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            out.extend(self._record(h["_source"]) for h in hits)
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    @staticmethod
    def _record(src: dict[str, Any]) -> DeletionRecord:
        return DeletionRecord(
            event_id=src["event_id"],
            tenant=src["tenant"],
            doc_id=src["doc_id"],
            version=int(src["version"]),
            received_at=_ms(src["received_at"]),
            removed_at={store: _ms(at) for store, at in (src.get("removed_at") or {}).items()},
            cache_invalidated_at=_ms(src["cache_invalidated_at"]),
            passages_removed=int(src["passages_removed"]),
        )

    def drop_all(self) -> None:
        """Delete this prefix's audit index (tests only: production audits are never dropped)."""
        self._es.indices.delete(index=self.index, ignore_unavailable=True)

    def close(self) -> None:
        self._es.close()


def _ms(value: Any) -> datetime:
    return from_epoch_ms(int(value))
