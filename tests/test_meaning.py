"""Scoring by meaning with the real embedding model: the Retriever's sentence reranker and the
extractive model's sentence choice, on paraphrased questions that share no content word with the
sentence that answers them. The model is the one users run (all-MiniLM-L6-v2), never a stub.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import NOW, make_passage

from indexer.chunker import chunk_document
from indexer.embedding_cache import CachedEmbedder
from indexer.qdrant_edge import EdgeVectorIndex
from indexer.sink import embedding_text
from indexer.sqlite_fts import SqliteLexicalIndex
from query.citations import check_claims
from query.extractive import ExtractiveModel, choose
from query.ports import TOOL_SEARCH, TOOL_SUBMIT, Evidence, ModelTurn, RerankInput
from query.rerank import SentenceReranker, coverage, term_weights
from query.retrieval import RetrievalSettings, Retriever
from query.sentences import content_terms, is_pointer, named_terms, sentences
from schemas.decisions import Claim
from schemas.principal import AccessFilter, Principal

ANN = Principal(tenant="acme", user="ann", groups=("staff",))

LONG = (
    "The archive service stores monthly snapshots of every project. Snapshots are compressed with zstd "
    "and written to the cold tier. Operators can browse them in the console. A snapshot older than "
    "seven years is deleted permanently by the nightly sweep. Restores take up to four hours."
)
SHORT = "Project archives appear in the console under the Archive tab for every operator."


def test_sentences_join_prose_lines_too_short_to_quote_but_never_table_lines() -> None:
    text = "Exceptions:\nDigital goods are final.\n| Level | Band |\n| Senior engineer | 90,000 EUR |\nShort."
    assert sentences(text) == ["Exceptions:\nDigital goods are final.", "| Senior engineer | 90,000 EUR |"]


def test_a_passage_scores_as_its_best_sentence(embedder: Any) -> None:
    ranker = SentenceReranker(embedder, sentence_coverage=0.0, passage_coverage=0.0, passage_meaning=0.0)
    question = "When do old backups get thrown away for good?"
    long_score, short_score = ranker.score(question, [RerankInput("Archive", LONG), RerankInput("Archive", SHORT)])
    assert long_score > short_score
    # The whole passage's vector dilutes the one sentence that answers; its best sentence does not.
    whole = float(embedder.embed([f"Archive: {LONG}"])[0] @ embedder.embed_query(question))
    assert long_score > whole


def test_rare_question_words_in_the_same_sentence_tell_close_candidates_apart(embedder: Any) -> None:
    """Two candidates on the same topic, close in meaning: the one whose sentence holds the word only it
    has ("zstd") wins, and a word every candidate holds ("snapshots") adds nothing to either."""
    question = "Are snapshots compressed with zstd?"
    candidates = [
        RerankInput("Archive", "Snapshots are compressed before they are written to the cold tier."),
        RerankInput("Archive", "Snapshots use zstd when they are compressed for the cold tier."),
    ]
    meaning = SentenceReranker(embedder, sentence_coverage=0.0, passage_coverage=0.0, passage_meaning=0.0)
    full = SentenceReranker(embedder, passage_meaning=0.0).score(question, candidates)
    alone = meaning.score(question, candidates)
    assert full[1] - full[0] > alone[1] - alone[0]
    weights = term_weights(sorted(content_terms(question)), [content_terms(c.text) for c in candidates])
    assert weights["snapshot"] < weights["zstd"]
    assert coverage(weights, content_terms(candidates[1].text)) == 1.0


def test_the_whole_passage_counts_beside_its_best_sentence(embedder: Any) -> None:
    """An answer spread over a passage (the rule in one sentence, what it applies to in the heading or
    the next one) is what the passage's own vector carries: it adds `passage_meaning` x its cosine."""
    question = "When do old backups get thrown away for good?"
    inputs = [RerankInput("Archive", LONG, f"Archive\n{LONG}"), RerankInput("Archive", SHORT, f"Archive\n{SHORT}")]
    without = SentenceReranker(embedder, passage_meaning=0.0).score(question, inputs)
    weighted = SentenceReranker(embedder, passage_meaning=0.3).score(question, inputs)
    q = embedder.embed_query(question)
    for plus, minus, item in zip(weighted, without, inputs, strict=True):
        whole = float(embedder.embed([item.dense_text])[0] @ q)
        assert abs(plus - minus - 0.3 * whole) < 1e-5 and whole > 0.1


