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
request and the floor is `min_score`, so a denied or weak passage is never returned.

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

import contextlib
import hashlib
import logging
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from elasticsearch import ApiError, BadRequestError, Elasticsearch, TransportError

from indexer.payload import SINCE_OFFSET, doc_to_passage, iso, passage_to_doc, since_text, since_token
from indexer.ports import DEFAULT_FIELD_WEIGHTS, FieldWeights, Hit, StoredPassage, StoreUnavailable
from schemas._time import to_epoch_ms
from schemas.passages import Passage
from schemas.principal import AccessFilter, since_key
from schemas.text import query_terms

log = logging.getLogger(__name__)

INDEX_GENERATION = 1
"""Suffix of the concrete index behind each tenant alias (`-v1`); bump it with a new mapping."""


BULK_CHUNK = 500
"""Operations per `_bulk` request: bounds request size for large documents."""

PAGE_SIZE = 1000
"""Passages per page when listing one document's passages for an update or delete."""

WRITE_ATTEMPTS = 5
"""Re-read-and-retry rounds when an optimistic-concurrency update meets a concurrent write."""

PURGE_TIMEOUT_S = 45.0
"""A purge waits this long for the shards' retention leases (renewed every 30 s) to pass its deletions."""

MAX_ID_BYTES = 512
"""Elasticsearch rejects longer `_id`s; longer passage IDs are hashed (see `doc_key`)."""

_PREFIX = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")


class ElasticUnavailable(StoreUnavailable):
    """A read Elasticsearch could not answer: unreachable, overloaded, or shards not yet started.

    A question then fails with this one line (CLI exit 1, API 503) rather than a traceback, and never
    with fewer filters or fewer rankers than it asked for.
    """


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    try:
        yield
    except TransportError as exc:  # connection refused, timeouts: no HTTP answer at all
        raise ElasticUnavailable(f"Elasticsearch could not be reached for {what}: {type(exc).__name__}") from exc
    except ApiError as exc:
        if exc.meta.status < 500 and exc.meta.status != 429:
            raise
        raise ElasticUnavailable(f"Elasticsearch could not answer {what}: HTTP {exc.meta.status} {exc.error}") from exc


class ElasticWriteError(RuntimeError):
    """A bulk item failed. The caller's event stays uncommitted and is retried."""


def connect(url: str, *, request_timeout: float = 30.0, max_retries: int = 3) -> Elasticsearch:
    """One client per adapter: retries timeouts and overload (429/502/503/504) with backoff."""
    return Elasticsearch(
        url,
        request_timeout=request_timeout,
        max_retries=max_retries,
        retry_on_timeout=True,
        retry_on_status=(429, 502, 503, 504),
    )


def check_prefix(prefix: str) -> str:
    """Index names must be lowercase and may not start with `-`, `_` or `+`."""
    if not _PREFIX.match(prefix):
        raise ValueError(f"index prefix must match {_PREFIX.pattern}: {prefix!r}")
    return prefix


def tenant_slug(tenant: str) -> str:
    """Lower-case tenant plus a hash of the exact name: `Acme` and `acme` get different indexes."""
    return f"{tenant.lower()}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def doc_key(passage_id: str) -> str:
    """`_id` = passage_id; a passage ID over 512 bytes (doc IDs may be 1024 chars) is hashed.

    A hashed key cannot collide with a real passage ID: those always contain `@` and `#`.
    """
    if len(passage_id.encode()) <= MAX_ID_BYTES:
        return passage_id
    return "sha256:" + hashlib.sha256(passage_id.encode()).hexdigest()


def raise_bulk_errors(response: Mapping[str, Any], *, ignore_missing: bool = True) -> list[dict[str, Any]]:
    """Raise on failed items; return the version conflicts (409) for the caller to retry."""
    conflicts: list[dict[str, Any]] = []
    failures: list[str] = []
    for item in response.get("items", []):
        ((action, result),) = item.items()
        status = int(result.get("status", 200))
        if status < 300:
            continue
        if status == 404 and ignore_missing and action in ("update", "delete"):
            continue  # the passage is already gone: nothing to revoke or delete
        if status == 409:
            conflicts.append(result)
            continue
        failures.append(f"{action} {result.get('_id')}: {status} {result.get('error')}")
    if failures:
        raise ElasticWriteError(f"{len(failures)} bulk item(s) failed, first: {failures[0]}")
    return conflicts


