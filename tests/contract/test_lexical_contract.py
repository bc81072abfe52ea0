"""LexicalIndex contract: every adapter (SQLite FTS5, Elasticsearch) must pass all of it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from concurrent_writes import revoke_then_delete_twelve
from conftest import NOW, make_passage

from indexer.ports import FieldWeights
from schemas.principal import AccessFilter

STAFF = AccessFilter("acme", ("group:staff", "user:ann"), NOW)


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.passage_id for h in hits]


def test_finds_by_terms_and_heading(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage("Refunds are paid within 14 days of the request.", anchor="a-1"),
            make_passage("The cafeteria opens at 8 in the morning.", anchor="b-1"),
            make_passage("Paid within thirty days.", anchor="c-1", heading_path=("Invoices",)),
        ]
    )
    hits = lexical_index.search("refund request", STAFF, 10, 0.0)
    assert ids(hits)[0] == "doc.md@1#a-1"
    assert "doc.md@1#b-1" not in ids(hits)
    assert ids(lexical_index.search("invoices", STAFF, 10, 0.0)) == ["doc.md@1#c-1"]
    assert hits[0].passage.text.startswith("Refunds are paid")


def test_tenant_isolation_with_identical_text(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage("Secret merger plan for project falcon.", tenant="acme", anchor="x-1"),
            make_passage("Secret merger plan for project falcon.", tenant="globex", anchor="x-1"),
        ]
    )
    acme = lexical_index.search("merger falcon", STAFF, 10, 0.0)
    assert [h.passage.tenant for h in acme] == ["acme"]
    globex = lexical_index.search("merger falcon", AccessFilter("globex", ("group:staff",), NOW), 10, 0.0)
    assert [h.passage.tenant for h in globex] == ["globex"]
    assert lexical_index.count("acme") == 1 and lexical_index.count("globex") == 1


def test_acl_filter_and_empty_acl_fails_closed(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage("Salary bands for engineers.", acl=("group:hr",), anchor="hr-1"),
            make_passage("Salary bands for managers.", acl=("user:ann",), anchor="ann-1"),
            make_passage("Salary bands for nobody.", acl=(), anchor="none-1"),
        ]
    )
    assert ids(lexical_index.search("salary bands", STAFF, 10, 0.0)) == ["doc.md@1#ann-1"]
    hr = AccessFilter("acme", ("group:hr", "user:bob"), NOW)
    assert ids(lexical_index.search("salary bands", hr, 10, 0.0)) == ["doc.md@1#hr-1"]
    assert lexical_index.search("salary bands", AccessFilter("acme", (), NOW), 10, 0.0) == []


def test_effective_dates_and_as_of(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage(
                "Travel allowance is 50 euros.",
                version=1,
                anchor="t-1",
                effective_from=NOW - timedelta(days=10),
                superseded_on=NOW - timedelta(days=1),
            ),
            make_passage(
                "Travel allowance is 70 euros.", version=2, anchor="t-1", effective_from=NOW - timedelta(days=1)
            ),
            make_passage(
                "Travel allowance is 90 euros.", version=3, anchor="t-1", effective_from=NOW + timedelta(days=5)
            ),
        ]
    )
    now_hits = ids(lexical_index.search("travel allowance", STAFF, 10, 0.0))
    assert now_hits == ["doc.md@2#t-1"]
    past = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=5))
    assert ids(lexical_index.search("travel allowance", past, 10, 0.0)) == ["doc.md@1#t-1"]
    boundary = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=1))
    assert ids(lexical_index.search("travel allowance", boundary, 10, 0.0)) == ["doc.md@2#t-1"]
    future = AccessFilter("acme", STAFF.entries, NOW + timedelta(days=6))
    assert ids(lexical_index.search("travel allowance", future, 10, 0.0)) == ["doc.md@2#t-1", "doc.md@3#t-1"]


def test_supersede_keeps_old_versions_answerable_as_of_their_dates(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage(
                "Laptops are replaced every 3 years.", version=1, anchor="l-1", effective_from=NOW - timedelta(days=100)
            )
        ]
    )
    lexical_index.upsert(
        [
            make_passage(
                "Laptops are replaced every 4 years.", version=2, anchor="l-1", effective_from=NOW - timedelta(days=10)
            )
        ]
    )
    lexical_index.supersede("acme", "doc.md", 2, NOW - timedelta(days=10))
    assert ids(lexical_index.search("laptops replaced", STAFF, 10, 0.0)) == ["doc.md@2#l-1"]
    old = AccessFilter("acme", STAFF.entries, NOW - timedelta(days=50))
    assert ids(lexical_index.search("laptops replaced", old, 10, 0.0)) == ["doc.md@1#l-1"]
    assert lexical_index.count("acme", "doc.md") == 2
    # A later supersede with an earlier instant tightens; one with a later instant does not reopen.
    lexical_index.supersede("acme", "doc.md", 2, NOW)
    assert ids(lexical_index.search("laptops replaced", STAFF, 10, 0.0)) == ["doc.md@2#l-1"]


def test_revocation_and_deletion_visible_to_next_query(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage("Quarterly numbers are confidential.", anchor="q-1"),
            make_passage("Quarterly numbers are discussed on Monday.", doc_id="other.md", anchor="q-1"),
        ]
    )
    assert len(lexical_index.search("quarterly numbers", STAFF, 10, 0.0)) == 2
    lexical_index.set_acl("acme", "doc.md", ["group:board"], {})
    assert ids(lexical_index.search("quarterly numbers", STAFF, 10, 0.0)) == ["other.md@1#q-1"]
    board = AccessFilter("acme", ("group:board",), NOW)
    assert ids(lexical_index.search("quarterly numbers", board, 10, 0.0)) == ["doc.md@1#q-1"]
    lexical_index.delete_doc("acme", "other.md")
    assert lexical_index.search("quarterly numbers", STAFF, 10, 0.0) == []
    assert lexical_index.count("acme", "other.md") == 0


def test_a_deletion_given_the_listed_passages_removes_every_version_and_nothing_else(lexical_index: Any) -> None:
    lexical_index.upsert(
        [
            make_passage("Severance terms, draft.", anchor="s-1"),
            make_passage("Severance terms, final.", version=2, anchor="s-1"),
            make_passage("Severance terms of another document.", doc_id="other.md", anchor="s-1"),
        ]
    )
    listed = [p.passage_id for p in lexical_index.doc_passages("acme", "doc.md")]
    assert sorted(listed) == ["doc.md@1#s-1", "doc.md@2#s-1"]
    lexical_index.delete_doc("acme", "doc.md", listed=listed)
    assert lexical_index.count("acme", "doc.md") == 0
    assert ids(lexical_index.search("severance terms", STAFF, 10, 0.0)) == ["other.md@1#s-1"]


def test_upsert_is_idempotent_and_delete_passages(lexical_index: Any) -> None:
    p = make_passage("Parking permits are issued by facilities.", anchor="p-1")
    lexical_index.upsert([p])
    lexical_index.upsert([p])
    assert lexical_index.count("acme") == 1
    lexical_index.upsert([make_passage("Parking permits are issued by security.", anchor="p-1")])
    hits = lexical_index.search("parking permits", STAFF, 10, 0.0)
    assert len(hits) == 1 and "security" in hits[0].passage.text
    lexical_index.delete_passages("acme", ["doc.md@1#p-1"])
    assert lexical_index.count("acme") == 0


def test_floor_drops_weak_hits(lexical_index: Any) -> None:
    lexical_index.upsert(
        [make_passage(f"Filler passage number {i} about gardening and plants.", anchor=f"f-{i}") for i in range(8)]
        + [make_passage("Kubernetes upgrade runbook for kubernetes clusters.", anchor="k-1")]
    )
    hits = lexical_index.search("kubernetes gardening", STAFF, 20, 0.0)
    assert len(hits) == 9
    top = hits[0].score
    assert ids(hits)[0] == "doc.md@1#k-1"
    floored = lexical_index.search("kubernetes gardening", STAFF, 20, top * 0.99)
    assert ids(floored) == ["doc.md@1#k-1"]
    assert lexical_index.search("kubernetes", STAFF, 20, top * 100) == []


@pytest.mark.parametrize(
    "query",
    [
        "tenant:globex",
        "*",
        "acl:*",
        'text:"x" OR tenant:globex',
        "(a OR b) AND NOT c~2 ^3 [x TO y]",
        "NEAR(a b)",
        '"unbalanced',
        "{}[]()\\/:!",
        "x" * 10_000,
        "falcon " * 2000,
    ],
)
def test_adversarial_queries_neither_error_nor_widen_scope(lexical_index: Any, query: str) -> None:
    lexical_index.upsert(
        [
            make_passage("Project falcon tenant globex acl staff.", tenant="globex", anchor="g-1"),
            make_passage("Project falcon restricted.", acl=("group:board",), anchor="b-1"),
            make_passage("Project falcon open notes.", anchor="o-1"),
        ]
    )
    hits = lexical_index.search(query, STAFF, 10, 0.0)
    assert all(h.passage.tenant == "acme" and "group:staff" in h.passage.acl for h in hits)


def test_title_heading_and_body_are_weighted_apart(lexical_index: Any) -> None:
    """Field weights apply at query time: each of title, heading path and body can lead or count for nothing."""
    title_only = make_passage("Records are kept for seven years.", anchor="t-1").model_copy(
        update={"title": "Retention schedule"}
    )
    heading_only = make_passage("Records are kept for seven years.", anchor="h-1", heading_path=("Retention",))
    body_only = make_passage("Retention of records is seven years.", anchor="b-1")
    # Fillers with a title and a heading give every field collection statistics, so "retention" has an idf > 0 in each.
    fillers = [
        make_passage(f"Unrelated filler text number {i}.", anchor=f"f-{i}", heading_path=("Filler",)).model_copy(
            update={"title": "Filler page"}
        )
        for i in range(6)
    ]
    lexical_index.upsert([title_only, heading_only, body_only, *fillers])
    assert set(ids(lexical_index.search("retention", STAFF, 10, 0.0))) == {
        "doc.md@1#t-1",
        "doc.md@1#h-1",
        "doc.md@1#b-1",
    }
    lexical_index.weights = FieldWeights(title=0.0, heading=5.0, text=1.0)
    assert ids(lexical_index.search("retention", STAFF, 10, 0.001)) == ["doc.md@1#h-1", "doc.md@1#b-1"]
    lexical_index.weights = FieldWeights(title=5.0, heading=0.0, text=1.0)
    assert ids(lexical_index.search("retention", STAFF, 10, 0.001)) == ["doc.md@1#t-1", "doc.md@1#b-1"]


def test_inventory_lists_every_version_with_the_acl_the_filter_matches(lexical_index: Any) -> None:
    from indexer.ports import StoredPassage

    lexical_index.upsert(
        [
            make_passage("old wording", anchor="a-1"),
            make_passage("new wording", version=2, anchor="a-1"),
            make_passage("other doc", doc_id="other.md", anchor="o-1"),
            make_passage("other tenant", tenant="globex", anchor="a-1"),
        ]
    )
    lexical_index.set_acl("acme", "doc.md", ["user:ceo", "group:hr"], {})
    assert lexical_index.inventory("acme", "doc.md") == [
        StoredPassage("doc.md@1#a-1", 1, ("group:hr", "user:ceo")),
        StoredPassage("doc.md@2#a-1", 2, ("group:hr", "user:ceo")),
    ]
    lexical_index.delete_doc("acme", "doc.md")
    assert lexical_index.inventory("acme", "doc.md") == []
    assert lexical_index.inventory("nobody", "doc.md") == []
    assert [s.passage_id for s in lexical_index.inventory("globex", "doc.md")] == ["doc.md@1#a-1"]


def test_passages_by_id_apply_the_permission_filter(lexical_index: Any) -> None:
    """Hydration of dense hits and cached rankings: the filter is in the store's query."""
    lexical_index.upsert(
        [
            make_passage("Open to staff.", anchor="s-1"),
            make_passage("Board only.", anchor="b-1", acl=("group:board",)),
            make_passage("Not yet valid.", anchor="f-1", effective_from=NOW + timedelta(days=3)),
            make_passage("Globex staff.", anchor="s-1", tenant="globex"),
            make_passage("Second version.", version=2, anchor="s-1", heading_path=("Part", "Two")),
        ]
    )
    wanted = ["doc.md@1#s-1", "doc.md@1#b-1", "doc.md@1#f-1", "doc.md@2#s-1", "missing@1#x"]
    got = {p.passage_id: p for p in lexical_index.passages(STAFF, wanted)}
    assert set(got) == {"doc.md@1#s-1", "doc.md@2#s-1"}
    assert got["doc.md@1#s-1"].tenant == "acme" and got["doc.md@1#s-1"].text == "Open to staff."
    assert got["doc.md@2#s-1"].heading_path == ("Part", "Two")
    assert lexical_index.passages(AccessFilter("acme", (), NOW), wanted) == []
    assert lexical_index.passages(STAFF, []) == []
    lexical_index.set_acl("acme", "doc.md", ["group:board"], {})
    assert lexical_index.passages(STAFF, wanted) == []
    # Every stored passage of the document, whatever its ACL or date: what a deletion must reach.
    assert sorted(p.passage_id for p in lexical_index.doc_passages("acme", "doc.md")) == sorted(
        ["doc.md@1#s-1", "doc.md@1#b-1", "doc.md@1#f-1", "doc.md@2#s-1"]
    )
    lexical_index.delete_doc("acme", "doc.md")
    assert lexical_index.doc_passages("acme", "doc.md") == []
    assert lexical_index.doc_passages("nobody", "doc.md") == []


