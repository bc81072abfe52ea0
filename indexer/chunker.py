"""Split a document into citable passages: structure first, size second.

A passage is what a citation points at and what a ranker scores, so the boundaries follow the
author's structure (sections, list items, table rows, definitions) and size only decides where a
unit that is still too long gets cut. Everything here is pure: text in, chunks out.

Two choices worth knowing about:

* Lead-ins. A short paragraph ending in ":" right before a list or table ("Exceptions:") is
  repeated at the top of every item/row of that list instead of being a passage of its own. A lone
  "Exceptions:" passage can never answer anything and wastes a top-k slot, while an item stripped of
  it reads like the rule instead of the exception; with the prefix each item stays self-describing
  for BM25, for the embedder and for the answering model, and the prefix is verbatim source text so
  quotes still match.
* Table rows are rendered as a two-line Markdown table, "| h1 | h2 |\n| c1 | c2 |": the header row
  travels with every row (repeated on each piece if a row is ever cut), so a row passage makes
  sense alone and the column names are there for lexical and dense search. The pipe form was chosen
  over "h1: c1; h2: c2" because the row line is then the document's own text: for Markdown sources a
  quote taken from the passage is found verbatim (up to whitespace) in the file the user opens,
  and answers must quote their sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexer.budget import OverBudget, PoolUser
from indexer.chunking.anchors import anchor_pieces
from indexer.chunking.delimited import read_csv, read_tsv
from indexer.chunking.extracted import read_extracted
from indexer.chunking.html_reader import read_html
from indexer.chunking.markdown import read_markdown
from indexer.chunking.plain import read_text
from indexer.chunking.rst import read_rst
from indexer.chunking.sizing import apply_lead_ins, merge, size
from indexer.chunking.units import Chunk, Locus, Reader, Unchunkable, Unit, UnitBuilder, amplification_limit
from schemas.events import EXTRACTED_CONTENT_TYPES
from schemas.events import TextContentType as ContentType
from schemas.extracted import ExtractedDocument, Table
from schemas.sentences import split_sentences as split_sentences  # re-export (schemas.sentences)

__all__ = [
    "CHUNKER_VERSION",
    "READERS",
    "Chunk",
    "ContentType",
    "IsolatedChunker",
    "Locus",
    "Unchunkable",
    "Unit",
    "UnitBuilder",
    "chunk_document",
    "chunk_extracted",
    "chunk_units",
]

# Bump whenever output for the same input may change (v2: boilerplate removal; v3: repeated header
# rows, inherited definition terms and list indentation bounded, and amplification refused, issue 18;
# v4: sidebars of prose (DocBook, docutils) kept as passages of their own after the text, issue 23;
# v5: a definition term inside a definition or list item starts the piece of its body when cut).
CHUNKER_VERSION = "structure-v5"

READERS: Mapping[str, Reader] = {
    "markdown": read_markdown,
    "html": read_html,
    "text": read_text,
    "csv": read_csv,
    "tsv": read_tsv,
    "rst": read_rst,
}
"""One reader per text content type; a new format adds its reader here and nothing else changes.
Binary formats (PDF, DOCX) arrive already extracted into blocks: `chunk_extracted`."""


def chunk_document(content: str, content_type: ContentType, *, max_chars: int = 1000, title: str = "") -> list[Chunk]:
    """`title` only matters for plain text: a first paragraph that just repeats it becomes the heading."""
    if max_chars < 40:
        raise ValueError("max_chars must be at least 40 so a prefix and some text fit in a chunk")
    reader = READERS.get(content_type)
    if reader is None:
        raise ValueError(f"unsupported content type: {content_type!r}")
    content = content.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    return chunk_units(reader(content, title), max_chars, source_chars=len(content))


def chunk_extracted(document: ExtractedDocument, *, max_chars: int = 1000) -> list[Chunk]:
    """Passages of a document the connector extracted (PDF, DOCX), each with its page when it has one."""
    return chunk_units(read_extracted(document), max_chars, source_chars=_extracted_chars(document))


def chunk_units(units: list[Unit], max_chars: int = 1000, *, source_chars: int | None = None) -> list[Chunk]:
    """Sizing, lead-ins, merging and anchors for units any reader produced (the entry for new formats).

    Raises Unchunkable when the passages would hold more than MAX_AMPLIFICATION times the source's
    `source_chars` (plus AMPLIFICATION_SLACK, indexer.chunking.units): the worker's memory for one
    document stays bounded.
    """
    if max_chars < 40:
        raise ValueError("max_chars must be at least 40 so a prefix and some text fit in a chunk")
    if source_chars is None:
        source_chars = sum(len(text) for unit in units for text, _ in unit.parts)
    limit = amplification_limit(source_chars)
    # Boxes set beside the text (sidebars) are sized and anchored after it: the text's passages and
    # anchors are what they would be without the boxes, so adding a reader for boxes moves no citation
    # of the text, and the boxes' own sections take their slugs after the text's (anchors.py).
    main = merge(size(apply_lead_ins([u for u in units if not u.aside], max_chars), max_chars, limit), max_chars)
    asides = [u for u in units if u.aside]
    if asides:
        left = limit - sum(len(p.text) for p in main)
        main += merge(size(apply_lead_ins(asides, max_chars), max_chars, left), max_chars)
    return anchor_pieces(main)


def _extracted_chars(document: ExtractedDocument) -> int:
    total = 0
    for block in document.blocks:
        if isinstance(block, Table):
            total += sum(len(cell) + 3 for row in block.rows for cell in row)
        else:
            total += len(block.text)
    return total


class IsolatedChunker(PoolUser):
    """chunk_document / chunk_extracted for the indexer, large documents in a child within a Budget.

    The worker chunks every upsert it applies, and it runs inside `ragsync serve`. The readers are
    linear, but linear with a parser's constant: markdown-it holds ~700 bytes of tokens per byte of a
    table of one-character cells, docutils is quadratic on wide grid tables. So reStructuredText,
    and any document over `budget.inline_bytes` (of text, or of extracted blocks), is chunked in a
    child process of indexer.budget; past its time or memory it is Unchunkable ("chunking exceeded 30 s"), which the
    worker dead-letters with that reason. Smaller ones are chunked in-process, as before.
    """

    def chunk(self, content: str | ExtractedDocument, content_type: str, *, max_chars: int, title: str) -> list[Chunk]:
        if isinstance(content, ExtractedDocument):
            size, data = _extracted_chars(content), content.model_dump_json().encode()
        else:
            size, data = len(content), content.encode()
        if size <= self.budget.inline_bytes and content_type != "rst":  # docutils: never in-process (see rst.py)
            return _chunk_here(content, content_type, max_chars=max_chars, title=title)
        header = {"content_type": content_type, "max_chars": max_chars, "title": title}
        try:
            reply = self._pool.call("indexer.chunker:chunk_in_child", header, data, what="chunking")
        except OverBudget as exc:
            raise Unchunkable(exc.detail) from None
        if not reply.get("ok"):
            raise Unchunkable(str(reply.get("message", "")) or "cannot chunk")
        return [
            Chunk(anchor, tuple(path), text, Locus(locus[0], locus[1], locus[2]) if locus else None)
            for anchor, path, text, locus in reply["chunks"]
        ]


def _chunk_here(content: str | ExtractedDocument, content_type: str, *, max_chars: int, title: str) -> list[Chunk]:
    if isinstance(content, ExtractedDocument):
        return chunk_extracted(content, max_chars=max_chars)
    return chunk_document(content, content_type, max_chars=max_chars, title=title)  # type: ignore[arg-type]


def chunk_in_child(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    """The child's side of IsolatedChunker.chunk: the chunks as JSON values, or why there are none."""
    content: str | ExtractedDocument
    if header["content_type"] in EXTRACTED_CONTENT_TYPES:
        content = ExtractedDocument.model_validate_json(data)
    else:
        content = data.decode()
    try:
        chunks = _chunk_here(content, header["content_type"], max_chars=header["max_chars"], title=header["title"])
    except Unchunkable as exc:
        return {"ok": False, "kind": "unchunkable", "message": str(exc)}
    return {
        "ok": True,
        "chunks": [
            [c.anchor, list(c.heading_path), c.text, [c.locus.unit, c.locus.first, c.locus.last] if c.locus else None]
            for c in chunks
        ],
    }