def _open_at(field: str, at: str) -> dict[str, Any]:
    """Validity still open at the instant: no end, or an end strictly after it."""
    return {
        "bool": {
            "should": [
                {"bool": {"must_not": {"exists": {"field": field}}}},
                {"range": {field: {"gt": at}}},
            ],
            "minimum_should_match": 1,
        }
    }


def access_query(access: AccessFilter) -> list[dict[str, Any]]:
    """Tenant, entries granted as of the instant, validity at the instant: `bool.filter` clauses of
    every search. An entry matches unless its grant instant (`acl_since.<key>`, fixed-width text in a
    `flattened` field; absent: from the beginning) is later (schemas.principal.grants_allow)."""
    as_of = iso(access.as_of)
    later = {"gt": since_token(to_epoch_ms(access.as_of)), "lte": SINCE_MAX}
    granted = [
        {
            "bool": {
                "filter": [{"term": {"acl": entry}}],
                "must_not": [{"range": {f"acl_since.{since_key(entry)}": later}}],
            }
        }
        for entry in access.entries
    ]
    return [
        {"term": {"tenant": access.tenant}},
        {"terms": {"acl": list(access.entries)}},
        {"bool": {"should": granted, "minimum_should_match": 1}},
        {"range": {"effective_from": {"lte": as_of}}},
        _open_at("superseded_on", as_of),
    ]


SINCE_MAX = "9" * 17
"""Upper bound of every grant instant token (a range on a keyed `flattened` field needs both bounds)."""


def _keyword(**extra: Any) -> dict[str, Any]:
    return {"type": "keyword", **extra}


def passage_mapping(prefix: str, tenant: str, chunker_versions: Sequence[str]) -> dict[str, Any]:
    """Strict mapping: an unknown field is a bug, not a new dynamically typed column."""
    return {
        "dynamic": "strict",
        "_meta": _meta(prefix, tenant, chunker_versions),
        "properties": {
            "passage_id": _keyword(),
            "doc_id": _keyword(),
            "tenant": _keyword(),
            "acl": _keyword(),
            "anchor": _keyword(ignore_above=2048),
            "source_url": _keyword(ignore_above=8191),
            "chunker_version": _keyword(),
            "version": {"type": "integer"},
            "effective_from": {"type": "date"},
            "superseded_on": {"type": "date"},
            "heading_path": _keyword(ignore_above=2048),
            "title": {"type": "keyword", "index": False, "doc_values": False},
            "text": {"type": "text", "analyzer": "standard"},
            "heading": {"type": "text", "analyzer": "standard"},
            **_SEARCH_FIELDS_ADDED,
        },
    }


_SEARCH_FIELDS_ADDED: dict[str, Any] = {
    "title_text": {"type": "text", "analyzer": "standard"},
    "acl_since": {"type": "flattened"},
    "acl_entries_since": {"type": "object", "enabled": False},
}
"""Searchable fields added after generation 1 was created: put into existing mappings on first use."""


def _meta(prefix: str, tenant: str, chunker_versions: Sequence[str]) -> dict[str, Any]:
    versions = sorted(set(chunker_versions))
    return {
        "ragsync": {"prefix": prefix, "tenant": tenant, "kind": "passages", "generation": INDEX_GENERATION},
        "chunker_version": versions[-1] if len(versions) == 1 else ",".join(versions),
        "chunker_versions": versions,
    }


def passage_settings(k1: float, b: float) -> dict[str, Any]:
    """One shard (exact per-tenant statistics), no replica (single node), BM25 with k1/b.

    The standard analyzer is in the server core; language analyzers and stemmers live in
    `analysis-common`, which the integ-test distribution lacks, so the mapping does not use them.
    A 200 ms refresh interval bounds how long a `wait_for` write waits (1 s by default): every
    event is acknowledged only once visible, so the interval is the per-write latency floor.
    """
    return {
        "number_of_shards": 1,
        "number_of_replicas": 0,
        "refresh_interval": "200ms",
        "merge.policy.expunge_deletes_allowed": 0,
        "similarity": {"default": {"type": "BM25", "k1": k1, "b": b}},
    }


