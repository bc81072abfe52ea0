"""Sentence vectors through the one write path (IndexSink, qdrant-edge with sentence vectors): written
with the passage, found by max-sim, and gone from the store and the embedding cache exactly when the
passage is (ACL change, new version, deletion)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from test_indexing import STAFF, acl, delete, upsert

from indexer.cache import InProcessCache
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import IndexSink
from indexer.sqlite_fts import SqliteLexicalIndex
from indexer.state import SqliteDeletionAudit, SqliteDocStates
from query.retrieval import passage_sentence_texts
from schemas.principal import AccessFilter

DOC = (
    "# Travel\n\nTrain tickets are booked by the office manager. Hotels are booked by each traveller"
    " themselves.\n\n# Food\n\nLunch is served at noon in the canteen."
)


def _keys(cached: Any, texts: list[str]) -> list[bytes]:
    from indexer.embedding_cache import embedding_key

    return [embedding_key(cached.model_name, t) for t in texts]


def _sink(tmp_path: Path, embedder: Any) -> tuple[IndexSink, EdgeVectorIndex, Any, SqliteLexicalIndex]:
    from indexer.embedder import CachedEmbedder

    cached = CachedEmbedder(embedder, tmp_path / "emb.db")
    vector = EdgeVectorIndex(tmp_path / "vec", cached.dim, sentences=True)
    lexical = SqliteLexicalIndex(tmp_path / "lex.db")
    docs = SqliteDocStates(tmp_path / "s.db")
    sink = IndexSink(
        lexical,
        vector,
        cached,
        docs,
        SqliteDeletionAudit(tmp_path / "s.db"),
        InProcessCache(),
        sentence_texts=passage_sentence_texts,
    )
    return sink, vector, cached, lexical


def test_sentence_vectors_are_written_searched_and_removed_with_their_passage(tmp_path: Path, embedder: Any) -> None:
    sink, vector, cached, lexical = _sink(tmp_path, embedder)
    sink.apply(upsert(1, DOC))
    question = cached.embed_query("who reserves a hotel room?")
    (travel, *_) = vector.search_sentences(question, STAFF, 5, -1.0)
    (passage,) = lexical.passages(STAFF, [travel.passage_id])
    best = max(float(cached.embed([t])[0] @ question) for t in passage_sentence_texts(passage))
    assert abs(travel.score - best) < 1e-4, "the store's max-sim is the best sentence's cosine"
    sentence_texts = [t for p in lexical.doc_passages("acme", "t:p.md") for t in passage_sentence_texts(p)]
    assert len(sentence_texts) == 3 and cached.present(_keys(cached, sentence_texts)) == 3

    sink.apply(acl(2, ("group:board",)))
    assert vector.search_sentences(question, STAFF, 5, -1.0) == [], "a revoked passage is never a sentence hit"
    sink.apply(upsert(3, DOC.replace("noon", "one o'clock"), acl=("group:staff",)))
    regranted = AccessFilter("acme", ("group:staff",), datetime.now(UTC) + timedelta(days=1))  # granted again now
    found = vector.search_sentences(cached.embed_query("when is lunch?"), regranted, 5, -1.0)
    assert {h.version for h in found} == {3}, "the superseded version's sentences are not found"

    sink.apply(delete(4))
    assert vector.search_sentences(question, STAFF, 5, -1.0) == [] and vector.count("acme") == 0
    assert cached.present(_keys(cached, sentence_texts)) == 0, "the sentence vectors leave the embedding cache too"


def test_the_worker_batch_embeds_sentences_ahead(tmp_path: Path, embedder: Any) -> None:
    sink, vector, cached, _ = _sink(tmp_path, embedder)
    event = upsert(1, DOC)
    vectors = sink.embed_upserts([event])
    misses = cached.misses
    assert misses == 2 + 3, "two passages and their three sentences, in one pass"
    sink.apply(event, vectors[event.event_id])
    assert cached.misses == misses, "apply reads the sentence vectors from the cache"
    assert vector.search_sentences(cached.embed_query("who books train tickets?"), STAFF, 5, 0.3)


def test_the_reader_and_reranker_embed_no_sentence_at_serve_time(tmp_path: Path, embedder: Any) -> None:
    """The sentence texts stored are the ones the reranker and the extractive model embed, under the same
    embedding-cache keys: once ingested, serving a question embeds no sentence (issue 22 item 3)."""
    from query.rerank import SentenceReranker
    from query.retrieval import _rerank_input

    sink, _, cached, lexical = _sink(tmp_path, embedder)
    sink.apply(upsert(1, DOC))
    passages = lexical.doc_passages("acme", "t:p.md")
    misses = cached.misses
    scores = SentenceReranker(cached).score("who books hotels?", [_rerank_input(p) for p in passages])
    assert len(scores) == len(passages) and cached.misses == misses


def test_retention_removes_superseded_sentence_vectors_and_their_cache_entries(tmp_path: Path, embedder: Any) -> None:
    from conftest import MODEL_PATH

    from ragsync.purge import Purger
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    settings = Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, sentence_vectors=True)
    components = build_embedded(settings)
    try:
        sink = components.sink()
        old = upsert(1, "# Old\n\nThe first wording of the page is kept for a while.")
        sink.apply(old)
        sink.apply(
            upsert(
                2, "# New\n\nThe second wording of the page replaces it.", effective=old.occurred_at + timedelta(days=3)
            )
        )
        sink.flush()
        vector, cached = components.vector, components.embedder
        assert vector is not None and vector.sentence_vectors and cached is not None
        (first,) = [p for p in components.lexical.doc_passages("acme", "t:p.md") if p.version == 1]
        keys = _keys(cached, list(passage_sentence_texts(first)))
        assert cached.present(keys) == len(keys) == 1
        then = AccessFilter("acme", ("group:staff",), old.occurred_at + timedelta(days=1))
        query = cached.embed_query("the first wording")
        assert [h.version for h in vector.search_sentences(query, then, 5, -1.0)] == [1]
        assert Purger(components).expire_superseded(days=0) == 1
        assert vector.search_sentences(query, then, 5, -1.0) == [] and cached.present(keys) == 0
    finally:
        components.close()
