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

from indexer.chunking.anchors import anchor_pieces
from indexer.chunking.delimited import read_csv, read_tsv
from indexer.chunking.extracted import read_extracted
from indexer.chunking.html_reader import read_html
from indexer.chunking.markdown import read_markdown
from indexer.chunking.plain import read_text
from indexer.chunking.rst import read_rst
from indexer.chunking.sentences import sentences
from indexer.chunking.sizing import apply_lead_ins, merge, size
from indexer.chunking.units import Chunk, Locus, Reader, Unit, UnitBuilder
from schemas.events import TextContentType as ContentType
from schemas.extracted import ExtractedDocument

__all__ = [
    "CHUNKER_VERSION",
    "READERS",
    "Chunk",
    "ContentType",
    "Locus",
    "Unit",
    "UnitBuilder",
    "chunk_document",
    "chunk_extracted",
    "chunk_units",
]

CHUNKER_VERSION = "structure-v2"  # bump whenever output for the same input may change (v2: boilerplate removal)

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
    return chunk_units(reader(content, title), max_chars)


def chunk_extracted(document: ExtractedDocument, *, max_chars: int = 1000) -> list[Chunk]:
    """Passages of a document the connector extracted (PDF, DOCX), each with its page when it has one."""
    return chunk_units(read_extracted(document), max_chars)


def chunk_units(units: list[Unit], max_chars: int = 1000) -> list[Chunk]:
    """Sizing, lead-ins, merging and anchors for units any reader produced (the entry for new formats)."""
    if max_chars < 40:
        raise ValueError("max_chars must be at least 40 so a prefix and some text fit in a chunk")
    return anchor_pieces(merge(size(apply_lead_ins(units, max_chars), max_chars), max_chars))


def split_sentences(text: str) -> list[str]:
    """Sentences as substrings of the text (stripped), not cut at "e.g.", initials or "3.11"."""
    return sentences(text)
