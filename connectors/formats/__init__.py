"""Bytes of a fetched file to what its upsert carries: text (decoded) or extracted blocks, with metadata.

Text formats (Markdown, HTML, plain text, CSV, TSV, reStructuredText) are decoded
(connectors.decoding) and travel as text; the indexer's reader for the type parses them. Binary
formats (PDF, DOCX) are extracted here, at scan time, into `schemas.extracted` blocks (that module
says why the event carries text and not the file). Either way a file that cannot be read raises a
ValueError for that document alone: `BinaryContent` (text that is not text) or `Unreadable`
(a PDF or DOCX that cannot be opened, with the reason).

The scanner calls it through connectors.extract: PDF, DOCX, reST and large files in a child process
within a time and memory budget (a 500-page PDF takes seconds, a hostile one minutes or gigabytes,
and the process that scans may also be serving questions), small text files in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from connectors.base import content_metadata
from connectors.decoding import BinaryContent, decode_text
from connectors.formats.errors import Unreadable
from schemas.events import EXTRACTED_CONTENT_TYPES, ContentType
from schemas.extracted import Block, ExtractedDocument, Table

__all__ = ["BinaryContent", "Content", "Unreadable", "read_content"]


@dataclass(frozen=True, slots=True)
class Content:
    text: str  # "" for extracted formats
    extracted: ExtractedDocument | None
    encoding: str | None  # the encoding detected, when a text file was not UTF-8
    title: str | None  # stated inside the file (front matter, <title>, PDF metadata, first heading)
    effective_from: datetime | None


def read_content(content_type: ContentType, data: bytes) -> Content:
    """Raises ValueError (BinaryContent, Unreadable, a bad effective date) for a file not to index."""
    if content_type in EXTRACTED_CONTENT_TYPES:
        if content_type == "pdf":
            from connectors.formats.pdf import extract_pdf

            pdf = extract_pdf(data)
            document, title = pdf.document, pdf.title
        else:
            from connectors.formats.word import extract_docx

            word = extract_docx(data)
            document, title = word.document, word.title
        if not any(_has_text(block) for block in document.blocks):
            raise Unreadable(f"no text in this {content_type.upper()} file")
        return Content("", document, None, title, None)
    text, encoding = decode_text(data)
    meta = content_metadata(content_type, text)
    return Content(text, None, encoding, meta.title, meta.effective_from)


def _has_text(block: Block) -> bool:
    if isinstance(block, Table):
        return any(cell.strip() for row in block.rows for cell in row)
    return bool(block.text.strip())