class ElasticLexicalIndex:
    name = "elasticsearch"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ragsync",
        k1: float = 1.2,
        b: float = 0.75,
        refresh: str = "wait_for",
        weights: FieldWeights = DEFAULT_FIELD_WEIGHTS,
    ) -> None:
        self._es = connect(url)
        self.weights = weights
        self.prefix = check_prefix(prefix)
        self.k1 = k1
        self.b = b
        self._refresh = refresh
        self._lock = threading.Lock()
        self._chunkers: dict[str, set[str]] = {}
        """alias -> chunker versions recorded in its `_meta`; presence means the alias exists."""
        self._modules: list[str] | None = None

    # ---- names ---------------------------------------------------------------------------------

    def alias(self, tenant: str) -> str:
        return f"{self.prefix}-{tenant_slug(tenant)}-passages"

    def index_name(self, tenant: str) -> str:
        return f"{self.alias(tenant)}-v{INDEX_GENERATION}"

    @property
    def client(self) -> Elasticsearch:
        return self._es

    def modules(self) -> list[str]:
        """Modules and plugins of the first node (e.g. whether `reindex` exists); probed once."""
        if self._modules is None:
            info = self._es.nodes.info(metric="plugins")
            names: set[str] = set()
            for node in info["nodes"].values():
                names.update(m["name"] for m in node.get("modules", []))
                names.update(p["name"] for p in node.get("plugins", []))
            self._modules = sorted(names)
        return self._modules

    # ---- index lifecycle -----------------------------------------------------------------------

    def _ensure(self, tenant: str, chunker_versions: set[str]) -> str:
        """Create the tenant's index and alias on first write; keep `_meta.chunker_version` current."""
        alias = self.alias(tenant)
        with self._lock:
            known = self._chunkers.get(alias)
        if known is None:
            known = self._load_or_create(tenant, alias, chunker_versions)
        if not chunker_versions <= known:
            merged = known | chunker_versions
            self._es.indices.put_mapping(index=alias, meta=_meta(self.prefix, tenant, sorted(merged)))
            known = merged
        with self._lock:
            self._chunkers[alias] = known
        return alias

    def _load_or_create(self, tenant: str, alias: str, chunker_versions: set[str]) -> set[str]:
        if not self._es.indices.exists_alias(name=alias):
            index = self.index_name(tenant)
            created = False
            try:
                self._es.indices.create(
                    index=index,
                    settings=passage_settings(self.k1, self.b),
                    mappings=passage_mapping(self.prefix, tenant, sorted(chunker_versions)),
                )
                created = True
            except BadRequestError as exc:
                if exc.error != "resource_already_exists_exception":
                    raise
                # another writer created it (or one crashed before its alias): read its _meta below
            # The alias is what readers search, so it is added only once the index's shards have
            # started: an index created with its alias is visible to a reader in another process
            # before its primary starts, and a search then fails 503 (all shards failed).
            self._es.cluster.health(index=index, wait_for_status="yellow", timeout="30s")
            self._es.indices.put_alias(index=index, name=alias, is_write_index=True)
            if created:
                return set(chunker_versions)
        mapping = self._es.indices.get_mapping(index=alias)
        if any(
            field not in body["mappings"].get("properties", {})
            for body in mapping.values()
            for field in _SEARCH_FIELDS_ADDED
        ):
            # Adding a field to a strict mapping is allowed; older passages lack it until re-indexed.
            self._es.indices.put_mapping(index=alias, properties=_SEARCH_FIELDS_ADDED)
        recorded: set[str] = set()
        for body in mapping.values():
            recorded.update(body["mappings"].get("_meta", {}).get("chunker_versions", []))
        return recorded

    def passage_indexes(self) -> list[str]:
        """Every concrete passage index of this prefix (by `_meta`, so `ragsync-test-…` is never included)."""
        found = self._es.indices.get(index=f"{self.prefix}-*", expand_wildcards="all", allow_no_indices=True)
        return sorted(
            name
            for name, body in found.items()
            if body.get("mappings", {}).get("_meta", {}).get("ragsync", {}).get("prefix") == self.prefix
            and body["mappings"]["_meta"]["ragsync"].get("kind") == "passages"
        )

    def _shard_state(self, index: str) -> dict[str, int]:
        stats = self._es.indices.stats(index=index, level="shards", metric="docs")
        (copy,) = [c for c in stats["indices"][index]["shards"]["0"] if c["routing"]["primary"]]
        leases = copy.get("retention_leases", {}).get("leases", [])
        return {
            "max_seq_no": int(copy["seq_no"]["max_seq_no"]),
            "retained_from": min((int(lease["retaining_seq_no"]) for lease in leases), default=0),
            "deleted_docs": int(copy["docs"]["deleted"]),
        }

    def delete_superseded(self, before: datetime) -> list[Passage]:
        """Delete every passage superseded before the instant (retention), in every tenant index."""
        at = iso(before)
        doomed: list[Passage] = []
        for index in self.passage_indexes():
            after: list[Any] | None = None
            ops: list[dict[str, Any]] = []
            while True:
                response = self._es.search(
                    index=index,
                    query={"bool": {"filter": [{"range": {"superseded_on": {"lt": at}}}]}},
                    size=PAGE_SIZE,
                    sort=[{"passage_id": "asc"}],
                    source_excludes=["heading", *_SEARCH_FIELDS_ADDED],
                    search_after=after,
                )
                hits = response["hits"]["hits"]
                for h in hits:
                    doomed.append(doc_to_passage(h["_source"]))
                    ops.append({"delete": {"_index": index, "_id": h["_id"]}})
                if len(hits) < PAGE_SIZE:
                    break
                after = hits[-1]["sort"]
            if ops:
                for start in range(0, len(ops), BULK_CHUNK):
                    response = self._es.bulk(operations=ops[start : start + BULK_CHUNK], refresh=True)
                    raise_bulk_errors(response.body)
        return doomed

    def purge(self, timeout_s: float = PURGE_TIMEOUT_S) -> dict[str, object]:
        """Make deletions physical: expunge deleted passages from the Lucene segments.

        A deleted document stays in its segment (soft-deleted) while any retention lease may still
        need its operation; the shard's own peer-recovery lease advances every 30 s. So, per index:
        note the last operation now, flush (the translog no longer holds it), wait until every lease
        has passed it, then `_forcemerge?only_expunge_deletes=true` with `expunge_deletes_allowed: 0`,
        which rewrites every segment holding a deleted document. `complete` is True when every index
        got that far; a caller covers only deletions made before the call (see ragsync.purge).
        """
        import time

        indexes = self.passage_indexes()
        targets = {index: self._shard_state(index)["max_seq_no"] for index in indexes}
        if indexes:
            joined = ",".join(indexes)
            self._es.indices.put_settings(index=joined, settings={"index.merge.policy.expunge_deletes_allowed": 0})
            self._es.indices.flush(index=joined)
        deadline = time.monotonic() + timeout_s
        waiting = dict(targets)
        while waiting and time.monotonic() < deadline:
            waiting = {i: m for i, m in waiting.items() if self._shard_state(i)["retained_from"] <= m}
            if waiting:
                time.sleep(1.0)
        done = [i for i in indexes if i not in waiting]
        if done:
            self._es.indices.forcemerge(index=",".join(done), only_expunge_deletes=True)
        return {
            "indexes": len(indexes),
            "expunged": len(done),
            "complete": not waiting,
            "deleted_docs_left": {i: self._shard_state(i)["deleted_docs"] for i in indexes},
        }

    def purge_pending(self) -> int | None:
        """Elasticsearch says how many deleted documents a purge left (`deleted_docs_left`), not before."""
        return None

    def merge_step(self) -> bool:
        """Elasticsearch merges its segments on its own: nothing to do."""
        return False

    def passages_after(self, cursor: int, limit: int) -> list[tuple[int, Passage]]:
        """No storage order to walk: a cluster worker embeds every passage when it applies it."""
        return []

    def counts_by_tenant(self) -> dict[str, int]:
        """Passages stored per tenant over every passage index of this prefix (a terms aggregation)."""
        indexes = self.passage_indexes()
        if not indexes:
            return {}
        response = self._es.search(
            index=",".join(indexes),
            size=0,
            aggregations={"tenants": {"terms": {"field": "tenant", "size": 10_000}}},
        )
        return {str(b["key"]): int(b["doc_count"]) for b in response["aggregations"]["tenants"]["buckets"]}

    def drop_all(self) -> None:
        """Delete every passage index of this prefix (their aliases go with them); for tests.

        Only indexes whose `_meta` names this exact prefix are deleted, so `ragsync` never
        removes `ragsync-test-…` indexes or the doc-state and audit indexes of the same prefix.
        """
        doomed = self.passage_indexes()
        if doomed:
            self._es.indices.delete(index=",".join(doomed), ignore_unavailable=True)
        with self._lock:
            self._chunkers.clear()

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

    def _passages(self, alias: str, filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Every matching passage (id, seq_no, primary_term), paged by `search_after` on passage_id."""
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
                source=False,
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

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None:
        if not passage_ids or not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        self._bulk([{"delete": {"_index": alias, "_id": doc_key(pid)}} for pid in passage_ids], refresh=True)

    def delete_doc(self, tenant: str, doc_id: str) -> None:
        if not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        ids = [h["_id"] for h in self._passages(alias, self._doc_filters(tenant, doc_id))]
        if ids:
            self._bulk([{"delete": {"_index": alias, "_id": i}} for i in ids], refresh=True)

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None:
        """Partial-document update of `acl` and its grant instants on every version; `retry_on_conflict`
        absorbs a racing write. A partial update merges objects, so the instants of entries no longer
        in `acl` may stay in `acl_since`: harmless, the filter requires the entry in `acl` as well."""
        if not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        filters = self._doc_filters(tenant, doc_id)
        for _ in range(WRITE_ATTEMPTS):
            ops: list[dict[str, Any]] = []
            for h in self._passages(alias, filters):
                ops.append({"update": {"_index": alias, "_id": h["_id"], "retry_on_conflict": 3}})
                ops.append(
                    {
                        "doc": {
                            "acl": list(acl),
                            "acl_since": since_text(since),
                            "acl_entries_since": {e: iso(t) for e, t in sorted(since.items())},
                        }
                    }
                )
            if not ops or not self._bulk(ops, refresh=True):
                return
        raise ElasticWriteError(f"set_acl {tenant}/{doc_id}: still conflicting after {WRITE_ATTEMPTS} attempts")

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None:
        """Close validity of older versions still open past the instant; never reopens one."""
        if not self._alias_exists(tenant):
            return
        alias = self.alias(tenant)
        at = iso(superseded_on)
        filters = [
            *self._doc_filters(tenant, doc_id),
            {"range": {"version": {"lt": before_version}}},
            _open_at("superseded_on", at),
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

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        text = self.query_text(query)
        if not text or not access.entries or limit <= 0:
            return []
        w = self.weights
        match = {
            "multi_match": {
                "query": text,
                "fields": [f"text^{w.text:g}", f"heading^{w.heading:g}", f"title_text^{w.title:g}"],
                "type": "most_fields",
                "operator": "or",
            }
        }
        with _reading("a search"):
            response = self._es.search(
                index=self.alias(access.tenant),
                query={"bool": {"must": [match], "filter": access_query(access)}},
                min_score=floor,
                size=limit,
                sort=[{"_score": "desc"}, {"passage_id": "asc"}],
                track_scores=True,
                source_excludes=["heading", *_SEARCH_FIELDS_ADDED],
                ignore_unavailable=True,
                allow_no_indices=True,
            )
        return [Hit(passage=doc_to_passage(h["_source"]), score=float(h["_score"])) for h in response["hits"]["hits"]]

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        """An `ids` filter beside the permission filter, in one search of the tenant's alias."""
        wanted = list(dict.fromkeys(passage_ids))
        if not wanted or not access.entries:
            return []
        with _reading("a passage look-up"):
            response = self._es.search(
                index=self.alias(access.tenant),
                query={"bool": {"filter": [{"ids": {"values": [doc_key(p) for p in wanted]}}, *access_query(access)]}},
                size=len(wanted),
                source_excludes=["heading", *_SEARCH_FIELDS_ADDED],
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
                source_excludes=["heading", *_SEARCH_FIELDS_ADDED],
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
        self._es.close()