def test_the_reranker_reads_the_vector_the_sink_stored_and_embeds_no_passage_again(
    tmp_path: Path, embedder: Any
) -> None:
    class Counting:
        def __init__(self) -> None:
            self.model_name, self.dim, self.seen = embedder.model_name, embedder.dim, list[str]()

        def embed(self, texts: Any) -> Any:
            self.seen.extend(texts)
            return embedder.embed(texts)

        def embed_query(self, text: str) -> Any:
            return embedder.embed_query(text)

        def token_counts(self, texts: Any) -> Any:
            return embedder.token_counts(texts)

    counting = Counting()
    cached = CachedEmbedder(counting, tmp_path / "embeddings.db")
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    vector = EdgeVectorIndex(tmp_path / "vectors", embedder.dim)
    passages = [
        make_passage(LONG, anchor="long-1", heading_path=("Archive",)),
        make_passage(SHORT, anchor="short-1", heading_path=("Archive",)),
    ]
    try:
        lexical.upsert(passages)
        vector.upsert(passages, cached.embed([embedding_text(p) for p in passages]))  # as the sink does
        counting.seen.clear()
        retriever = Retriever(
            lexical, vector, cached, None, RetrievalSettings(dense_floor=0.0), SentenceReranker(cached)
        )
        ranking = retriever.rank("When do old backups get thrown away for good?", AccessFilter.for_principal(ANN, NOW))
        assert ranking.reranked and counting.seen  # the sentences were embedded ...
        # ... and nothing else: the passages' own vectors were cache hits of what the sink embedded.
        assert sorted(counting.seen) == sorted(f"Archive: {s}" for p in passages for s in sentences(p.text))
    finally:
        lexical.close()
        vector.close()
        cached.close()


def test_retriever_reranks_the_fused_top_by_sentences(tmp_path: Path, embedder: Any) -> None:
    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    vector = EdgeVectorIndex(tmp_path / "vectors", embedder.dim)
    passages = [
        make_passage(LONG, anchor="long-1", heading_path=("Archive",)),
        make_passage(SHORT, anchor="short-1", heading_path=("Archive",)),
        make_passage("The cafeteria serves lunch from noon to two.", anchor="food-1", heading_path=("Food",)),
    ]
    try:
        lexical.upsert(passages)
        vector.upsert(passages, embedder.embed([embedding_text(p) for p in passages]))
        access = AccessFilter.for_principal(ANN, NOW)
        settings = RetrievalSettings(dense_floor=0.0)
        question = "When do old backups get thrown away for good?"
        reranker = SentenceReranker(embedder)
        ranking = Retriever(lexical, vector, embedder, None, settings, reranker).rank(question, access)
        assert ranking.reranked and set(ranking.rerank_scores) == {pid for pid, _ in ranking.rrf}
        assert ranking.fused[0][0] == "doc.md@1#long-1"
        assert sorted(pid for pid, _ in ranking.fused) == sorted(pid for pid, _ in ranking.rrf)
        plain = Retriever(lexical, vector, embedder, None, settings).rank(question, access)
        assert not plain.reranked and plain.fused == plain.rrf
    finally:
        lexical.close()
        vector.close()


def evidence_of(*texts: tuple[str, str]) -> tuple[Evidence, ...]:
    return tuple(Evidence(f"doc@1#p-{i}", heading, text) for i, (heading, text) in enumerate(texts))


def test_meaning_picks_the_sentence_that_answers_a_paraphrase(embedder: Any) -> None:
    model = ExtractiveModel(embedder)
    evidence = evidence_of(("Archive", f"{SHORT} {LONG}"), ("Food", "The cafeteria serves lunch from noon to two."))
    question = "When do old backups get thrown away for good?"
    best = model.candidates(question, evidence)[0]  # same passage, same rank prior: meaning decides
    assert best.sentence == "A snapshot older than seven years is deleted permanently by the nightly sweep."
    # Word overlap alone has nothing to go on: no content word of the question is in the answer.
    assert ExtractiveModel().candidates(question, evidence) == []


