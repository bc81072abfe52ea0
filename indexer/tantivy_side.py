"""The Tantivy side index of indexer.tantivy_lexical: schema, analyzers, one index per tenant and generation.

A side index holds postings and numbers only (nothing is stored: no field is `stored`), so the
passage text lives in SQLite alone. Each tenant has its own index (BM25 statistics never mix
tenants, as with the FTS5 tables and the Elasticsearch indexes), in a directory named by the
tenant's hash, the analyzer and a generation; a rebuild writes the next generation beside the
current one and SQLite's `tantivy_indexes` row says which is current, so a reader in another process
follows it at its next search and a crash mid-rebuild leaves the old generation in force.

Every commit also writes a stamp document (rid = STAMP_RID, `stamp` = the commit's number); the
same number is written to SQLite in the transaction that commits just after. Equal numbers: the side
index holds exactly what SQLite committed. Different numbers at open: a crash fell between the two
commits, and the index is rebuilt from SQLite.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tantivy

from indexer.fts_acl import acl_token
from indexer.ports import LexicalAnalyzer

TEXT_FIELDS = ("title", "heading", "text")
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
    sb = tantivy.SchemaBuilder()
    for name in TEXT_FIELDS:
        sb.add_text_field(name, stored=False, tokenizer_name="ragsync")
    sb.add_text_field("principals", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("rid", stored=False, indexed=True, fast=True)
    sb.add_integer_field("stamp", stored=False, indexed=False, fast=True)
    return sb.build()


SCHEMA = schema()


def tenant_key(tenant: str) -> str:
    return hashlib.sha1(tenant.encode()).hexdigest()[:16]


def side_dir(root: Path, tenant: str, analyzer: LexicalAnalyzer, gen: int) -> Path:
    return root / f"{tenant_key(tenant)}-{analyzer}-g{gen}"


def drop_other_generations(root: Path, tenant: str, keep: Path | None) -> None:
    """Every directory of the tenant but `keep`: an older generation (a rebuild replaced it) or a newer
    one a crash left before SQLite named it current."""
    if not root.exists():
        return
    for d in root.glob(f"{tenant_key(tenant)}-*"):
        if d != keep:
            shutil.rmtree(d, ignore_errors=True)


def document(rid: int, title: str, heading: str, text: str, entries: Iterable[str]) -> Any:
    return tantivy.Document(
        title=title, heading=heading, text=text, principals=[acl_token(e) for e in sorted(set(entries))], rid=rid
    )


@dataclass
class SideIndex:
    """One tenant's index of one generation, opened for reading; writers are made per commit."""

    path: Path
    analyzer: LexicalAnalyzer
    index: Any = field(init=False)
    stamp: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(SCHEMA, path=str(self.path), reuse=True)
        self.index.register_tokenizer("ragsync", _analyzer(self.analyzer))
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

    def candidates(self, words: list[str], weights: dict[str, float], entries: Iterable[str], n: int) -> list[Any]:
        """(score, rid) of the n best documents holding any of the words (in a field of weight > 0)
        and any of the entries' tokens, best first. Each word goes to the query parser quoted, so a
        user's text is never query syntax; the principal clause scores 0 and only filters."""
        fields = [f for f in TEXT_FIELDS if weights[f] > 0]
        if not fields or not words:
            return []
        text = " ".join('"' + w.replace("\\", " ").replace('"', " ") + '"' for w in words)
        query, _errors = self.index.parse_query_lenient(text, fields, field_boosts={f: weights[f] for f in fields})
        acl = tantivy.Query.const_score_query(
            tantivy.Query.term_set_query(SCHEMA, "principals", sorted({acl_token(e) for e in entries})), 0.0
        )
        searcher = self.index.searcher()
        hits = searcher.search(
            tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, acl)]), n
        ).hits
        if not hits:
            return []
        rids = searcher.fast_field_values("rid", [addr for _, addr in hits])
        return [(float(score), int(rid)) for (score, _), rid in zip(hits, rids, strict=True) if rid is not None]
