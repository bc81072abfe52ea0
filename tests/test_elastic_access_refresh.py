"""A revocation or deletion written to Elasticsearch is searchable when the adapter returns, without
forcing a refresh (indexer.elastic.ACCESS_REFRESH), against the real local server.

Why it matters: the worker confirms an event, and clears its deny entry, once every store's write has
returned (indexer.sink). Between the entry's clear and the store's refresh a query would find the old
access or the deleted text again, so the write must not return before a refresh has made it
searchable. The index here gets a slow scheduled refresh (1 s, against the adapter's 200 ms), so a
write that returned without waiting for one would still be found by the very next search from another
client; the probe itself is first shown to find a write that nothing refreshed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import NOW, make_passage, require_service, unique

from schemas.principal import AccessFilter

ES = "http://127.0.0.1:9200"
STAFF = AccessFilter("acme", ("group:staff",), NOW)

pytestmark = pytest.mark.cluster


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    """A writer and a second client on the same indexes (another worker or the query side)."""
    require_service("elasticsearch")
    from indexer.elastic import ElasticLexicalIndex

    prefix = unique("ragsync-test-")
    writer = ElasticLexicalIndex(ES, prefix=prefix)
    reader = ElasticLexicalIndex(ES, prefix=prefix)
    yield writer, reader
    writer.drop_all()
    writer.close()
    reader.close()


def slow_refresh(index: Any, interval: str) -> None:
    index.client.indices.put_settings(index=index.index_name("acme"), settings={"index": {"refresh_interval": interval}})


def forced_refreshes(index: Any, monkeypatch: Any) -> list[bool]:
    """Whether each `_bulk` item of the adapter's client forced a refresh (Elasticsearch says so per item)."""
    seen: list[bool] = []
    real: Callable[..., Any] = index.client.bulk

    def bulk(*args: Any, **kwargs: Any) -> Any:
        response = real(*args, **kwargs)
        seen.extend(bool(next(iter(item.values())).get("forced_refresh")) for item in response.body["items"])
        return response

    monkeypatch.setattr(index.client, "bulk", bulk)
    return seen


def test_the_probe_finds_a_write_nothing_refreshed(pair: tuple[Any, Any]) -> None:
    writer, reader = pair
    writer.upsert([make_passage("Merger timeline draft.", anchor="m-1")])
    slow_refresh(writer, "-1")
    alias = writer.alias("acme")
    writer.client.bulk(operations=[{"delete": {"_index": alias, "_id": "doc.md@1#m-1"}}], refresh=False)
    assert [h.passage.anchor for h in reader.search("merger", STAFF, 10, 0.0)] == ["m-1"]


def test_revocations_and_deletions_are_searchable_on_return_without_a_forced_refresh(
    pair: tuple[Any, Any], monkeypatch: Any
) -> None:
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
    slow_refresh(writer, "1s")
    forced = forced_refreshes(writer, monkeypatch)
    board = AccessFilter("acme", ("group:board",), NOW)

    writer.set_acl("acme", "doc.md", ["group:board"], {})  # every version
    assert sorted(h.passage.doc_id for h in reader.search("merger", STAFF, 10, 0.0)) == [
        "letter.md",
        "minutes.md",
        "minutes.md",
        "press.md",
    ]
    assert reader.passages(STAFF, ["doc.md@1#m-1", "doc.md@2#m-1"]) == []
    assert len(reader.passages(board, ["doc.md@1#m-1", "doc.md@2#m-1"])) == 2

    writer.delete_doc("acme", "press.md")  # searched for
    assert reader.count("acme", "press.md") == 0
    writer.delete_doc("acme", "minutes.md", listed=["minutes.md@1#b-1", "minutes.md@1#b-2"])  # deleted by _id
    assert reader.count("acme", "minutes.md") == 0
    writer.delete_passages("acme", ["letter.md@1#l-1"])
    assert reader.search("merger", STAFF, 10, 0.0) == []
    assert reader.passages(STAFF, ["letter.md@1#l-1", "press.md@1#p-1", "minutes.md@1#b-1"]) == []

    assert forced and not any(forced), f"{sum(forced)} of {len(forced)} bulk items forced a refresh"
