"""The shape of a tenant's passage index: mapping, settings, `_meta`, and the permission filter
every search puts over its fields (tenant, ACL entries granted as of the instant, validity)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from indexer.payload import iso, since_token
from indexer.ports import DEFAULT_LEXICAL_ANALYZER, FieldWeights, LexicalAnalyzer
from schemas._time import to_epoch_ms
from schemas.principal import AccessFilter, since_key

INDEX_GENERATION = 1
"""Suffix of the concrete index behind each tenant alias (`-v1`); bump it with a new mapping."""


def open_at(field: str, at: str) -> dict[str, Any]:
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
        open_at("superseded_on", as_of),
    ]


def search_body(
    text: str, weights: FieldWeights, access: AccessFilter, size: int, floor: float, *, tie_break: bool = False
) -> dict[str, Any]:
    """A lexical search: `multi_match` of the words over text, heading and title with their weights,
    inside the permission filter, for the top `size`.

    By default in score order alone, without counting the total: then Lucene skips the blocks of
    postings that cannot reach the top (block-max WAND / MaxScore). A secondary sort key, a total count
    (exact up to 10,000 by default) or `min_score` each turned that off, so every passage matching a
    query word was scored, twice with `min_score` (profile API, 100k passages: 6,866-31,628 scored
    against 1,135-1,645). `tie_break`: ordered by score then passage_id, the order
    ElasticLexicalIndex.search answers in; it scores every match. `min_score` is sent only for a floor
    above 0: a BM25 score is never below 0, so a floor of 0 or less drops nothing."""
    match = {
        "multi_match": {
            "query": text,
            "fields": [f"text^{weights.text:g}", f"heading^{weights.heading:g}", f"title_text^{weights.title:g}"],
            "type": "most_fields",
            "operator": "or",
        }
    }
    body: dict[str, Any] = {
        "query": {"bool": {"must": [match], "filter": access_query(access)}},
        "size": size,
        "track_total_hits": False,
        "_source": {"excludes": ["heading", *SEARCH_FIELDS_ADDED]},
    }
    if tie_break:
        body["sort"] = [{"_score": "desc"}, {"passage_id": "asc"}]
        body["track_scores"] = True
    if floor > 0:
        body["min_score"] = floor
    return body


SINCE_MAX = "9" * 17
"""Upper bound of every grant instant token (a range on a keyed `flattened` field needs both bounds)."""


def _keyword(**extra: Any) -> dict[str, Any]:
    return {"type": "keyword", **extra}


def passage_mapping(
    prefix: str, tenant: str, chunker_versions: Sequence[str], analyzer: LexicalAnalyzer = DEFAULT_LEXICAL_ANALYZER
) -> dict[str, Any]:
    """Strict mapping: an unknown field is a bug, not a new dynamically typed column."""
    return {
        "dynamic": "strict",
        "_meta": index_meta(prefix, tenant, chunker_versions),
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
            "text": {"type": "text", "analyzer": analyzer},
            "heading": {"type": "text", "analyzer": analyzer},
            **search_fields_added(analyzer),
        },
    }


def search_fields_added(analyzer: LexicalAnalyzer) -> dict[str, Any]:
    """Searchable fields added after generation 1 was created: put into existing mappings on first use."""
    return {
        "title_text": {"type": "text", "analyzer": analyzer},
        "acl_since": {"type": "flattened"},
        "acl_entries_since": {"type": "object", "enabled": False},
    }


SEARCH_FIELDS_ADDED = tuple(search_fields_added(DEFAULT_LEXICAL_ANALYZER))
"""Their names (left out of every search's `_source`)."""

ANALYZER_MODULE = "analysis-common"
"""The server module that holds the `english` analyzer (every language analyzer and stemmer)."""


def mapped_analyzer(mapping: Mapping[str, Any]) -> str:
    """The analyzer an existing index's `text` field was mapped with (`standard` when none is named)."""
    field = mapping.get("mappings", {}).get("properties", {}).get("text", {})
    return str(field.get("analyzer", "standard"))


def index_meta(prefix: str, tenant: str, chunker_versions: Sequence[str]) -> dict[str, Any]:
    versions = sorted(set(chunker_versions))
    return {
        "ragsync": {"prefix": prefix, "tenant": tenant, "kind": "passages", "generation": INDEX_GENERATION},
        "chunker_version": versions[-1] if len(versions) == 1 else ",".join(versions),
        "chunker_versions": versions,
    }


def passage_settings(k1: float, b: float) -> dict[str, Any]:
    """One shard (exact per-tenant statistics), no replica (single node), BM25 with k1/b.

    The standard analyzer is in the server core; language analyzers and stemmers live in
    `analysis-common`, which the integ-test distribution lacks, so `english` is refused there.
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
