"""The Tantivy side index of indexer.tantivy_lexical: schema, analyzers, one index per tenant shard and generation.

A side index holds postings and numbers only (nothing is stored: no field is `stored`), so the
passage text lives in SQLite alone. Each tenant has its own index (BM25 statistics never mix
tenants, as with the FTS5 tables and the Elasticsearch indexes), in a directory named by the
tenant's hash, the analyzer, the shard's first rid (indexer.tantivy_shards) and a generation; a
rebuild writes the next generation beside the current one and SQLite's `tantivy_shards` row says which
is current, so a reader in another process follows it at its next search and a crash mid-rebuild
leaves the old generation in force.

Every commit also writes a stamp document (rid = STAMP_RID, `stamp` = the commit's number); the
same number is written to SQLite in the transaction that commits just after. Equal numbers: the side
index holds exactly what SQLite committed. Different numbers at open: a crash fell between the two
commits, and the index is rebuilt from SQLite.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

from indexer.fts_acl import acl_token
from indexer.ports import LexicalAnalyzer

TEXT_FIELDS = ("title", "heading", "text")
PASSAGE_FIELD = "passage"
"""Title, heading path and body in one field: one BM25 per passage, as FTS5's bm25() scores the row."""
FIELD_EXTRA = 0.5
"""A field weighted above the body (`FieldWeights`, the heading by default) adds its own BM25 times
FIELD_EXTRA x (its weight - the body's) to the passage's: chosen leave one set out on the evaluation
sets (bench/lexical_parity.py; FTS5 counts such a field's words with more weight inside one BM25,
which adds far less than a BM25 of the field's own)."""
LAYOUT = "p1"
"""The schema's version, part of each index's directory name: an index of another layout (the three
fields scored apart, before) is rebuilt from SQLite at open like one of another analyzer."""
STAMP_RID = -1
"""The rid of the stamp document (rows of `passages` have rids >= 1)."""

WRITER_HEAP = 64_000_000
"""Tantivy's indexing buffer per writer (one thread): a batch larger than this is flushed in pieces."""


def _analyzer(analyzer: LexicalAnalyzer) -> Any:
    """FTS5's unicode61 (words of letters and digits, lower case, diacritics folded), with Snowball
    English stemming for "english" where FTS5 has Porter's."""
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(255))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    if analyzer == "english":
        builder = builder.filter(tantivy.Filter.stemmer("english"))
    return builder.build()