def test_grant_instants_admit_an_entry_only_from_its_instant_on(lexical_index: Any) -> None:
    """Access per version (issue 18): an entry of the ACL admits as of an instant only from its grant
    instant on, in search and in the read-back of IDs, and set_acl replaces the instants too."""
    lexical_index.upsert([make_passage("Quarterly numbers are confidential.", anchor="q-1", acl=("group:hr",))])
    granted = NOW - timedelta(days=3)
    lexical_index.set_acl("acme", "doc.md", ["group:hr", "group:staff"], {"group:staff": granted})
    staff_before = AccessFilter("acme", ("group:staff",), granted - timedelta(seconds=1))
    staff_at = AccessFilter("acme", ("group:staff",), granted)
    hr_before = AccessFilter("acme", ("group:hr",), granted - timedelta(days=1))
    assert lexical_index.search("quarterly numbers", staff_before, 10, 0.0) == []
    assert lexical_index.passages(staff_before, ["doc.md@1#q-1"]) == []
    assert ids(lexical_index.search("quarterly numbers", staff_at, 10, 0.0)) == ["doc.md@1#q-1"]
    assert ids(lexical_index.search("quarterly numbers", hr_before, 10, 0.0)) == ["doc.md@1#q-1"], "no instant: always"
    # A principal with two entries is admitted through whichever holds at the instant.
    both = AccessFilter("acme", ("group:hr", "group:staff"), granted - timedelta(seconds=1))
    assert len(lexical_index.passages(both, ["doc.md@1#q-1"])) == 1
    lexical_index.set_acl("acme", "doc.md", ["group:staff"], {"group:staff": granted + timedelta(days=1)})
    assert lexical_index.passages(staff_at, ["doc.md@1#q-1"]) == [], "replaced, not merged"
    (held,) = lexical_index.inventory("acme", "doc.md")
    assert held.acl == ("group:staff",) and [e for e, _ in held.since] == ["group:staff"]


