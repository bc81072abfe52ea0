"""The memo that answers share (schemas._memo; issue 22, answers under load): bounded in time and size,
and never a way to see a passage the asker lost. The access tests ask through the real stores (SQLite FTS5,
qdrant-edge) and the real embedding model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import NOW, make_passage

from indexer.embedding_cache import CachedEmbedder
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import embedding_text
from indexer.sqlite_fts import SqliteLexicalIndex
from query.extractive import ExtractiveModel
from query.rerank import SentenceReranker
from query.retrieval import RetrievalSettings, Retriever
from query.worker import QueryWorker
from schemas._memo import TextMemo
from schemas.principal import Principal

ANN = Principal(tenant="acme", user="ann", groups=("staff",))
TEXT = (
    "The archive service stores monthly snapshots of every project. A snapshot older than seven years is "
    "deleted permanently by the nightly sweep. Restores take up to four hours."
)
QUESTION = "When is a snapshot older than seven years deleted by the nightly sweep?"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_at_most_its_ttl_even_in_use() -> None:
    """A hit does not make an entry young again: text worked out once is gone ttl_s later, used or not
    (so a deleted document's sentences leave the memo within ttl_s of being memoised)."""
    clock = Clock()
    memo: TextMemo[str, int] = TextMemo(ttl_s=10.0, clock=clock)
    computed: list[str] = []

    def value(key: str) -> int:
        return memo.get(key, lambda: computed.append(key) or len(computed))

    assert value("used") == 1 and value("idle") == 2
    clock.now += 5.0  # half the ttl: the generation holding both becomes the old one
    assert value("used") == 1  # a hit in the old generation (not made young again)
    clock.now += 2.0
    assert value("used") == 1
    clock.now += 3.0  # ttl_s after they were worked out: the old generation is dropped
    assert memo.peek("idle") is None
    assert value("used") == 3  # worked out again, although it was read meanwhile
    clock.now += 10.0
    assert memo.peek("used") is None and len(memo) == 0


def test_an_idle_process_drops_its_entries_without_being_asked() -> None:
    """The sweeper ages every memo: nothing has to call the memo for its text to go."""
    import time

    memo: TextMemo[str, str] = TextMemo(ttl_s=0.5)
    memo.put("text", "a copy of the text")
    assert memo.peek("text") == "a copy of the text"
    deadline = time.monotonic() + 10.0
    while (memo._young or memo._old) and time.monotonic() < deadline:
        time.sleep(0.1)  # no get, peek or put meanwhile
    assert not memo._young and not memo._old


def test_the_memo_holds_at_most_max_entries() -> None:
    memo: TextMemo[int, int] = TextMemo(ttl_s=1e9, max_entries=100, clock=Clock())
    for i in range(10_000):
        memo.get(i, lambda i=i: i)  # type: ignore[misc]
        assert len(memo) <= 100
    memo.discard(9_999)
    assert memo.peek(9_999) is None


def _world(tmp_path: Path, embedder: Any) -> tuple[SqliteLexicalIndex, EdgeVectorIndex, CachedEmbedder, QueryWorker]:
    cached = CachedEmbedder(embedder, tmp_path / "embeddings.db")
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    vector = EdgeVectorIndex(tmp_path / "vectors", embedder.dim)
    passages = [
        make_passage(TEXT, doc_id="archive.md", heading_path=("Archive",)),
        make_passage("Refunds are paid within thirty days.", doc_id="refunds.md", anchor="r-1"),
    ]
    lexical.upsert(passages)
    vector.upsert(passages, cached.embed([embedding_text(p) for p in passages]))
    retriever = Retriever(lexical, vector, cached, None, RetrievalSettings(dense_floor=0.0), SentenceReranker(cached))
    return lexical, vector, cached, QueryWorker(retriever, ExtractiveModel(cached), "secret")


def test_a_revocation_takes_effect_on_the_next_ask_with_the_memo_warm(tmp_path: Path, embedder: Any) -> None:
    lexical, vector, cached, worker = _world(tmp_path, embedder)
    try:
        first = worker.ask(ANN, QUESTION)
        assert first.answered and {c.passage_id.split("@")[0] for c in first.claims} == {"archive.md"}
        lexical.set_acl("acme", "archive.md", ["group:hr"], {"group:hr": NOW})
        vector.set_acl("acme", "archive.md", ["group:hr"], {"group:hr": NOW})
        after = worker.ask(ANN, QUESTION)
        assert "archive.md" not in " ".join(after.evidence_ids)
        assert not any(c.passage_id.startswith("archive.md@") for c in after.claims)
        hr = Principal(tenant="acme", user="hal", groups=("hr",))
        assert worker.ask(hr, QUESTION).answered  # the grant it has now is served, from the same memo
    finally:
        lexical.close()
        vector.close()
        cached.close()


def test_a_deleted_text_leaves_the_vector_memo_with_the_cache(tmp_path: Path, embedder: Any) -> None:
    lexical, vector, cached, worker = _world(tmp_path, embedder)
    try:
        assert worker.ask(ANN, QUESTION).answered
        text = embedding_text(make_passage(TEXT, doc_id="archive.md", heading_path=("Archive",)))
        assert cached._vectors.peek(text) is not None
        removed, keys = cached.forget([text])
        assert removed == 1 and cached.present(keys) == 0
        assert cached._vectors.peek(text) is None
    finally:
        lexical.close()
        vector.close()
        cached.close()


def test_a_memoised_passage_is_always_its_rows_current_one(tmp_path: Path) -> None:
    """The lexical store's read memo (indexer.sqlite_fts_schema.read_hit) is keyed by the whole row: a
    passage read again after its ACL changed carries the new ACL and grant instants, never the memoised
    old one, through a search and through a read by ID; a revoked passage is not read at all."""
    from datetime import timedelta

    from schemas.principal import AccessFilter

    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    try:
        passage = make_passage("Refunds are paid within thirty days.", doc_id="refunds.md")
        lexical.upsert([passage])
        staff = AccessFilter.for_principal(ANN, NOW)
        assert lexical.search("refunds", staff, 10, 0.0)[0].passage.acl == ("group:staff",)
        assert lexical.passages(staff, [passage.passage_id])[0].acl == ("group:staff",)
        since = {"group:staff": NOW - timedelta(days=1), "group:hr": NOW - timedelta(days=1)}
        lexical.set_acl("acme", "refunds.md", ["group:hr", "group:staff"], since)
        searched = lexical.search("refunds", staff, 10, 0.0)[0].passage
        for read in (searched, lexical.passages(staff, [passage.passage_id])[0]):
            assert set(read.acl) == {"group:hr", "group:staff"}
            assert set(read.acl_since) == {"group:hr", "group:staff"}
        lexical.set_acl("acme", "refunds.md", ["group:hr"], {"group:hr": NOW - timedelta(days=1)})
        assert lexical.search("refunds", staff, 10, 0.0) == []
        assert lexical.passages(staff, [passage.passage_id]) == []
    finally:
        lexical.close()


def test_read_hit_is_row_hit_whatever_the_row_says() -> None:
    """The memo gives exactly the passage the row gives: rows alike but for one column (the tenant, the
    ACL, a grant instant, the validity, the text...) are never served each other's passage."""
    from indexer.sqlite_fts_schema import ROW_FIELDS, read_hit, row_hit

    base: dict[str, object] = {
        "rid": 1, "passage_id": "doc.md@1#a", "doc_id": "doc.md", "version": 1, "anchor": "a", "tenant": "acme",
        "acl": '["group:staff"]', "acl_since": '{"group:staff":0}', "effective_ms": 0, "superseded_ms": None,
        "heading_path": '["H"]', "title": "T", "text": "Refunds are paid within thirty days.",
        "source_url": "file:///doc.md", "chunker_version": "test", "score": 1.5,
    }  # fmt: skip
    changed: dict[str, object] = {
        "passage_id": "doc.md@1#b", "doc_id": "other.md", "version": 2, "anchor": "b", "tenant": "globex",
        "acl": '["group:hr"]', "acl_since": '{"group:staff":5}', "effective_ms": 7, "superseded_ms": 9,
        "heading_path": '["G"]', "title": "U", "text": "Refunds are paid within ten days.",
        "source_url": "file:///other.md", "chunker_version": "v2",
    }  # fmt: skip
    assert set(changed) == set(ROW_FIELDS)
    assert read_hit(base) == row_hit(base)
    for name, value in changed.items():
        row = base | {name: value}
        assert read_hit(row) == row_hit(row), name
        assert read_hit(row).passage != read_hit(base).passage, name
        assert read_hit(base) == row_hit(base)
