"""Cluster lexical index: Elasticsearch BM25, one index per tenant behind an alias.

Why one index per tenant: BM25's collection statistics (document frequencies, average field
length) are per index (per shard, and each tenant index has exactly one shard), so a tenant's
scores never depend on another tenant's corpus, the same reason the SQLite adapter keeps one
FTS table per tenant. Every index still stores `tenant` and every query still filters on it:
the alias is the isolation, the term filter is the second lock on the same door.

Why an alias: `<prefix>-<tenant>-passages` points at `<prefix>-<tenant>-passages-v1`, so a
re-mapping can build `-v2` and swap the alias without readers noticing. Writes pass
`require_alias=true`, so a missing alias can never auto-create a dynamically mapped index.

Queries are only `multi_match` over the analysed `text`, `heading` (the heading path) and
`title_text` fields, each with its own boost (`FieldWeights`, the same weights as the SQLite
adapter's FTS5 columns), built from at
most 64 plain words (`schemas.text.query_terms`): user text never reaches a query parser, so
`tenant:globex` or `acl:*` are two words searched inside the principal's own tenant. The
permission filter (tenant, ACL entries, as-of validity) sits in `bool.filter` of the same
request and the floor (above 0) is `min_score`, so a denied or weak passage is never returned.
A search asks for the top in score order alone, so Lucene can skip what cannot reach it, and asks
again with passage_id as the tie-break only when a tie straddles the cut (`search`).

Write path for supersede / set_acl / delete_doc (decision, probed on the integ-test
distribution this project runs, Elasticsearch 8.19 with only the modules apm,
transport-netty4, x-pack-core and x-pack-security): `update_by_query` and `delete_by_query`
live in the `reindex` module and a field-setting `update_by_query` also needs a Painless
script (`lang-painless`); neither module is there. The adapter therefore always uses the
portable path: list the document's passages (term filter, `search_after` over `passage_id`),
then one `_bulk` of partial-document updates or deletes by `_id`. It is the only path that can
be tested here, it needs no scripting, and `supersede` uses optimistic concurrency
(`if_seq_no`/`if_primary_term`) so a conditional update is never applied to a passage that
changed after it was read; a conflict re-reads and retries. Revocations and deletions are
written with `refresh=true` (visible to the very next query, immediately); ingestion writes use
the configured refresh, `wait_for` by default (visible before the call returns, without forcing
extra segments). `modules()` reports what the server has, for operators and tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from indexer.combine import Combiner
from indexer.elastic_client import (
    BULK_CHUNK,
    MAX_RESULT_WINDOW,
    PAGE_SIZE,
    WRITE_ATTEMPTS,
    ElasticWriteError,
    doc_key,
    raise_bulk_errors,
    reading,
)
from indexer.elastic_client import (
    ElasticUnavailable as ElasticUnavailable,  # re-export: the error a read raises
)
from indexer.elastic_indexes import ElasticPassageIndexes
from indexer.elastic_mapping import SEARCH_FIELDS_ADDED, access_query, open_at, search_body
from indexer.payload import SINCE_OFFSET, doc_to_passage, iso, passage_to_doc, since_text
from indexer.ports import (
    DEFAULT_FIELD_WEIGHTS,
    DEFAULT_LEXICAL_ANALYZER,
    Durability,
    FieldWeights,
    Hit,
    LexicalAnalyzer,
    StoredPassage,
)
from schemas.passages import Passage
from schemas.principal import AccessFilter, since_key
from schemas.text import query_terms


@dataclass(frozen=True)
class _AclWrite:
    tenant: str
    doc_id: str
    acl: tuple[str, ...]
    since: dict[str, datetime]


@dataclass(frozen=True)
class _DocDelete:
    tenant: str
    doc_id: str
    listed: tuple[str, ...] | None
    """The passage IDs the caller listed just before (`doc_passages`), or None: search for them."""


_AccessWrite = _AclWrite | _DocDelete


TIE_MARGIN = 16
"""Passages a search asks for beyond its limit, so a tie at the cut can be settled by passage_id
without asking again (ElasticLexicalIndex.search)."""


def _by_tenant(docs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tenant, doc_id in docs:
        out.setdefault(tenant, []).append(doc_id)
    return out


class ElasticLexicalIndex(ElasticPassageIndexes):
    name = "elasticsearch"
    combines_writes = True  # set_acl and delete_doc, together (indexer.combine)
    durability: Durability = "write"
    """Acknowledged once in the translog, and every revocation or deletion is refreshed before it returns."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ragsync",
        k1: float = 1.2,
        b: float = 0.75,
        refresh: str = "wait_for",
        weights: FieldWeights = DEFAULT_FIELD_WEIGHTS,
        analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER,
    ) -> None:
        super().__init__(url, prefix=prefix, k1=k1, b=b, analyzer=analyzer)
        self.weights = weights
        self._refresh = refresh
        # Revocations and deletions of concurrent appliers share one search, one `_bulk` and one
        # forced refresh per write (indexer.combine): one each per event was the appliers' queue, and
        # one writer per kind ran two forced refreshes of the same index side by side.
        self._access_writes: Combiner[_AccessWrite] = Combiner(self._write_access, name="ragsync-es-access")

    # ---- writes --------------------------------------------------------------------------------

    def upsert(self, passages: Sequence[Passage]) -> None:
        if not passages:
            return
        by_tenant: dict[str, list[Passage]] = {}
        for p in passages:
            by_tenant.setdefault(p.tenant, []).append(p)
        for tenant, group in by_tenant.items():
            alias = self._ensure(tenant, {p.chunker_version for p in group})
            ops: list[dict[str, Any]] = []
            for p in group:
                doc = passage_to_doc(p)
                doc["heading"] = " ".join(p.heading_path)
                doc["title_text"] = p.title
                ops.append({"index": {"_index": alias, "_id": doc_key(p.passage_id)}})
                ops.append(doc)
            self._bulk(ops, refresh=self._refresh)

    def _bulk(self, ops: list[dict[str, Any]], *, refresh: str | bool) -> list[dict[str, Any]]:
        """Send ops in chunks (action + optional source per item); return 409 conflicts."""
        conflicts: list[dict[str, Any]] = []
        chunk: list[dict[str, Any]] = []
        items = 0
        i = 0
        while i < len(ops):
            action = ops[i]
            width = 1 if "delete" in action else 2
            chunk.extend(ops[i : i + width])
            items += 1
            i += width
            if items >= BULK_CHUNK or i >= len(ops):
                response = self._es.bulk(operations=chunk, refresh=refresh, require_alias=True)  # type: ignore[arg-type]
                conflicts.extend(raise_bulk_errors(response.body))
                chunk, items = [], 0
        return conflicts

    def _passages(
        self, alias: str, filters: list[dict[str, Any]], *, with_doc_id: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Every matching passage (id, seq_no, primary_term; `_source.doc_id` if asked), paged by
        `search_after` on passage_id."""
        if self._refresh not in ("true", "wait_for"):
            # writes of this adapter may not be searchable yet: a revocation must see all of them
            self._es.indices.refresh(index=alias, ignore_unavailable=True)
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=alias,
                query={"bool": {"filter": filters}},
                size=PAGE_SIZE,
                sort=[{"passage_id": "asc"}],
                source={"includes": ["doc_id"]} if with_doc_id else False,
                seq_no_primary_term=True,
                search_after=after,
                ignore_unavailable=True,
                allow_no_indices=True,
            )
            hits = response["hits"]["hits"]
            yield from hits
            if len(hits) < PAGE_SIZE:
                return
            after = hits[-1]["sort"]

    def _doc_filters(self, tenant: str, doc_id: str) -> list[dict[str, Any]]:
        return [{"term": {"tenant": tenant}}, {"term": {"doc_id": doc_id}}]

    def _docs_filters(self, tenant: str, doc_ids: Sequence[str]) -> list[dict[str, Any]]:
        return [{"term": {"tenant": tenant}}, {"terms": {"doc_id": sorted(set(doc_ids))}}]

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None:
        if not passage_ids or not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        self._bulk([{"delete": {"_index": alias, "_id": doc_key(pid)}} for pid in passage_ids], refresh=True)

    def delete_doc(self, tenant: str, doc_id: str, listed: Sequence[str] | None = None) -> None:
        """Every passage of the document, deleted and refreshed before returning, with the ACL changes
        and deletions of other appliers queued meanwhile (one search, one `_bulk`, one refresh).

        `listed` (LexicalIndex.delete_doc): the IDs `doc_passages` returned just before, under the
        document's key. They are deleted by `_id` without searching again, but only when every write
        of this adapter is searchable once it returned (`refresh` "true" or "wait_for"): otherwise the
        listing may have missed a passage, and the document's passages are searched as before."""
        if self._alias_exists(tenant):
            known = tuple(listed) if listed is not None and self._refresh in ("true", "wait_for") else None
            self._access_writes.submit(_DocDelete(tenant, doc_id, known), (tenant, doc_id))

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None:
        """Partial-document update of `acl` and its grant instants on every version, refreshed before
        returning; `retry_on_conflict` absorbs a racing write. The ACL changes and deletions of other
        appliers queued meanwhile share the search, `_bulk` and refresh (indexer.combine). A partial
        update merges objects, so the instants of entries no longer in `acl` may stay in `acl_since`:
        harmless, the filter requires the entry in `acl` as well."""
        if self._alias_exists(tenant):
            self._access_writes.submit(_AclWrite(tenant, doc_id, tuple(acl), dict(since)), (tenant, doc_id))

    def _write_access(self, writes: list[_AccessWrite]) -> None:
        """One round of ACL changes and deletions (never two of one document: Combiner keys): a single
        search lists the passages of the documents whose ACL changes and of the deletions not listed
        by their caller, and a single `_bulk` (refresh=true) updates and deletes them all, so the round
        costs one forced refresh. Version conflicts on an update re-read and retry that document."""
        pending: dict[tuple[str, str], _AccessWrite] = {(w.tenant, w.doc_id): w for w in writes}
        for _ in range(WRITE_ATTEMPTS):
            ops: list[dict[str, Any]] = []
            owners: dict[str, _AclWrite] = {}
            for w in pending.values():
                if isinstance(w, _DocDelete) and w.listed is not None:
                    alias = self.alias(w.tenant)
                    ops.extend({"delete": {"_index": alias, "_id": doc_key(pid)}} for pid in w.listed)
            searched = [key for key, w in pending.items() if isinstance(w, _AclWrite) or w.listed is None]
            for tenant, doc_ids in _by_tenant(searched).items():
                alias = self.alias(tenant)
                for h in self._passages(alias, self._docs_filters(tenant, doc_ids), with_doc_id=True):
                    w = pending[(tenant, h["_source"]["doc_id"])]
                    if isinstance(w, _DocDelete):
                        ops.append({"delete": {"_index": alias, "_id": h["_id"]}})
                        continue
                    owners[h["_id"]] = w
                    ops.append({"update": {"_index": alias, "_id": h["_id"], "retry_on_conflict": 3}})
                    ops.append(
                        {
                            "doc": {
                                "acl": list(w.acl),
                                "acl_since": since_text(w.since),
                                "acl_entries_since": {e: iso(t) for e, t in sorted(w.since.items())},
                            }
                        }
                    )
            conflicted: dict[tuple[str, str], _AccessWrite] = {}
            for conflict in self._bulk(ops, refresh=True) if ops else []:
                w = owners[conflict["_id"]]  # only updates conflict: a delete of a gone passage is a 404
                conflicted[(w.tenant, w.doc_id)] = w
            if not conflicted:
                return
            pending = conflicted
        names = ", ".join(f"{t}/{d}" for t, d in pending)
        raise ElasticWriteError(f"set_acl {names}: still conflicting after {WRITE_ATTEMPTS} attempts")

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None:
        """Close validity of older versions still open past the instant; never reopens one."""
        if not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        at = iso(superseded_on)
        filters = [
            *self._doc_filters(tenant, doc_id),
            {"range": {"version": {"lt": before_version}}},
            open_at("superseded_on", at),
        ]
        for _ in range(WRITE_ATTEMPTS):
            ops: list[dict[str, Any]] = []
            for h in self._passages(alias, filters):
                ops.append(
                    {
                        "update": {
                            "_index": alias,
                            "_id": h["_id"],
                            "if_seq_no": h["_seq_no"],
                            "if_primary_term": h["_primary_term"],
                        }
                    }
                )
                ops.append({"doc": {"superseded_on": at}})
            # a conflict means the passage changed since it was read: re-read, re-check, retry
            if not ops or not self._bulk(ops, refresh=self._refresh):
                return
        raise ElasticWriteError(f"supersede {tenant}/{doc_id}: still conflicting after {WRITE_ATTEMPTS} attempts")

    def _alias_exists(self, tenant: str) -> bool:
        alias = self.alias(tenant)
        with self._lock:
            if alias in self._chunkers:
                return True
        return bool(self._es.indices.exists_alias(name=alias))

    # ---- reads ---------------------------------------------------------------------------------

    @staticmethod
    def query_text(query: str) -> str:
        """At most 64 distinct plain words: bounds the work of a 10 KB query, drops all syntax."""
        return " ".join(query_terms(query))

    def search_request(
        self, query: str, access: AccessFilter, size: int, floor: float, *, tie_break: bool = False
    ) -> dict[str, Any] | None:
        """A search body of `search` (elastic_mapping.search_body); None: nothing to search for."""
        text = self.query_text(query)
        if not text or not access.entries or size <= 0:
            return None
        return search_body(text, self.weights, access, size, floor, tie_break=tie_break)

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        """The top `limit` the permission filter admits, by score then passage_id.

        Asked in score order alone (Lucene breaks ties by the order passages were written) for
        `TIE_MARGIN` more than `limit`, so Lucene can skip what cannot reach the top. Unless the last
        passage returned scores as much as the `limit`-th, every passage tied with the `limit`-th came
        back, and sorting what came back by score then passage_id gives the top `limit` of a search
        ordered that way (ties at the cut are small: at most 10 passages on the 100k bench). When a
        tie runs past the margin, the top is asked again with passage_id as the second sort key."""
        size = limit + TIE_MARGIN
        if size > MAX_RESULT_WINDOW:
            size = limit
            body = self.search_request(query, access, limit, floor, tie_break=True)
        else:
            body = self.search_request(query, access, size, floor)
        if body is None:
            return []
        hits = self._search_hits(access.tenant, body)
        if len(hits) == size > limit and float(hits[-1]["_score"]) >= float(hits[limit - 1]["_score"]):
            hits = self._search_hits(access.tenant, self.search_request(query, access, limit, floor, tie_break=True))
        top = sorted(hits, key=lambda h: (-float(h["_score"]), h["_source"]["passage_id"]))[:limit]
        return [Hit(passage=doc_to_passage(h["_source"]), score=float(h["_score"])) for h in top]

    def _search_hits(self, tenant: str, body: dict[str, Any] | None) -> list[dict[str, Any]]:
        with reading("a search"):
            response = self._es.search(
                index=self.alias(tenant),
                body=body,
                ignore_unavailable=True,
                allow_no_indices=True,
            )
        return list(response["hits"]["hits"])

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        """An `ids` filter beside the permission filter, in one search of the tenant's alias."""
        wanted = list(dict.fromkeys(passage_ids))
        if not wanted or not access.entries:
            return []
        with reading("a passage look-up"):
            response = self._es.search(
                index=self.alias(access.tenant),
                query={"bool": {"filter": [{"ids": {"values": [doc_key(p) for p in wanted]}}, *access_query(access)]}},
                size=len(wanted),
                source_excludes=["heading", *SEARCH_FIELDS_ADDED],
                ignore_unavailable=True,
                allow_no_indices=True,
            )
        return [doc_to_passage(h["_source"]) for h in response["hits"]["hits"]]

    def doc_passages(self, tenant: str, doc_id: str) -> list[Passage]:
        if not self._alias_exists(tenant):
            return []
        alias = self.alias(tenant)
        out: list[Passage] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=alias,
                query={"bool": {"filter": self._doc_filters(tenant, doc_id)}},
                size=PAGE_SIZE,
                sort=[{"passage_id": "asc"}],
                source_excludes=["heading", *SEARCH_FIELDS_ADDED],
                search_after=after,
                ignore_unavailable=True,
                allow_no_indices=True,
            )
            hits = response["hits"]["hits"]
            out.extend(doc_to_passage(h["_source"]) for h in hits)
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def count(self, tenant: str, doc_id: str | None = None) -> int:
        filters: list[dict[str, Any]] = [{"term": {"tenant": tenant}}]
        if doc_id is not None:
            filters.append({"term": {"doc_id": doc_id}})
        response = self._es.count(
            index=self.alias(tenant),
            query={"bool": {"filter": filters}},
            ignore_unavailable=True,
            allow_no_indices=True,
        )
        return int(response["count"])

    def inventory(self, tenant: str, doc_id: str) -> list[StoredPassage]:
        if not self._alias_exists(tenant):
            return []
        out: list[StoredPassage] = []
        after: list[Any] | None = None
        self._es.indices.refresh(index=self.alias(tenant), ignore_unavailable=True)
        while True:
            response = self._es.search(
                index=self.alias(tenant),
                query={"bool": {"filter": self._doc_filters(tenant, doc_id)}},
                size=PAGE_SIZE,
                sort=[{"passage_id": "asc"}],
                source_includes=["passage_id", "version", "acl", "acl_since"],
                search_after=after,
                ignore_unavailable=True,
                allow_no_indices=True,
            )
            hits = response["hits"]["hits"]
            for h in hits:
                src = h["_source"]
                acl = src.get("acl") or []
                entries = tuple(sorted([acl] if isinstance(acl, str) else acl))
                since = src.get("acl_since") or {}
                pairs = tuple((e, int(since[since_key(e)]) - SINCE_OFFSET) for e in entries if since_key(e) in since)
                out.append(StoredPassage(src["passage_id"], int(src["version"]), entries, pairs))
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def flush(self) -> None:
        """Elasticsearch acknowledges a write once it is durable in the translog: nothing to do."""

    def close(self) -> None:
        self._access_writes.close()
        self._es.close()
