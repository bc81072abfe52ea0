"""Elasticsearch-specific behaviour of the lexical adapter, against the real local server.

The LexicalIndex contract (tests/contract) covers what every adapter must do; these tests pin
down what only this adapter can get wrong: per-tenant indexes and statistics, the mapping and
BM25 settings it creates, query construction (match only, capped), floors, and that revocation
and deletion are visible to the very next query from any client, with no sleep.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from conftest import NOW, make_passage, require_service, unique

from schemas.passages import Passage, make_passage_id
from schemas.principal import AccessFilter

ES = "http://127.0.0.1:9200"
STAFF = AccessFilter("acme", ("group:staff", "user:ann"), NOW)

pytestmark = pytest.mark.cluster


@pytest.fixture
def make_index() -> Iterator[Callable[..., Any]]:
    """Indexes with unique prefixes, dropped afterwards (also when the test fails)."""
    require_service("elasticsearch")
    from indexer.elastic import ElasticLexicalIndex

    made: list[Any] = []

    def factory(**kwargs: Any) -> Any:
        index = ElasticLexicalIndex(ES, prefix=kwargs.pop("prefix", None) or unique("ragsync-test-"), **kwargs)
        made.append(index)
        return index

    yield factory
    for index in made:
        index.drop_all()
        index.close()


@pytest.fixture
def index(make_index: Callable[..., Any]) -> Any:
    return make_index()


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.passage_id for h in hits]


def test_one_index_per_tenant_behind_an_alias(index: Any) -> None:
    index.upsert([make_passage("Alpha text.", tenant="acme"), make_passage("Beta text.", tenant="Globex.EU-1")])
    es = index.client
    for tenant in ("acme", "Globex.EU-1"):
        alias = index.alias(tenant)
        assert alias.startswith(index.prefix + "-") and alias.endswith("-passages")
        assert alias == alias.lower()
        assert es.indices.exists_alias(name=alias)
        backing = list(es.indices.get_alias(name=alias))
        assert backing == [index.index_name(tenant)] and backing[0].endswith("-passages-v1")
        assert es.count(index=alias)["count"] == 1
    # Case matters in tenant names, not in index names: the hash keeps them apart.
    assert index.alias("Acme") != index.alias("acme")


def test_statistics_do_not_mix_tenants(make_index: Callable[..., Any]) -> None:
    target = "Falcon migration report for the board."
    acme = [make_passage(target, tenant="acme", anchor="t-1")] + [
        make_passage(f"Cafeteria menu number {i}.", tenant="acme", anchor=f"m-{i}") for i in range(3)
    ]
    # globex: the same passage among many other falcon passages, so its idf for "falcon" is low.
    globex = [make_passage(target, tenant="globex", anchor="t-1")] + [
        make_passage(f"Falcon falcon sighting number {i} near the falcon nest.", tenant="globex", anchor=f"f-{i}")
        for i in range(12)
    ]
    alone = make_index()
    alone.upsert(acme)
    shared = make_index()
    shared.upsert(acme + globex)
    query = "falcon"
    glob = AccessFilter("globex", ("group:staff",), NOW)
    score_alone = alone.search(query, STAFF, 1, 0.0)[0].score
    acme_hit = shared.search(query, STAFF, 1, 0.0)[0]
    assert acme_hit.passage.tenant == "acme" and acme_hit.passage.anchor == "t-1"
    # acme's score depends only on acme's corpus: globex's 12 extra falcon passages change nothing.
    assert acme_hit.score == pytest.approx(score_alone, rel=1e-6)
    globex_target = next(h for h in shared.search(query, glob, 20, 0.0) if h.passage.anchor == "t-1")
    assert globex_target.score < acme_hit.score * 0.95
    assert shared.count("acme") == 4 and shared.count("globex") == 13


def test_bm25_parameters_mapping_and_meta(make_index: Callable[..., Any]) -> None:
    index = make_index(k1=0.9, b=0.4)
    index.upsert([make_passage("Mapping check.", anchor="m-1")])
    es = index.client
    name = index.index_name("acme")
    settings = es.indices.get_settings(index=name)[name]["settings"]["index"]
    assert settings["similarity"]["default"] == {"type": "BM25", "k1": "0.9", "b": "0.4"}
    assert settings["number_of_shards"] == "1"
    mapping = es.indices.get_mapping(index=name)[name]["mappings"]
    props = mapping["properties"]
    for keyword in ("tenant", "doc_id", "acl", "passage_id", "anchor", "source_url", "chunker_version", "heading_path"):
        assert props[keyword]["type"] == "keyword", keyword
    for date in ("effective_from", "superseded_on"):
        assert props[date]["type"] == "date", date
    assert props["version"]["type"] == "integer"
    assert props["text"]["type"] == "text" and props["heading"]["type"] == "text"
    assert mapping["dynamic"] == "strict"
    assert mapping["_meta"]["chunker_version"] == "test"
    assert mapping["_meta"]["ragsync"] == {
        "prefix": index.prefix,
        "tenant": "acme",
        "kind": "passages",
        "generation": 1,
    }
    # The defaults follow the constructor's defaults.
    default = make_index()
    default.upsert([make_passage("Defaults.", anchor="d-1")])
    dname = default.index_name("acme")
    similarity = es.indices.get_settings(index=dname)[dname]["settings"]["index"]["similarity"]["default"]
    assert (similarity["k1"], similarity["b"]) == ("1.2", "0.75")


def test_new_chunker_version_is_recorded_in_meta(index: Any) -> None:
    index.upsert([make_passage("Version one chunking.", anchor="v-1")])
    newer = make_passage("Version two chunking.", anchor="v-2").model_copy(update={"chunker_version": "test2"})
    index.upsert([newer])
    name = index.index_name("acme")
    meta = index.client.indices.get_mapping(index=name)[name]["mappings"]["_meta"]
    assert meta["chunker_versions"] == ["test", "test2"]


def test_heading_is_searched_and_boosted(index: Any) -> None:
    index.upsert(
        [
            make_passage("Our invoices policy is described below.", anchor="body-1", heading_path=("General",)),
            make_passage("Paid within thirty days.", anchor="head-1", heading_path=("Invoices",)),
        ]
    )
    hits = index.search("invoices", STAFF, 10, 0.0)
    assert ids(hits) == ["doc.md@1#head-1", "doc.md@1#body-1"]
    # the heading field is internal: hits come back as plain passages
    assert hits[0].passage.heading_path == ("Invoices",)


def test_min_score_floor_is_applied_by_the_server(index: Any) -> None:
    index.upsert(
        [make_passage("Kubernetes kubernetes cluster upgrade.", anchor="k-1")]
        + [make_passage(f"Gardening note {i} about kubernetes once.", anchor=f"g-{i}") for i in range(5)]
    )
    hits = index.search("kubernetes upgrade", STAFF, 10, 0.0)
    assert len(hits) == 6
    assert ids(hits)[0] == "doc.md@1#k-1" and hits[0].score > hits[1].score
    floor = hits[1].score
    floored = index.search("kubernetes upgrade", STAFF, 10, floor)
    assert ids(floored) == [h.passage.passage_id for h in hits if h.score >= floor]
    assert ids(index.search("kubernetes upgrade", STAFF, 10, (hits[0].score + floor) / 2)) == ["doc.md@1#k-1"]
    assert index.search("kubernetes upgrade", STAFF, 10, hits[0].score * 1.01) == []


def test_query_syntax_is_just_words_in_the_principals_tenant(index: Any) -> None:
    index.upsert(
        [
            make_passage("The tenant handbook for new staff.", anchor="h-1"),
            make_passage("Quarterly ACL review notes.", anchor="a-1"),
            make_passage("Unrelated cafeteria opening hours.", anchor="u-1"),
            make_passage("Tenant acl globex secrets for the board.", acl=("group:board",), anchor="b-1"),
            make_passage("Globex tenant acl document.", tenant="globex", anchor="g-1"),
        ]
    )
    hits = index.search("tenant:globex acl:*", STAFF, 10, 0.0)
    assert sorted(ids(hits)) == ["doc.md@1#a-1", "doc.md@1#h-1"]
    assert all(h.passage.tenant == "acme" and "group:staff" in h.passage.acl for h in hits)
    # Query-string syntax must not be interpreted: wildcards, field names, boolean operators.
    assert index.search("*", STAFF, 10, 0.0) == []
    assert ids(index.search("text:* OR tenant:*", STAFF, 10, 0.0)) == ["doc.md@1#h-1"]
    assert ids(index.search("cafeteria AND NOT hours", STAFF, 10, 0.0)) == ["doc.md@1#u-1"]


def test_ten_kilobyte_query_is_capped_and_still_answers(index: Any) -> None:
    from indexer.elastic import ElasticLexicalIndex

    index.upsert([make_passage("Falcon budget approved.", anchor="f-1"), make_passage("Other note.", anchor="o-1")])
    rng = random.Random(7)
    noise = " ".join("".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(1200))
    query = "falcon budget " + noise
    assert len(query) > 10_000
    assert len(ElasticLexicalIndex.query_text(query).split()) == 64
    assert ids(index.search(query, STAFF, 10, 0.0)) == ["doc.md@1#f-1"]
    assert index.search("falcon " * 2000, STAFF, 10, 0.0)[0].passage.anchor == "f-1"


def test_revocation_and_deletion_visible_to_the_next_query_from_any_client(make_index: Callable[..., Any]) -> None:
    writer = make_index()
    reader = make_index(prefix=writer.prefix)  # a second client, as in another worker process
    writer.upsert(
        [
            make_passage("Merger timeline draft.", anchor="m-1"),
            make_passage("Merger timeline final.", version=2, anchor="m-1"),
            make_passage("Merger press statement.", doc_id="press.md", anchor="p-1"),
        ]
    )
    assert len(reader.search("merger", STAFF, 10, 0.0)) == 3
    writer.set_acl("acme", "doc.md", ["group:board"], {})  # every version, no sleep afterwards
    assert ids(reader.search("merger", STAFF, 10, 0.0)) == ["press.md@1#p-1"]
    board = AccessFilter("acme", ("group:board",), NOW)
    assert sorted(ids(reader.search("merger", board, 10, 0.0))) == ["doc.md@1#m-1", "doc.md@2#m-1"]
    writer.delete_doc("acme", "press.md")
    assert reader.search("merger", STAFF, 10, 0.0) == []
    assert reader.count("acme", "press.md") == 0
    writer.delete_passages("acme", ["doc.md@1#m-1"])
    assert ids(reader.search("merger", board, 10, 0.0)) == ["doc.md@2#m-1"]


def test_unknown_tenant_reads_empty_and_writes_create_nothing(index: Any) -> None:
    nobody = AccessFilter("nobody", ("group:staff",), NOW)
    assert index.search("anything", nobody, 10, 0.0) == []
    assert index.count("nobody") == 0 and index.count("nobody", "doc.md") == 0
    index.set_acl("nobody", "doc.md", ["group:x"], {})
    index.supersede("nobody", "doc.md", 2, NOW)
    index.delete_doc("nobody", "doc.md")
    index.delete_passages("nobody", ["doc.md@1#a"])
    assert not index.client.indices.exists_alias(name=index.alias("nobody"))
    assert not index.client.indices.exists(index=index.alias("nobody"))


def test_long_passage_ids_and_many_passages_per_document(index: Any) -> None:
    long_doc = "folder/" + "x" * 900 + ".md"
    passages: list[Passage] = [
        make_passage(f"Chapter {i} of the long handbook.", doc_id=long_doc, anchor=f"c-{i}") for i in range(1200)
    ]
    index.upsert(passages)
    assert index.count("acme", long_doc) == 1200
    hit = index.search("chapter 7 handbook", STAFF, 1, 0.0)[0]
    assert hit.passage.passage_id == make_passage_id(long_doc, 1, "c-7")
    # More passages than one page of the ID listing: every one must be revoked.
    index.set_acl("acme", long_doc, ["group:board"], {})
    assert index.search("chapter handbook", STAFF, 10, 0.0) == []
    board = AccessFilter("acme", ("group:board",), NOW)
    assert len(index.search("chapter handbook", board, 2000, 0.0)) == 1200
    index.delete_doc("acme", long_doc)
    assert index.count("acme") == 0


def test_supersede_retries_when_a_passage_changed_after_it_was_read(index: Any, monkeypatch: Any) -> None:
    old = make_passage("Laptop policy three years.", version=1, anchor="l-1", effective_from=NOW - timedelta(days=99))
    index.upsert([old, make_passage("Laptop policy four years.", version=2, anchor="l-1")])
    original = index._passages
    calls: list[int] = []

    def stale_then_fresh(alias: str, filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        hits = list(original(alias, filters))
        if not calls:
            index.upsert([old])  # a concurrent rewrite: the seq_no just read is now stale
        calls.append(len(hits))
        return iter(hits)

    monkeypatch.setattr(index, "_passages", stale_then_fresh)
    index.supersede("acme", "doc.md", 2, NOW - timedelta(days=10))
    assert calls == [1, 1]  # conflict -> re-read -> applied
    assert ids(index.search("laptop policy", STAFF, 10, 0.0)) == ["doc.md@2#l-1"]
    then = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=50))
    assert ids(index.search("laptop policy", then, 10, 0.0)) == ["doc.md@1#l-1"]


def test_drop_all_touches_only_its_own_prefix(make_index: Callable[..., Any]) -> None:
    from indexer.elastic_state import ElasticDocStates

    a = make_index()
    b = make_index(prefix=a.prefix + "x")  # a prefix that `a-*` would match as a wildcard
    a.upsert([make_passage("A.", anchor="a-1")])
    b.upsert([make_passage("B.", anchor="b-1")])
    states = ElasticDocStates(ES, prefix=a.prefix)
    try:
        a.drop_all()
        assert a.count("acme") == 0
        assert b.count("acme") == 1
        assert a.client.indices.exists(index=states.index)
    finally:
        states.drop_all()
        states.close()


def test_client_major_matches_the_server_and_modules_are_probed(index: Any) -> None:
    import elasticsearch

    nodes = index.client.nodes.info(filter_path="nodes.*.version")["nodes"]
    (version,) = {str(node["version"]) for node in nodes.values()}
    major = version.partition(".")[0]
    assert major == str(elasticsearch.__versionstr__).partition(".")[0], "pin the client to the server major"
    modules = index.modules()
    assert "transport-netty4" in modules
    print(f"elasticsearch major {major}, modules: {' '.join(modules)}")


def test_a_search_elasticsearch_cannot_answer_is_a_one_line_store_error(index: Any) -> None:
    """Shards that never started (here: allocation pinned to a node that does not exist) make
    Elasticsearch answer a search with 503: the question fails with ElasticUnavailable, a
    StoreUnavailable (CLI exit 1, API 503), never a traceback or an answer from fewer rankers."""
    from indexer.elastic import ElasticUnavailable
    from indexer.ports import StoreUnavailable

    index.client.indices.create(
        index=index.alias("acme"),
        settings={"index.routing.allocation.require._name": "no-such-node", "number_of_replicas": 0},
        wait_for_active_shards="0",
    )
    try:
        with pytest.raises(ElasticUnavailable, match="HTTP 503") as raised:
            index.search("refunds", STAFF, 10, 0.0)
        assert isinstance(raised.value, StoreUnavailable) and "refunds" not in str(raised.value)
        with pytest.raises(ElasticUnavailable):
            index.passages(STAFF, ["doc.md@1#a"])
    finally:
        index.client.indices.delete(index=index.alias("acme"))


def test_an_unreachable_elasticsearch_is_a_store_error_too(index: Any) -> None:
    from conftest import free_port
    from elasticsearch import Elasticsearch

    from indexer.elastic import ElasticUnavailable

    reachable = index._es  # the server "goes away" after the index was opened: a client to a closed port
    index._es = Elasticsearch(f"http://127.0.0.1:{free_port()}", request_timeout=2, max_retries=0)
    try:
        with pytest.raises(ElasticUnavailable, match="could not be reached"):
            index.search("refunds", STAFF, 10, 0.0)
    finally:
        index._es = reachable


def test_an_index_left_without_its_alias_gets_it_and_is_used(index: Any) -> None:
    """Readers search the alias, which the adapter adds only once the index's shards have started; a writer
    that crashed between the two leaves the index alone, and the next write adds the alias and uses it."""
    from indexer.elastic_mapping import passage_mapping, passage_settings

    index.client.indices.create(  # as a writer that crashed before adding the alias left it
        index=index.index_name("acme"),
        settings=passage_settings(index.k1, index.b),
        mappings=passage_mapping(index.prefix, "acme", ["test"]),
    )
    assert not index.client.indices.exists_alias(name=index.alias("acme"))
    assert index.search("refunds", STAFF, 10, 0.0) == []  # no alias yet: nothing to read, no error
    index.upsert([make_passage("Refunds are issued within 30 days.", anchor="r-1")])
    assert index.client.indices.exists_alias(name=index.alias("acme"))
    assert ids(index.search("refunds", STAFF, 10, 0.0)) == ["doc.md@1#r-1"]


def test_english_without_analysis_common_is_refused_before_any_index_exists(make_index: Callable[..., Any]) -> None:
    """The integ-test distribution has no `english` analyzer: the adapter says so in one line and creates
    nothing (an index mapped without it would rank unlike the embedded profile's)."""
    from indexer.elastic_mapping import ANALYZER_MODULE
    from schemas.errors import StoreUnavailable

    index = make_index(analyzer="english")
    if ANALYZER_MODULE in index.modules():
        pytest.skip(f"this server has {ANALYZER_MODULE}")
    with pytest.raises(StoreUnavailable, match="needs Elasticsearch's analysis-common module"):
        index.upsert([make_passage("Refunds are issued within 30 days.", anchor="r-1")])
    assert not index.client.indices.exists(index=index.index_name("acme"))


def test_an_index_built_with_another_analyzer_refuses_writes(make_index: Callable[..., Any]) -> None:
    """Fails closed: a tenant's index keeps the analyzer it was built with, and a writer configured with
    another gets a clear error instead of silently indexing under the old one."""
    from schemas.errors import StoreUnavailable

    standard = make_index(analyzer="standard")
    standard.upsert([make_passage("Refunds are issued within 30 days.", anchor="r-1")])
    mapping = standard.client.indices.get_mapping(index=standard.alias("acme"))
    assert {body["mappings"]["properties"]["text"]["analyzer"] for body in mapping.values()} == {"standard"}
    english = make_index(prefix=standard.prefix, analyzer="english")
    with pytest.raises(StoreUnavailable, match="built with the 'standard' analyzer"):
        english.upsert([make_passage("Refunds are issued within 60 days.", anchor="r-2")])
    assert ids(standard.search("refunds", STAFF, 10, 0.0)) == ["doc.md@1#r-1"]


class Requests:
    """Counts the client's `search` and `bulk` calls (monkeypatched on the adapter's own client)."""

    def __init__(self, index: Any, monkeypatch: Any) -> None:
        self.calls: list[str] = []
        for name in ("search", "bulk"):
            real = getattr(index.client, name)
            monkeypatch.setattr(index.client, name, self._counting(name, real))

    def _counting(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{name}:refresh={kwargs['refresh']}" if name == "bulk" else name)
            return real(*args, **kwargs)

        return call


def test_acl_changes_and_deletions_queued_together_share_one_search_bulk_and_refresh(
    index: Any, monkeypatch: Any
) -> None:
    from concurrent_writes import combiners, held_first

    index.upsert([make_passage(f"Quarterly {d} figures.", doc_id=d) for d in ("a.md", "b.md", "c.md", "d.md")])
    requests = Requests(index, monkeypatch)
    board = ["group:board"]
    calls: list[Callable[[], None]] = [
        lambda: index.set_acl("acme", "a.md", board, {}),
        lambda: index.set_acl("acme", "b.md", board, {}),
        lambda: index.delete_doc("acme", "c.md"),
        lambda: index.delete_doc("acme", "d.md", listed=["d.md@1#root-1"]),
    ]
    assert held_first(combiners(index), calls) == 2
    # the held round (a.md), then one round for the rest: b.md's and c.md's passages in one search,
    # d.md's listed passage deleted by _id, all three in one `_bulk` with the one forced refresh
    assert requests.calls == ["search", "bulk:refresh=True", "search", "bulk:refresh=True"], requests.calls
    assert index.search("quarterly", STAFF, 10, 0.0) == []
    board_reader = AccessFilter("acme", ("group:board",), NOW)
    assert sorted(ids(index.search("quarterly", board_reader, 10, 0.0))) == ["a.md@1#root-1", "b.md@1#root-1"]


def test_a_deletion_of_listed_passages_searches_nothing(index: Any, monkeypatch: Any) -> None:
    index.upsert([make_passage("Budget line one.", anchor="b-1"), make_passage("Budget line two.", anchor="b-2")])
    listed = [p.passage_id for p in index.doc_passages("acme", "doc.md")]
    requests = Requests(index, monkeypatch)
    index.delete_doc("acme", "doc.md", listed=listed)
    assert requests.calls == ["bulk:refresh=True"]
    assert index.count("acme", "doc.md") == 0 and index.search("budget", STAFF, 10, 0.0) == []


def test_listed_passages_are_not_trusted_when_writes_may_not_be_searchable_yet(make_index: Callable[..., Any]) -> None:
    index = make_index(refresh="false")  # an upsert returns before its passages are searchable
    index.upsert([make_passage("Budget line one.", anchor="b-1"), make_passage("Budget line two.", anchor="b-2")])
    index.delete_doc("acme", "doc.md", listed=["doc.md@1#b-1"])  # a listing that missed b-2
    assert index.count("acme", "doc.md") == 0, "a passage the listing missed was left behind"


def test_ties_across_the_cut_are_broken_by_passage_id(index: Any, monkeypatch: Any) -> None:
    """Passages scoring the same are written in the reverse of passage_id order, so Lucene's own
    tie-break (the order they were written) keeps the last passage_ids: the cut must still keep the
    first ones. A tie within the margin is settled from one answer; one running past it asks again
    with passage_id as the second sort key."""
    from indexer.elastic import TIE_MARGIN

    index.upsert(
        [make_passage("Breaker breaker note.", anchor=f"a-{i}") for i in reversed(range(4))]
        + [make_passage("Breaker note.", anchor=f"b-{i:02d}") for i in reversed(range(6))]
        + [make_passage(f"Breaker {'word ' * 12}{i}.", anchor=f"c-{i:02d}") for i in reversed(range(2 * TIE_MARGIN))]
        + [make_passage("Tie tie tie.", anchor=f"t-{i:02d}") for i in reversed(range(2 * TIE_MARGIN))]
    )
    requests = Requests(index, monkeypatch)
    hits = index.search("breaker", STAFF, 6, 0.0)  # the cut falls inside the six tied b-passages
    assert ids(hits) == [f"doc.md@1#a-{i}" for i in range(4)] + ["doc.md@1#b-00", "doc.md@1#b-01"]
    assert len({h.score for h in hits[4:]}) == 1 and hits[3].score > hits[4].score
    assert requests.calls == ["search"]
    requests.calls.clear()
    tied = index.search("tie", STAFF, 5, 0.0)  # 2 x TIE_MARGIN tied: past the margin, asked again
    assert ids(tied) == [f"doc.md@1#t-{i:02d}" for i in range(5)]
    assert requests.calls == ["search", "search"]
    requests.calls.clear()
    assert ids(index.search("tie", STAFF, 2 * TIE_MARGIN, 0.0)) == [
        f"doc.md@1#t-{i:02d}" for i in range(2 * TIE_MARGIN)
    ]
    assert requests.calls == ["search"]  # every match came back: nothing to ask again


def test_a_search_asks_in_score_order_without_a_total_or_floor_when_nothing_ties_at_the_cut(
    index: Any, monkeypatch: Any
) -> None:
    """What lets Lucene skip postings that cannot reach the top: score order alone, no total count, no
    `min_score` for a floor of 0. Scores differ at the cut, so one request answers, in score order."""
    from indexer.elastic import TIE_MARGIN

    index.upsert([make_passage("kiwi " * (i + 1) + "and other fruit.", anchor=f"k-{i}") for i in range(8)])
    bodies: list[dict[str, Any]] = []
    real = index.client.search

    def search(*args: Any, **kwargs: Any) -> Any:
        bodies.append(kwargs["body"])
        return real(*args, **kwargs)

    monkeypatch.setattr(index.client, "search", search)
    hits = index.search("kiwi", STAFF, 3, 0.0)
    assert len(bodies) == 1
    (body,) = bodies
    assert "sort" not in body and "min_score" not in body and body["track_total_hits"] is False
    assert body["size"] == 3 + TIE_MARGIN
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert ids(hits) == ["doc.md@1#k-7", "doc.md@1#k-6", "doc.md@1#k-5"]
    assert "min_score" in index.search_request("kiwi", STAFF, 3 + TIE_MARGIN, 0.5)
