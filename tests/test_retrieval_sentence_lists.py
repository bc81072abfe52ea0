"""The Retriever's sentence list (stored sentence vectors, max-sim) and per-sentence list (each sentence
of a longer question searched alone): off by default, fused with their own RRF weights when on, read
back through the lexical store with the permission filter like every dense hit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_indexing import STAFF, acl, upsert
from test_sentence_vectors_sink import _sink

from query.retrieval import RetrievalSettings, Retriever
from query.rrf import fuse

DOC = (
    "# Travel\n\nTrain tickets are booked by the office manager. Hotels are booked by each traveller"
    " themselves.\n\n# Food\n\nLunch is served at noon in the canteen. Coffee is free all day.\n\n"
    "# Leave\n\nHolidays are requested in the HR portal two weeks ahead."
)
SITUATION = "I am going to a conference in Lyon next month. Who reserves the hotel room for me?"


@pytest.fixture
def stores(tmp_path: Path, embedder: Any) -> Any:
    sink, vector, cached, lexical = _sink(tmp_path, embedder)
    sink.apply(upsert(1, DOC))
    sink.apply(
        upsert(
            1, "# Board\n\nHotels for the board are booked by the CEO's assistant.", doc="t:b.md", acl=("group:board",)
        )
    )
    return vector, cached, lexical


def _retriever(stores: Any, **settings: Any) -> Retriever:
    vector, cached, lexical = stores
    return Retriever(lexical, vector, cached, None, RetrievalSettings(**settings), None)


def ids(hits: list[Any]) -> list[str]:
    return [h.passage.passage_id for h in hits]


def test_both_lists_are_off_by_default(stores: Any) -> None:
    ranking = _retriever(stores).rank(SITUATION, STAFF)
    assert ranking.sentence == [] and ranking.subquery == []
    expected = fuse([ids(ranking.lexical), ids(ranking.dense)])
    assert ranking.fused == expected


def test_the_sentence_list_is_fused_with_its_weight(stores: Any) -> None:
    vector, cached, _ = stores
    ranking = _retriever(stores, sentence_weight=0.5, dense_floor=0.1).rank(SITUATION, STAFF)
    stored = vector.search_sentences(cached.embed_query(SITUATION), STAFF, 50, 0.1)
    assert ids(ranking.sentence) == [h.passage_id for h in stored] and ranking.sentence
    assert all(h.passage.doc_id == "t:p.md" for h in ranking.sentence), "the board's passage is never listed"
    assert ranking.sentence[0].passage.passage_id == "t:p.md@1#travel-1"
    lists = [ids(ranking.lexical), ids(ranking.dense), ids(ranking.sentence)]
    assert ranking.fused == fuse(lists, weights=[1.0, 1.0, 0.5])


def test_the_per_sentence_list_takes_each_passage_at_its_best_sentence(stores: Any) -> None:
    retriever = _retriever(stores, subquery_weight=1.0, dense_floor=0.0)
    ranking = retriever.rank(SITUATION, STAFF)
    first, second = "I am going to a conference in Lyon next month.", "Who reserves the hotel room for me?"
    best: dict[str, float] = {}
    for part in (first, second):
        for h in retriever.dense_hits(part, STAFF):
            best[h.passage.passage_id] = max(best.get(h.passage.passage_id, -1.0), h.score)
    assert [(h.passage.passage_id, h.score) for h in ranking.subquery] == sorted(
        best.items(), key=lambda t: (-t[1], t[0])
    )
    assert retriever.rank("Who reserves the hotel room?", STAFF).subquery == [], "one sentence: no list"
    assert ranking.fused == fuse([ids(ranking.lexical), ids(ranking.dense), ids(ranking.subquery)])


def test_a_revoked_passage_leaves_the_sentence_list_at_once(tmp_path: Path, embedder: Any) -> None:
    sink, vector, cached, lexical = _sink(tmp_path, embedder)
    sink.apply(upsert(1, DOC))
    retriever = Retriever(lexical, vector, cached, None, RetrievalSettings(sentence_weight=1.0), None)
    assert retriever.rank(SITUATION, STAFF).sentence
    sink.apply(acl(2, ("group:board",)))
    ranking = retriever.rank(SITUATION, STAFF)
    assert ranking.sentence == [] and ranking.fused == []
