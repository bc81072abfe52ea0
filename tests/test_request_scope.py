"""One request works out each embedding, sentence list and term set once (issue 22, answers under load), and
the next request reuses them from a short-lived memo (schemas._memo) that can never show a revoked passage.
With the real embedding model (all-MiniLM-L6-v2) and the real stores, never a stub."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conftest import make_passage
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.embedding_cache import CachedEmbedder, SqliteEmbeddingCache, request_scope
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import embedding_text
from indexer.sqlite_fts import SqliteLexicalIndex
from query.extractive import ExtractiveModel
from query.reading import _qualifier_patterns, _strip_qualifier
from query.rerank import SentenceReranker
from query.retrieval import RetrievalSettings, Retriever
from query.sentences import content_terms, sentences, stem
from query.worker import QueryWorker
from schemas.principal import Principal

ANN = Principal(tenant="acme", user="ann", groups=("staff",))
TEXTS = (
    "The archive service stores monthly snapshots of every project. A snapshot older than seven years is "
    "deleted permanently by the nightly sweep. Restores take up to four hours.",
    "Project archives appear in the console under the Archive tab for every operator.",
    "Refunds are paid to the original payment method within thirty days of the request.",
)


class Counting:
    """The real model, counting what it is asked."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.model_name, self.dim = inner, inner.model_name, inner.dim
        self.queries = 0

    def embed(self, texts: Sequence[str]) -> Any:
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> Any:
        self.queries += 1
        return self.inner.embed_query(text)


class CountingCache(SqliteEmbeddingCache):
    """The SQLite embedding cache, counting the keys it is asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked = 0

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        self.asked += len(keys)
        return super().get_many(keys)

    def put_many(self, items: Mapping[bytes, bytes]) -> None:
        super().put_many(items)


def test_one_ask_embeds_the_question_once_and_reads_each_sentence_once(tmp_path: Path, embedder: Any) -> None:
    model = Counting(embedder)
    cache = CountingCache(tmp_path / "embeddings.db")
    cached = CachedEmbedder(model, cache)
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    vector = EdgeVectorIndex(tmp_path / "vectors", embedder.dim)
    passages = [make_passage(t, anchor=f"p-{i}", heading_path=("Archive",)) for i, t in enumerate(TEXTS)]
    try:
        lexical.upsert(passages)
        vector.upsert(passages, cached.embed([embedding_text(p) for p in passages]))
        retriever = Retriever(
            lexical, vector, cached, None, RetrievalSettings(dense_floor=0.0), SentenceReranker(cached)
        )
        worker = QueryWorker(retriever, ExtractiveModel(cached), "secret")
        cache.asked = 0
        question = "When is a snapshot older than seven years deleted by the nightly sweep?"
        result = worker.ask(ANN, question)
        assert result.answered and len(result.trace.searches) == 1
        # Dense retrieval, the reranker and the answering model share one question vector (before: 3 runs).
        assert model.queries == 1
        # The reranker reads every sentence and passage vector once; the model's are the same texts.
        ranked = len([s for p in passages for s in sentences(p.text)]) + len(passages)
        assert cache.asked == ranked
        # The next ask of the same question reuses its vector and every sentence's (the memo), and
        # reads nothing from the cache again.
        asked = cache.asked
        again = worker.ask(ANN, question)
        assert model.queries == 1 and cache.asked == asked
        assert again.public() == result.public()
        # A question not asked before is embedded once, inside a request scope or not.
        cached.embed_query("archive")
        cached.embed_query("archive")
        assert model.queries == 2
    finally:
        lexical.close()
        vector.close()
        cached.close()


def test_a_scope_gives_the_same_vectors_and_terms_as_no_scope(tmp_path: Path, embedder: Any) -> None:
    cached = CachedEmbedder(embedder, tmp_path / "embeddings.db")
    texts = [embedding_text(make_passage(t)) for t in TEXTS]
    try:
        plain, plain_q = cached.embed(texts), cached.embed_query("snapshots")
        plain_terms = [content_terms(t) for t in TEXTS]
        with request_scope():
            assert (cached.embed(texts) == plain).all() and (cached.embed(texts[::-1]) == plain[::-1]).all()
            assert (cached.embed_query("snapshots") == plain_q).all()
            assert [content_terms(t) for t in TEXTS] == plain_terms
            assert isinstance(content_terms(TEXTS[0]), frozenset)  # shared by requests: nobody may change it
            assert sentences(TEXTS[0]) == sentences(TEXTS[0])
    finally:
        cached.close()


def _reference_stem(word: str) -> str:
    """stem() as it was before its fast path (the suffix loop for every word)."""
    for suffix in ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


@given(st.text(alphabet="abdegilnorsty", max_size=12))
def test_stem_equals_the_reference_on_every_word(word: str) -> None:
    assert stem(word) == _reference_stem(word)


def _reference_strip(question: str, name: str) -> str | None:
    """set_aside's step as it was: three patterns compiled for the name, the first that matches removes."""
    for pattern in _qualifier_patterns(name):
        stripped, n = pattern.subn("", question, count=1)
        if n:
            return stripped
    return None


_PIECES = st.sampled_from(
    ["What", "does", "Rocket Skates", "cost", "for", "order", "ticket", "the", "my", "case", "no.", "number", "#",
     "(", ")", ",", ":", "?", ".", " ", "  ", "\n", "on", "re", "Invoice", "PO", "A-17", "3-4", "9-9", "#512",
     "PO-2024-7", "12", "3.12", "x", "\x00"]
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(st.lists(_PIECES, max_size=14), st.sampled_from(["3-4", "9-9", "#512", "PO-2024-7", "12", "a-17", "A-17"]))
def test_stripping_a_qualifier_equals_the_patterns_compiled_per_name(pieces: list[str], name: str) -> None:
    question = " ".join(pieces)
    assert _strip_qualifier(question, name) == _reference_strip(question, name)


def test_stripping_a_qualifier_examples() -> None:
    for question, name in [
        ("What does Rocket Skates cost for order 3-4?", "3-4"),
        ("What is JSONDecodeError a subclass of? (ticket 1003-417)", "1003-417"),
        ("Ticket 9-9: how long is the refund window?", "9-9"),
        ("How long, ticket #512?", "#512"),
        ("What is 12 (case 12) about (case 12)?", "12"),
    ]:
        assert _strip_qualifier(question, name) == _reference_strip(question, name) is not None