# ---- retention, physical purge and upkeep: declared on the port, answered by every adapter ----


def test_retention_deletes_only_what_was_superseded_before_the_cutoff(lexical_index: Any) -> None:
    old = make_passage("aardvark retired wording", doc_id="old.md", superseded_on=NOW - timedelta(days=10))
    recent = make_passage("aardvark recent wording", doc_id="recent.md", superseded_on=NOW - timedelta(days=1))
    live = make_passage("aardvark current wording", doc_id="live.md")
    other = make_passage("aardvark elsewhere", tenant="globex", doc_id="x.md")
    lexical_index.upsert([old, recent, live, other])
    lexical_index.flush()
    assert lexical_index.counts_by_tenant() == {"acme": 3, "globex": 1}
    removed = lexical_index.delete_superseded(NOW - timedelta(days=5))
    assert [p.passage_id for p in removed] == [old.passage_id] and removed[0].text == old.text
    assert lexical_index.delete_superseded(NOW - timedelta(days=5)) == []  # nothing left to do
    assert lexical_index.counts_by_tenant() == {"acme": 2, "globex": 1}
    assert lexical_index.count("acme", "old.md") == 0 and lexical_index.count("acme", "recent.md") == 1


def test_purge_completes_and_leaves_nothing_pending(lexical_index: Any) -> None:
    lexical_index.upsert([make_passage("zebra gone soon", doc_id="gone.md"), make_passage("zebra kept")])
    lexical_index.flush()
    lexical_index.delete_doc("acme", "gone.md")
    lexical_index.flush()
    before = lexical_index.purge_pending()
    assert before is None or before > 0  # a store that can say reports the unmerged deletion
    details = lexical_index.purge()
    assert details.get("complete", True) and details.get("checkpoint_complete", True), details
    assert lexical_index.purge_pending() in (None, 0)
    assert ids(lexical_index.search("zebra", STAFF, 10, 0.0)) == [make_passage("zebra kept").passage_id]


