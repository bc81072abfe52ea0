"""Cluster bookkeeping in Elasticsearch: applied document state and the deletion audit.

Both live in the same cluster as the passages so the cluster profile has no extra database to
run. Neither write waits for a refresh: a worker that reads state right after another worker
wrote it (a redelivery, a rebalance) reads it with a real-time GET by ID, and the few searches
(chunker versions, audit listings) refresh the index first.

Doc state `_id` is a hash of (tenant, doc_id): IDs of any length, no separator ambiguity, and
a `get` by ID is real-time (no refresh needed). The stored tenant and doc_id are compared on
read as well, so a hash collision can never hand one tenant another's state.

The deletion audit is append-only and hash-chained (see ElasticDeletionAudit): records are
created, never updated, and each carries the hash of the one before it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from elasticsearch import BadRequestError, ConflictError, Elasticsearch, NotFoundError

from indexer.audit_chain import GENESIS, ChainRecord, canonical, make_record
from indexer.audit_records import KIND_DELETION, KIND_PURGE, deletion_body, deletion_of, purge_body, purge_of
from indexer.elastic import check_prefix, connect
from indexer.ports import DeletionRecord, DocState, PurgeRecord, grants_json, with_grants_json
from indexer.propagation import PropagationRecord, from_row, to_row
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
                "tombstone_version": {"type": "long"},
                "grants": _STORED_ONLY,
            },
        )
        # Indexes created before the fields existed (the mapping is strict): add them.
        self._es.indices.put_mapping(
            index=self.index, properties={"tombstone_version": {"type": "long"}, "grants": _STORED_ONLY}
        )

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
        self._es.index(index=self.index, id=state_id(state.tenant, state.doc_id), document=doc)

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
        self._es.close()


class ElasticDeletionAudit:
    """DeletionAudit in Elasticsearch, hash-chained like the SQLite one (indexer.audit_chain).

    `<prefix>-audit-chain` holds one create-only document per record, `_id` = the zero-padded
    sequence number, so two workers appending at once race for the same `_id`: the loser gets a
    409, reads the winner's record (a real-time GET, no refresh) and links after it. That makes the
    chain one total order across every worker without a lock. `<prefix>-audit-meta` holds the
    chain head (`head`: the last seq and hash, only ever moved forward, so removing records from
    the end is detected too) and a marker per recorded event (`event:<id>`: a redelivered deletion
    adds nothing). The marker is written after the chain record, so a crash in between can at
    worst record an event twice, never lose it. There is no update or delete method.
    """

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-audit-chain"
        self.meta_index = f"{self.prefix}-audit-meta"
        self._lock = threading.Lock()
        self._tip: tuple[int, str] | None = None
        _create_index(
            self._es,
            self.index,
            self.prefix,
            "audit-chain",
            {
                "seq": {"type": "long"},
                "kind": {"type": "keyword"},
                "event_id": {"type": "keyword"},
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "store": {"type": "keyword"},
                "body": _STORED_ONLY,
                "prev_hash": _STORED_ONLY,
                "hash": _STORED_ONLY,
            },
        )
        _create_index(
            self._es, self.meta_index, self.prefix, "audit-meta", {"seq": {"type": "long"}, "hash": _STORED_ONLY}
        )
        self._chain_unchained()

    def _chain_unchained(self) -> None:
        """Clusters written before the chain kept `<prefix>-deletion-audit` documents: chain them once.

        Idempotent (the event markers skip what is chained already), so several workers starting at
        once are harmless; the old index is left in place for the operator to delete.
        """
        old = f"{self.prefix}-deletion-audit"
        if not self._es.indices.exists(index=old) or self._es.exists(index=self.meta_index, id="migrated"):
            return
        response = self._es.search(index=old, size=10_000, query={"match_all": {}})
        sources = sorted((h["_source"] for h in response["hits"]["hits"]), key=lambda d: int(d["received_at"]))
        for src in sources:
            self.append(
                DeletionRecord(
                    event_id=src["event_id"],
                    tenant=src["tenant"],
                    doc_id=src["doc_id"],
                    version=int(src["version"]),
                    received_at=from_epoch_ms(int(src["received_at"])),
                    removed_at={k: from_epoch_ms(int(v)) for k, v in (src.get("removed_at") or {}).items()},
                    cache_invalidated_at=from_epoch_ms(int(src["cache_invalidated_at"])),
                    passages_removed=int(src["passages_removed"]),
                    details={"chained_later": True},
                )
            )
        with contextlib.suppress(ConflictError):
            self._es.create(index=self.meta_index, id="migrated", document={"seq": self.tip()})

    @staticmethod
    def _id(seq: int) -> str:
        return f"{seq:012d}"

    def _link(self, seq: int) -> ChainRecord | None:
        try:
            src = self._es.get(index=self.index, id=self._id(seq))["_source"]
        except NotFoundError:
            return None
        return ChainRecord(int(src["seq"]), src["kind"], json.loads(src["body"]), src["prev_hash"], src["hash"])

    def _current_tip(self) -> tuple[int, str]:
        """The last record: from memory, else the head, then forward by real-time GETs until one is missing."""
        if self._tip is None:
            head = self.head()
            seq, digest = head if head is not None else (0, GENESIS)
            if seq > 0:
                found = self._link(seq)
                if found is None:  # the head is ahead of the records: trust the records, verify reports it
                    seq, digest = 0, GENESIS
            self._tip = (seq, digest)
        seq, digest = self._tip
        while (nxt := self._link(seq + 1)) is not None:
            seq, digest = nxt.seq, nxt.hash
        self._tip = (seq, digest)
        return self._tip

    def _append(self, kind: str, body: dict[str, Any], **fields: str | None) -> int:
        with self._lock:
            while True:
                seq, prev = self._current_tip()
                link = make_record(seq + 1, kind, body, prev)
                try:
                    self._es.create(
                        index=self.index,
                        id=self._id(link.seq),
                        document={
                            "seq": link.seq,
                            "kind": kind,
                            **{k: v for k, v in fields.items() if v is not None},
                            "body": canonical(link.body),
                            "prev_hash": link.prev_hash,
                            "hash": link.hash,
                        },
                    )
                except ConflictError:
                    continue  # another worker took this seq: link after its record
                self._tip = (link.seq, link.hash)
                self._advance_head(link.seq, link.hash)
                return link.seq

    def _advance_head(self, seq: int, digest: str) -> None:
        for _ in range(10):
            try:
                current = self._es.get(index=self.meta_index, id="head")
            except NotFoundError:
                with contextlib.suppress(ConflictError):
                    self._es.create(index=self.meta_index, id="head", document={"seq": seq, "hash": digest})
                    return
                continue
            if int(current["_source"]["seq"]) >= seq:
                return
            try:
                self._es.index(
                    index=self.meta_index,
                    id="head",
                    document={"seq": seq, "hash": digest},
                    if_seq_no=current["_seq_no"],
                    if_primary_term=current["_primary_term"],
                )
                return
            except ConflictError:
                continue

    def head(self) -> tuple[int, str] | None:
        try:
            src = self._es.get(index=self.meta_index, id="head")["_source"]
        except NotFoundError:
            return None
        return int(src["seq"]), str(src["hash"])

    def append(self, record: DeletionRecord) -> None:
        if self._es.exists(index=self.meta_index, id=f"event:{record.event_id}"):
            return  # a redelivered event: the first record stands, unchanged
        seq = self._append(
            KIND_DELETION, deletion_body(record), event_id=record.event_id, tenant=record.tenant, doc_id=record.doc_id
        )
        with contextlib.suppress(ConflictError):
            self._es.create(index=self.meta_index, id=f"event:{record.event_id}", document={"seq": seq})

    def append_purge(self, record: PurgeRecord) -> None:
        self._append(KIND_PURGE, purge_body(record), store=record.store)

    def _search(self, filters: list[dict[str, Any]]) -> list[ChainRecord]:
        # Appends do not wait for a refresh (a deletion must not wait a refresh interval for its
        # evidence; the chain itself is read by real-time GETs): listings refresh first instead.
        self._es.indices.refresh(index=self.index)
        out: list[ChainRecord] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query={"bool": {"filter": filters}} if filters else {"match_all": {}},
                size=PAGE_SIZE,
                sort=[{"seq": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            for h in hits:
                src = h["_source"]
                out.append(
                    ChainRecord(int(src["seq"]), src["kind"], json.loads(src["body"]), src["prev_hash"], src["hash"])
                )
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def records(self, tenant: str | None = None) -> list[DeletionRecord]:
        filters: list[dict[str, Any]] = [{"term": {"kind": KIND_DELETION}}]
        if tenant is not None:
            filters.append({"term": {"tenant": tenant}})
        return [deletion_of(link) for link in self._search(filters)]

    def purges(self, store: str | None = None) -> list[PurgeRecord]:
        filters: list[dict[str, Any]] = [{"term": {"kind": KIND_PURGE}}]
        if store is not None:
            filters.append({"term": {"store": store}})
        return [purge_of(link) for link in self._search(filters)]

    def tip(self) -> int:
        with self._lock:
            return self._current_tip()[0]

    def latest(self, kind: str) -> int:
        self._es.indices.refresh(index=self.index)
        hits = self._es.search(index=self.index, size=1, query={"term": {"kind": kind}}, sort=[{"seq": "desc"}])
        found = hits["hits"]["hits"]
        return int(found[0]["_source"]["seq"]) if found else 0

    def chain(self) -> tuple[list[ChainRecord], tuple[int, str] | None]:
        """The head first, then the records up to it: one consistent trail while workers append (a
        record is created before the head moves to it), so every reader counts the same records."""
        head = self.head()
        return self._search([{"range": {"seq": {"lte": head[0]}}}] if head else []), head

    def drop_all(self) -> None:
        """Delete this prefix's audit indexes (tests only: production audits are never dropped)."""
        old = f"{self.prefix}-deletion-audit"
        for index in (self.index, self.meta_index, old):
            self._es.indices.delete(index=index, ignore_unavailable=True)

    def close(self) -> None:
        self._es.close()


