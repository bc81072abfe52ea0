"""A revocation or deletion written to Elasticsearch is searchable when the adapter returns, even when
the index's scheduled refresh is slow, against the real local server.

Why it matters: the worker confirms an event, and clears its deny entry, once every store's write has
returned (indexer.sink), and from then on the query side trusts the store's permission filter alone
(indexer.deny). A write that returned before a refresh made it searchable would let the very next
search find the old access or the deleted text. The index here refreshes on its own only every 2 s (the
adapter's own interval is 200 ms), so a write that returned without a refresh of its own, or without
waiting for one, is still found by a search from another client right after it returns; the first test
shows that the probe does find such a write. Candidate rounds that confirm on a cheaper signal must pass
this (bench/README "Thirteenth round": `refresh=wait_for`, and a `_bulk` without a refresh followed by
a shared index refresh, both measured and not kept).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import NOW, make_passage, require_service, unique

from schemas.principal import AccessFilter

ES = "http://127.0.0.1:9200"
STAFF = AccessFilter("acme", ("group:staff",), NOW)
BOARD = AccessFilter("acme", ("group:board",), NOW)

pytestmark = pytest.mark.cluster


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    """A writer and a second client on the same indexes (another worker, or the query side)."""
    require_service("elasticsearch")
    from indexer.elastic import ElasticLexicalIndex

    prefix = unique("ragsync-test-")
    writer = ElasticLexicalIndex(ES, prefix=prefix)
    reader = ElasticLexicalIndex(ES, prefix=prefix)
    yield writer, reader
    writer.drop_all()
    writer.close()
    reader.close()


def refresh_every(index: Any, interval: str) -> None:
    settings = {"index": {"refresh_interval": interval}}
    index.client.indices.put_settings(index=index.index_name("acme"), settings=settings)


def doc_ids(hits: list[Any]) -> list[str]:
    return sorted(h.passage.doc_id for h in hits)


def test_the_probe_finds_a_write_no_refresh_made_searchable(pair: tuple[Any, Any]) -> None:
    writer, reader = pair
    writer.upsert([make_passage("Merger timeline draft.", anchor="m-1")])
    refresh_every(writer, "2s")
    alias = writer.alias("acme")
    writer.client.bulk(operations=[{"delete": {"_index": alias, "_id": "doc.md@1#m-1"}}], refresh=False)
    assert doc_ids(reader.search("merger", STAFF, 10, 0.0)) == ["doc.md"]


def test_revocations_and_deletions_are_searchable_when_the_call_returns(pair: tuple[Any, Any]) -> None:
    writer, reader = pair
    writer.upsert(
        [
            make_passage("Merger timeline draft.", anchor="m-1"),
            make_passage("Merger timeline final.", version=2, anchor="m-1"),
            make_passage("Merger press statement.", doc_id="press.md", anchor="p-1"),
            make_passage("Merger board minutes.", doc_id="minutes.md", anchor="b-1"),
            make_passage("Merger board vote.", doc_id="minutes.md", anchor="b-2"),
            make_passage("Merger staff letter.", doc_id="letter.md", anchor="l-1"),
        ]
    )
    assert len(reader.search("merger", STAFF, 10, 0.0)) == 6
    refresh_every(writer, "2s")

    writer.set_acl("acme", "doc.md", ["group:board"], {})  # every version
    assert doc_ids(reader.search("merger", STAFF, 10, 0.0)) == ["letter.md", "minutes.md", "minutes.md", "press.md"]
    assert reader.passages(STAFF, ["doc.md@1#m-1", "doc.md@2#m-1"]) == []
    assert len(reader.passages(BOARD, ["doc.md@1#m-1", "doc.md@2#m-1"])) == 2

    writer.delete_doc("acme", "press.md")  # its passages searched for
    assert reader.count("acme", "press.md") == 0
    writer.delete_doc("acme", "minutes.md", listed=["minutes.md@1#b-1", "minutes.md@1#b-2"])  # deleted by _id
    assert reader.count("acme", "minutes.md") == 0
    writer.delete_passages("acme", ["letter.md@1#l-1"])
    assert reader.search("merger", STAFF, 10, 0.0) == []
    assert reader.passages(STAFF, ["letter.md@1#l-1", "press.md@1#p-1", "minutes.md@1#b-1"]) == []