def schema() -> Any:
    """Why one text field: scored as three fields (each its own BM25, length normalisation and document
    frequencies, boosted and summed) Tantivy ranked worse than FTS5 on every evaluation set (fused MRR
    0.758 / 0.677 / 0.798 against 0.803 / 0.719 / 0.803 on the Python, Git and Flex CI subsets); as one
    field with FTS5's IDF it ranks as FTS5 does (bench/lexical_parity.py, chosen leave one set out)."""
    sb = tantivy.SchemaBuilder()
    for name in (*TEXT_FIELDS, PASSAGE_FIELD):
        sb.add_text_field(name, stored=False, tokenizer_name="ragsync")
    sb.add_text_field("principals", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("rid", stored=False, indexed=True, fast=True)
    sb.add_integer_field("stamp", stored=False, indexed=False, fast=True)
    return sb.build()


SCHEMA = schema()


def tenant_key(tenant: str) -> str:
    return hashlib.sha1(tenant.encode()).hexdigest()[:16]


def side_dir(root: Path, tenant: str, analyzer: LexicalAnalyzer, lo: int, gen: int) -> Path:
    """The directory of one shard (first rid `lo`) of the tenant at one generation."""
    return root / f"{tenant_key(tenant)}-{analyzer}-{LAYOUT}-s{lo}-g{gen}"


def drop_other_generations(root: Path, tenant: str, keep: set[Path]) -> None:
    """Every directory of the tenant but those in `keep`: an older generation (a rebuild replaced it), a
    shard merged away, a newer one a crash left before SQLite named it current, or a former layout."""
    if not root.exists():
        return
    for d in root.glob(f"{tenant_key(tenant)}-*"):
        if d not in keep:
            shutil.rmtree(d, ignore_errors=True)


def document(rid: int, title: str, heading: str, text: str, entries: Iterable[str]) -> Any:
    return tantivy.Document(
        title=title,
        heading=heading,
        text=text,
        passage=f"{title}\n{heading}\n{text}",
        principals=[acl_token(e) for e in sorted(set(entries))],
        rid=rid,
    )


def fts5_idf(docs: int, found: int) -> float:
    """FTS5's bm25() IDF: ln((N - n + 0.5) / (n + 0.5)), 1e-6 when not positive, so a word found in half
    the passages or more all but stops counting ("git" in the Git manual). Tantivy still counts a deleted
    passage in a word's document frequency until its segment merges, so `found` can exceed `docs`."""
    docs = max(docs, found)
    idf = math.log((docs - found + 0.5) / (found + 0.5))
    return idf if idf > 0 else 1e-6


def tantivy_idf(docs: int, found: int) -> float:
    """Tantivy's BM25 IDF, ln(1 + (N - n + 0.5) / (n + 0.5)), which a boost of fts5_idf / tantivy_idf
    turns into FTS5's (deleted passages still counted in `found`: see fts5_idf)."""
    docs = max(docs, found)
    return math.log(1 + (docs - found + 0.5) / (found + 0.5))


@dataclass
class SideIndex:
    """One tenant's index of one generation, opened for reading; writers are made per commit."""

    path: Path
    analyzer: LexicalAnalyzer
    index: Any = field(init=False)
    text_analyzer: Any = field(init=False)
    stamp: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(SCHEMA, path=str(self.path), reuse=True)
        self.text_analyzer = _analyzer(self.analyzer)
        self.index.register_tokenizer("ragsync", self.text_analyzer)
        self.index.config_reader(reload_policy="manual")
        self.stamp = self.read_stamp()

    def read_stamp(self) -> int:
        """The stamp of the last commit this reader sees (0: an index never committed)."""
        searcher = self.index.searcher()
        found = searcher.search(tantivy.Query.term_query(SCHEMA, "rid", STAMP_RID), 1).hits
        if not found:
            return 0
        value = searcher.fast_field_values("stamp", [found[0][1]])[0]
        return int(value) if value is not None else 0

    def reload(self) -> None:
        self.index.reload()
        self.stamp = self.read_stamp()

    def writer(self) -> Any:
        """A writer for one commit. Only made under SQLite's write lock, so two processes never
        contend for Tantivy's writer lock; dropped (merges waited for) once committed."""
        return self.index.writer(heap_size=WRITER_HEAP, num_threads=1)

    def commit(self, writer: Any, stamp: int) -> None:
        """Commit the writer's changes with the stamp, wait for the merges the commit started (so
        segments stay few and the writer lock is free again), and see the result."""
        writer.delete_documents_by_term("rid", STAMP_RID)
        writer.add_document(tantivy.Document(rid=STAMP_RID, stamp=stamp))
        writer.commit()
        writer.wait_merging_threads()
        self.reload()

    def searcher(self) -> Any:
        return self.index.searcher()


def candidates(
    sides: list[SideIndex], words: list[str], weights: Mapping[str, float], entries: Iterable[str]
) -> Callable[[int], list[tuple[float, int]]]:
    """`fetch(n)`: (score, rid) of the n best documents of the tenant's shards holding any of the words
    (in a field of weight > 0) and any of the entries' tokens, best first. Each word is analysed here
    and queried as a term (a word the analyzer cuts in several, `os_walk`, as a phrase), so a user's
    text is never query syntax. The score is the passage's BM25 (the combined field, each term boosted
    so that its IDF is FTS5's over the whole tenant: document counts summed over the shards) times the
    body's weight, plus FIELD_EXTRA x the excess weight of the title or heading times that field's BM25;
    the principal clause scores 0 and only filters. Each shard returns its own n best, merged: the n
    best of all. Within a shard Tantivy normalises lengths by that shard's average, the one statistic
    not tenant-wide. The words are analysed and each shard's query built once, here, for every round."""
    body = weights["text"]
    if not words or body <= 0 or not sides:
        return lambda n: []
    searchers = [side.searcher() for side in sides]
    docs = [max(int(s.num_docs), 1) for s in searchers]
    total = max(sum(docs), 1)
    analyzer = sides[0].text_analyzer
    fields = [PASSAGE_FIELD, *(f for f in TEXT_FIELDS if FIELD_EXTRA * (weights[f] - body) > 0)]
    terms: list[tuple[list[str], dict[str, list[int]]]] = []
    for word in words:
        tokens = [str(t) for t in analyzer.analyze(word)]
        if not tokens:
            continue
        found: dict[str, list[int]] = {}
        if len(tokens) == 1:
            found = {f: [int(s.doc_freq(f, tokens[0])) for s in searchers] for f in fields}
            if not any(found[PASSAGE_FIELD]):
                continue
        terms.append((tokens, found))
    if not terms:
        return lambda n: []
    acl = acl_query(entries)
    queries = [(s, _shard_query(terms, k, docs[k], total, weights, acl)) for k, s in enumerate(searchers)]
    queries = [(s, q) for s, q in queries if q is not None]

    def fetch(n: int) -> list[tuple[float, int]]:
        hits: list[tuple[float, int]] = []
        for searcher, query in queries:
            found_hits = searcher.search(query, n, count=False).hits
            if not found_hits:
                continue
            rids = searcher.fast_field_values("rid", [addr for _, addr in found_hits])
            hits.extend(
                (float(score), int(rid)) for (score, _), rid in zip(found_hits, rids, strict=True) if rid is not None
            )
        if len(queries) > 1:
            hits.sort(key=lambda h: -h[0])
        return hits[:n]

    return fetch


def acl_query(entries: Iterable[str]) -> Any:
    """The principal clause: any of the entries' tokens, scoring 0. A boolean OR of term queries, each a
    term-dictionary look-up: Tantivy's term_set_query (the former clause) walks the whole `principals`
    term dictionary of every segment with an automaton, ~0.35 ms a segment whatever the query (bench:
    0.37 ms against 0.01 ms on a 1,000-passage index), which at 1M passages in 50+ segments was most of
    a search's CPU."""
    tokens = sorted({acl_token(e) for e in entries})
    terms = [
        (tantivy.Occur.Should, tantivy.Query.term_query(SCHEMA, "principals", t, index_option="basic")) for t in tokens
    ]
    return tantivy.Query.const_score_query(tantivy.Query.boolean_query(terms), 0.0)


def _shard_query(
    terms: list[tuple[list[str], dict[str, list[int]]]],
    k: int,
    docs: int,
    total: int,
    weights: Mapping[str, float],
    acl: Any,
) -> Any | None:
    """Shard k's query (None: no word occurs in it). Tantivy's IDF is the shard's; the boost makes it
    FTS5's IDF over the tenant (`total` documents, frequencies summed over the shards)."""
    body = weights["text"]
    clauses: list[tuple[Any, Any]] = []
    where: list[tuple[Any, Any]] = []
    for tokens, found in terms:
        idf = fts5_idf(total, sum(found[PASSAGE_FIELD])) if found else 0.0
        for name in (PASSAGE_FIELD, *TEXT_FIELDS):
            boost = body if name == PASSAGE_FIELD else FIELD_EXTRA * (weights[name] - body)
            if name != PASSAGE_FIELD and weights[name] > 0:
                where.append((tantivy.Occur.Should, _match(name, tokens)))
            if boost <= 0:
                continue
            if found:
                in_shard = found[name][k]
                if in_shard:
                    boost *= idf / tantivy_idf(docs, in_shard)
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(_match(name, tokens), boost)))
            else:
                clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(_match(name, tokens), boost)))
    if not clauses:
        return None
    must = [(tantivy.Occur.Must, tantivy.Query.boolean_query(clauses)), (tantivy.Occur.Must, acl)]
    if any(weights[name] <= 0 for name in TEXT_FIELDS):  # a field weighing 0 finds nothing
        must.append((tantivy.Occur.Must, tantivy.Query.const_score_query(tantivy.Query.boolean_query(where), 0.0)))
    return tantivy.Query.boolean_query(must)


def _match(name: str, tokens: list[str]) -> Any:
    """A word in one field: its term, or the phrase of its tokens."""
    if len(tokens) == 1:
        return tantivy.Query.term_query(SCHEMA, name, tokens[0], index_option="freq")
    words: list[str | tuple[int, str]] = list(tokens)
    return tantivy.Query.phrase_query(SCHEMA, name, words)