def test_answers_quote_the_best_sentence_and_pass_the_four_citation_checks(embedder: Any) -> None:
    model = ExtractiveModel(embedder)
    chunks = chunk_document(f"# Archive\n\n{LONG}\n\n{SHORT}\n", "markdown")
    passages = {
        f"doc.md@1#{c.anchor}": make_passage(c.text, anchor=c.anchor, heading_path=c.heading_path) for c in chunks
    }
    evidence = tuple(Evidence(pid, " > ".join(p.heading_path), p.text) for pid, p in passages.items())
    question = "How old must a project snapshot be before the nightly sweep deletes it?"
    call = model.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,)))
    assert call.input.get("claims"), call
    claims = [Claim.model_validate(c) for c in call.input["claims"]]
    assert check_claims(claims, passages) == []
    assert claims[0].quote == "A snapshot older than seven years is deleted permanently by the nightly sweep."


def test_abstains_when_nothing_is_close_in_meaning(embedder: Any) -> None:
    model = ExtractiveModel(embedder)
    evidence = evidence_of(("Archive", LONG), ("Food", "The cafeteria serves lunch from noon to two."))
    question = "Who won the football world cup in 2018?"
    call = model.decide(ModelTurn(question, evidence, (TOOL_SEARCH, TOOL_SUBMIT), (question,)))
    assert call.name == TOOL_SEARCH
    final = model.decide(ModelTurn(question, evidence, (TOOL_SUBMIT,), (question, call.input["query"])))
    assert final.input == {"abstain": True, "reason": "no passage answers the question"}


def test_a_name_no_passage_mentions_means_abstain_whatever_the_score(embedder: Any) -> None:
    """The question names an identifier the evidence never mentions: sentences on the same topic, close in
    meaning and sharing most words, are about something else. The same question naming an identifier
    that one passage does mention is answered from that passage."""
    model = ExtractiveModel(embedder)
    evidence = evidence_of(
        ("Init and Destroy Functions", "Both yylex_init and yylex_init_extra return 0 (zero) on success."),
        ("Init and Destroy Functions", "The function yylex_destroy frees the resources used by the scanner."),
    )
    asked = "What does yylex_init return on success?"
    answered = model.decide(ModelTurn(asked, evidence, (TOOL_SUBMIT,)))
    assert answered.input.get("claims"), answered
    assert answered.input["claims"][0]["passage_id"] == "doc@1#p-0"
    unmentioned = "What does yytables_fload return on success?"
    assert model.unmentioned_names(unmentioned, evidence) == ["yytables_fload"]
    lenient = ExtractiveModel(embedder, min_score=0.0)  # by score alone, it would quote the yylex_init sentence
    assert choose(lenient.candidates(unmentioned, evidence), lenient.min_meaning, 0.0, 0.0)
    call = lenient.decide(ModelTurn(unmentioned, evidence, (TOOL_SUBMIT,)))
    assert call.input == {"abstain": True, "reason": "no passage answers the question"}


def test_named_terms_are_identifiers_products_and_acronyms_not_plain_words() -> None:
    names = named_terms("Does heapq.heappop or --keep-index work with %option, C++20, PostgreSQL and TCP?")
    assert names == ["heapq.heappop", "--keep-index", "%option", "C++20", "PostgreSQL", "TCP"]
    assert named_terms("How do I wipe everything my build generated but keep files I made by hand?") == []


def test_a_cross_reference_is_never_the_quote(embedder: Any) -> None:
    model = ExtractiveModel(embedder)
    pointer = "See git-shell(1) for how you might use the login shell to restrict the user's access."
    evidence = evidence_of(("update hook", f"{pointer} The hook runs once per ref being updated."))
    assert is_pointer(pointer) and not is_pointer("Seeing the log is enough to find the commit.")
    assert all(c.sentence != pointer for c in model.candidates("How do I restrict the login shell access?", evidence))


def test_inflections_are_one_term() -> None:
    assert content_terms("change rules") == content_terms("changes rule") == content_terms("changed rules")