def test_upkeep_steps_are_bounded_and_walk_storage_order(lexical_index: Any) -> None:
    passages = [make_passage(f"yak number {i}", anchor=f"r-{i}") for i in range(5)]
    lexical_index.upsert(passages)
    lexical_index.flush()
    steps = 0
    while lexical_index.merge_step():  # False once nothing is left to merge (at once where the store merges itself)
        steps += 1
        assert steps < 1000
    walked: list[tuple[int, Any]] = []
    cursor = 0
    while batch := lexical_index.passages_after(cursor, 2):
        assert len(batch) <= 2 and all(pos > cursor for pos, _ in batch)
        walked.extend(batch)
        cursor = batch[-1][0]
    # Every passage once, or none where the store has no storage order (a cluster worker embeds as it applies).
    assert sorted(p.passage_id for _, p in walked) in ([], sorted(p.passage_id for p in passages))


def test_the_default_analyzer_matches_whole_words_on_every_adapter(lexical_index: Any) -> None:
    """Both profiles analyse words the same way by default (lexical_analyzer = "standard": lower case,
    no stemming), so a question ranks the same tokens whichever store answers it."""
    lexical_index.upsert([make_passage("Refunds are paid within 14 days.", anchor="r-1")])
    assert lexical_index.analyzer == "standard"
    assert ids(lexical_index.search("REFUNDS", STAFF, 10, 0.0)) == ["doc.md@1#r-1"]
    assert lexical_index.search("refund", STAFF, 10, 0.0) == []
    assert lexical_index.search("pay", STAFF, 10, 0.0) == []


