"""The Elasticsearch audit chain's documents (indexer.elastic_audit): one record, or a block of
consecutive records created with one request. Pure functions."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from indexer.audit_chain import ChainRecord, canonical
from indexer.elastic_state import STORED_ONLY

T = TypeVar("T")

BLOCK_FIELDS: dict[str, Any] = {"last_seq": {"type": "long"}, "links": STORED_ONLY}
"""A block's fields beside the one-record layout's (`kind`, `tenant`, ... then list every record's)."""

MAX_BLOCK_LINKS = 64
"""Records per block at most (the writer's turn takes what was queued, up to this)."""

MAX_BLOCK_CHARS = 8 * 1024 * 1024
"""A block's records' JSON at most (a deletion lists up to MAX_AUDITED_IDS IDs: about 0.5 MB)."""


def links_of(src: dict[str, Any]) -> list[tuple[ChainRecord, dict[str, Any]]]:
    """The records of a stored chain document, each with its filter fields: one, or a block's. Pure."""
    if "links" not in src:
        fields: dict[str, Any] = {k: src[k] for k in ("event_id", "tenant", "doc_id", "store") if k in src}
        record = ChainRecord(int(src["seq"]), src["kind"], json.loads(src["body"]), src["prev_hash"], src["hash"])
        return [(record, fields)]
    return [
        (ChainRecord(int(e["seq"]), e["kind"], json.loads(e["body"]), e["prev_hash"], e["hash"]), e["fields"])
        for e in json.loads(src["links"])
    ]


def chain_document(links: list[tuple[ChainRecord, dict[str, str | None]]]) -> dict[str, Any]:
    """What one create stores for consecutive records: the one-record layout for one, else a block. Pure."""
    entries = [(link, {k: v for k, v in fields.items() if v is not None}) for link, fields in links]
    if len(entries) == 1:
        link, fields = entries[0]
        return {
            "seq": link.seq,
            "kind": link.kind,
            **fields,
            "body": canonical(link.body),
            "prev_hash": link.prev_hash,
            "hash": link.hash,
        }
    keys = ("event_id", "tenant", "doc_id", "store")
    return {
        "seq": entries[0][0].seq,
        "last_seq": entries[-1][0].seq,
        "kind": sorted({link.kind for link, _ in entries}),
        **{k: sorted({f[k] for _, f in entries if k in f}) for k in keys},
        "links": canonical(
            [
                {
                    "seq": link.seq,
                    "kind": link.kind,
                    "body": canonical(link.body),
                    "prev_hash": link.prev_hash,
                    "hash": link.hash,
                    "fields": fields,
                }
                for link, fields in entries
            ]
        ),
    }


def blocks(batch: list[T], chars: Callable[[T], int]) -> list[list[T]]:
    """The batch cut into blocks of at most MAX_BLOCK_LINKS records and about MAX_BLOCK_CHARS."""
    out: list[list[T]] = []
    size = 0
    for item in batch:
        n = chars(item)
        if not out or len(out[-1]) >= MAX_BLOCK_LINKS or size + n > MAX_BLOCK_CHARS:
            out.append([])
            size = 0
        out[-1].append(item)
        size += n
    return out
