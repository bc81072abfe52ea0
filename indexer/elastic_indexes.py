"""A tenant's passage index over its life: created on first write behind its alias with the configured
analyzer (refused when the server lacks it or the index was built with another), superseded versions
deleted for retention, deletions purged from the segments, every index of a prefix listed or dropped.

`ElasticLexicalIndex` (indexer.elastic) adds the passages' writes and reads on top.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

from elasticsearch import BadRequestError, Elasticsearch

from indexer.elastic_client import BULK_CHUNK, PAGE_SIZE, check_prefix, connect, raise_bulk_errors, tenant_slug
from indexer.elastic_mapping import (
    ANALYZER_MODULE,
    INDEX_GENERATION,
    SEARCH_FIELDS_ADDED,
    index_meta,
    mapped_analyzer,
    passage_mapping,
    passage_settings,
    search_fields_added,
)
from indexer.payload import doc_to_passage, iso
from indexer.ports import DEFAULT_LEXICAL_ANALYZER, LexicalAnalyzer, StoreUnavailable
from schemas.passages import Passage

PURGE_TIMEOUT_S = 45.0
"""A purge waits this long for the shards' retention leases (renewed every 30 s) to pass its deletions."""


class ElasticPassageIndexes:
    """Names, creation and maintenance of one prefix's passage indexes (one per tenant)."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ragsync",
        k1: float = 1.2,
        b: float = 0.75,
        analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER,
    ) -> None:
        if analyzer not in ("standard", "english"):
            raise ValueError(f"unknown lexical analyzer {analyzer!r} (one of standard, english)")
        self._es = connect(url)
        self.analyzer: LexicalAnalyzer = analyzer
        self.prefix = check_prefix(prefix)
        self.k1 = k1
        self.b = b
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
            self._es.indices.put_mapping(index=alias, meta=index_meta(self.prefix, tenant, sorted(merged)))
            known = merged
        with self._lock:
            self._chunkers[alias] = known
        return alias

    def _load_or_create(self, tenant: str, alias: str, chunker_versions: set[str]) -> set[str]:
        if not self._es.indices.exists_alias(name=alias):
            index = self.index_name(tenant)
            created = False
            if self.analyzer == "english" and ANALYZER_MODULE not in self.modules():
                raise StoreUnavailable(
                    f"lexical_analyzer = 'english' needs Elasticsearch's {ANALYZER_MODULE} module,"
                    " which this server lacks (use lexical_analyzer = 'standard', or a distribution with the module)"
                )
            try:
                self._es.indices.create(
                    index=index,
                    settings=passage_settings(self.k1, self.b),
                    mappings=passage_mapping(self.prefix, tenant, sorted(chunker_versions), self.analyzer),
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
        for index, body in mapping.items():
            if mapped_analyzer(body) != self.analyzer:
                # Fails closed: a query analysed one way against terms indexed another misses passages.
                raise StoreUnavailable(
                    f"index {index} was built with the {mapped_analyzer(body)!r} analyzer and lexical_analyzer"
                    f" is {self.analyzer!r}: set it back, or re-index the tenant into a new index"
                )
        if any(
            field not in body["mappings"].get("properties", {})
            for body in mapping.values()
            for field in SEARCH_FIELDS_ADDED
        ):
            # Adding a field to a strict mapping is allowed; older passages lack it until re-indexed.
            self._es.indices.put_mapping(index=alias, properties=search_fields_added(self.analyzer))
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
                    source_excludes=["heading", *SEARCH_FIELDS_ADDED],
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