class ElasticPropagationLog:
    """PropagationLog in `<prefix>-propagation`: one document per event (`_id` = event_id), written
    with a bulk request per confirmation batch and no refresh wait (listings refresh first)."""

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-propagation"
        _create_index(
            self._es,
            self.index,
            self.prefix,
            "propagation",
            {
                "start_ms": {"type": "date", "format": "epoch_millis"},
                "kind": {"type": "keyword"},
                "event_id": {"type": "keyword"},
                "row": _STORED_ONLY,
            },
        )

    def record(self, records: Sequence[PropagationRecord]) -> None:
        if not records:
            return
        ops: list[dict[str, Any]] = []
        for r in records:
            ops.append({"index": {"_index": self.index, "_id": r.event_id}})
            ops.append(
                {
                    "start_ms": to_epoch_ms(r.start()),
                    "kind": r.kind,
                    "event_id": r.event_id,
                    "row": json.dumps(to_row(r)),
                }
            )
        response = self._es.bulk(operations=ops)
        if response.get("errors"):
            raise RuntimeError(f"propagation records not written: {response['items'][0]}")

    def records(self, since: datetime | None = None) -> list[PropagationRecord]:
        self._es.indices.refresh(index=self.index)
        query: dict[str, Any] = (
            {"range": {"start_ms": {"gte": to_epoch_ms(since)}}} if since is not None else {"match_all": {}}
        )
        out: list[PropagationRecord] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query=query,
                size=PAGE_SIZE,
                sort=[{"start_ms": "asc"}, {"event_id": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            out.extend(from_row(json.loads(h["_source"]["row"])) for h in hits)
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def drop_all(self) -> None:
        self._es.indices.delete(index=self.index, ignore_unavailable=True)

    def close(self) -> None:
        self._es.close()