def test_twelve_concurrent_revocations_then_deletions_are_each_visible_when_their_call_returns(
    lexical_index: Any,
) -> None:
    """The worker acknowledges an event when the store's call returns, from several appliers at once:
    each revocation and deletion must be in effect for the next search by then, whatever the adapter
    does with concurrent calls. Adapters that declare `combines_writes` (Elasticsearch) send the
    twelve in two writes (the first, held in flight, and one for the eleven queued behind it)."""
    docs = [f"d{i:02d}.md" for i in range(12)]
    lexical_index.upsert(
        [make_passage(f"Quarterly figures {d}.", doc_id=d, anchor=f"a-{v}", version=v) for d in docs for v in (1, 2)]
    )
    assert len(lexical_index.search("quarterly figures", STAFF, 100, 0.0)) == 24
    board = AccessFilter("acme", ("group:board",), NOW)

    def revoked(doc: str) -> bool:
        staff = {h.passage.doc_id for h in lexical_index.search("quarterly figures", STAFF, 100, 0.0)}
        granted = [h for h in lexical_index.search("quarterly figures", board, 100, 0.0) if h.passage.doc_id == doc]
        return doc not in staff and len(granted) == 2

    def deleted(doc: str) -> bool:
        found = {h.passage.doc_id for h in lexical_index.search("quarterly figures", board, 100, 0.0)}
        return doc not in found and lexical_index.count("acme", doc) == 0

    revoke_then_delete_twelve(lexical_index, docs, revoked, deleted)
    assert lexical_index.search("quarterly figures", board, 100, 0.0) == []
