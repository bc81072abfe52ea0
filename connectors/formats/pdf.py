"""PDF to extracted blocks (pypdf): text by page, headings from the outline or from font sizes.

A PDF has no paragraphs or headings, only positioned runs of text. pypdf reports each run with its
text and graphics matrices and font size; from those every line gets a vertical position and an
effective size (the font size scaled by both matrices), and then:

* Headings come from the outline (bookmarks) when the file has one: the author's own table of
  contents, with its levels. An outline entry is matched to the line on its page that reads the
  same; when no line does, the heading is placed where its destination points. Without an
  outline, a short line set noticeably larger than the body text (the size holding most
  characters) is a heading, the largest size level 1.
* Paragraphs break at a vertical gap clearly larger than the page's usual line spacing, at a
  change of size, and around headings.
* Running headers and footers (the same line at the top or bottom of most pages, page numbers
  included) are dropped: they would rank for everything and answer nothing.
* Paragraphs never span pages, and every block keeps its page (1-based, the page `#page=N`
  opens), so a citation says the page.

Refused with a reason, never indexed half-read: a file pypdf cannot parse, an encrypted file that
does not open with the empty password (many PDFs are encrypted only to restrict printing; those
are read), and a file with no text layer at all (a scan: ragsync does not do OCR).
"""

from __future__ import annotations

import io
import itertools
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pypdf import PageObject, PasswordType, PdfReader
from pypdf.generic import Destination

from connectors.formats.errors import Unreadable
from schemas.extracted import Block, ExtractedDocument, Heading, Paragraph

logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about odd files are ours to report, once
_HEADING_RATIO = 1.15  # a heading is set at least this much larger than the body text
_HEADING_MAX_CHARS = 150
_HEADING_MAX_LINES = 3
_GAP_RATIO = 1.6  # a gap this much larger than the usual line spacing starts a new paragraph
_LETTER = re.compile(r"[^\W\d_]")
_WS = re.compile(r"\s+")


@dataclass(slots=True)
class _Line:
    page: int
    y: float | None
    size: float
    text: str
    heading: int = 0  # level, 0 for body text


@dataclass(slots=True)
class _Collector:
    """Builds lines from pypdf's text visitor calls for one page."""

    page: int
    lines: list[_Line] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    sizes: Counter[float] = field(default_factory=Counter)
    y: float | None = None

    def visit(self, text: str, cm: list[float], tm: list[float], font: Any, size: float) -> None:
        pieces = text.split("\n")
        for k, piece in enumerate(pieces):
            if k:
                self.flush()
            if not piece:
                continue
            self.parts.append(piece)
            weight = len(piece.strip())
            if weight:
                scale = _scale(cm, tm)
                self.sizes[round(size * scale * 2) / 2] += weight
                if self.y is None:
                    self.y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]

    def flush(self) -> None:
        text = _WS.sub(" ", "".join(self.parts)).strip()
        if text:
            size = self.sizes.most_common(1)[0][0] if self.sizes else 0.0
            self.lines.append(_Line(self.page, self.y, size, text))
        self.parts, self.sizes, self.y = [], Counter(), None


def _scale(cm: list[float], tm: list[float]) -> float:
    a = tm[0] * cm[0] + tm[1] * cm[2]
    b = tm[0] * cm[1] + tm[1] * cm[3]
    c = tm[2] * cm[0] + tm[3] * cm[2]
    d = tm[2] * cm[1] + tm[3] * cm[3]
    return math.sqrt(abs(a * d - b * c)) or 1.0


def _page_lines(page: PageObject, number: int) -> list[_Line]:
    collector = _Collector(number)
    page.extract_text(visitor_text=collector.visit)
    collector.flush()
    return collector.lines


_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"^(?:page\s*)?\d+(?:\s*(?:/|of)\s*\d+)?$", re.IGNORECASE)
_PAGE_LABEL = re.compile(r"\bpage\s+(\d+)(?:\s*(?:/|of)\s*\d+)?\s*$", re.IGNORECASE)
_EDGE_LINES = 2  # how many lines at the top and at the bottom of a page may be running headers/footers
_RUNNING_SHARE = 0.6


def _is_page_number(line: _Line) -> bool:
    """ "3", "3 of 10", "Page 3", "Acme internal - page 3": the page's own number, alone or labelled."""
    match = _PAGE_NUMBER.match(line.text)
    if match is not None:
        return int(_DIGITS.findall(line.text)[0]) == line.page
    labelled = _PAGE_LABEL.search(line.text)
    return labelled is not None and int(labelled.group(1)) == line.page and len(line.text) <= _HEADING_MAX_CHARS


def _drop_running_lines(lines: list[_Line], pages: int) -> list[_Line]:
    """Lines at a page's edge that repeat on most pages (digits ignored), and the page's own number there."""
    by_page: dict[int, list[_Line]] = {}
    for line in lines:
        by_page.setdefault(line.page, []).append(line)
    edges: dict[int, list[_Line]] = {
        page: page_lines[:_EDGE_LINES] + page_lines[_EDGE_LINES:][-_EDGE_LINES:] for page, page_lines in by_page.items()
    }
    seen: Counter[str] = Counter()
    for edge in edges.values():
        for key in {_DIGITS.sub("#", _fold(line.text)) for line in edge}:
            seen[key] += 1
    running = {key for key, n in seen.items() if pages >= 3 and n >= max(3, _RUNNING_SHARE * pages)}
    drop = {
        id(line)
        for edge in edges.values()
        for line in edge
        if _is_page_number(line) or _DIGITS.sub("#", _fold(line.text)) in running
    }
    return [line for line in lines if id(line) not in drop]


def _fold(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


@dataclass(frozen=True, slots=True)
class _Bookmark:
    title: str
    level: int
    page: int  # 1-based
    top: float | None


def _outline(reader: PdfReader) -> list[_Bookmark]:
    found: list[_Bookmark] = []

    def walk(items: list[Any], level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
            elif isinstance(item, Destination):
                title = _WS.sub(" ", str(item.title or "")).strip()
                try:
                    index = reader.get_destination_page_number(item)
                except Exception:  # a bookmark to nowhere: not a heading
                    continue
                if title and index is not None and index >= 0:
                    top = item.get("/Top")
                    found.append(_Bookmark(title, min(level, 9), index + 1, float(top) if top is not None else None))

    try:
        walk(list(reader.outline), 1)
    except Exception:  # a broken outline is ignored; the font sizes still give headings
        return []
    return found


def _apply_outline(lines: list[_Line], bookmarks: list[_Bookmark]) -> list[_Line]:
    by_page: dict[int, list[_Bookmark]] = {}
    for mark in bookmarks:
        by_page.setdefault(mark.page, []).append(mark)
    out: list[_Line] = []
    pages: dict[int, list[_Line]] = {}
    for line in lines:
        pages.setdefault(line.page, []).append(line)
    for page in sorted(set(pages) | set(by_page)):
        page_lines = pages.get(page, [])
        inserted: list[tuple[int, _Line]] = []
        for mark in by_page.get(page, []):
            match = next((ln for ln in page_lines if not ln.heading and _fold(ln.text) == _fold(mark.title)), None)
            if match is not None:
                match.heading = mark.level
                continue
            at = 0
            if mark.top is not None:
                at = next((i for i, ln in enumerate(page_lines) if ln.y is not None and ln.y <= mark.top + 2), 0)
            inserted.append((at, _Line(page, None, 0.0, mark.title, mark.level)))
        for at, heading in sorted(inserted, key=lambda pair: pair[0], reverse=True):
            page_lines.insert(at, heading)
        out.extend(page_lines)
    return out


def _size_headings(lines: list[_Line]) -> None:
    weights: Counter[float] = Counter()
    for line in lines:
        weights[line.size] += len(line.text)
    if not weights:
        return
    body = weights.most_common(1)[0][0]

    def candidate(line: _Line) -> bool:
        return (
            line.size >= body * _HEADING_RATIO
            and len(line.text) <= _HEADING_MAX_CHARS
            and bool(_LETTER.search(line.text))
        )

    sizes = sorted({line.size for line in lines if candidate(line)}, reverse=True)
    levels = {size: min(i + 1, 6) for i, size in enumerate(sizes)}
    for line in lines:
        if candidate(line):
            line.heading = levels[line.size]


def _merge_heading_lines(lines: list[_Line]) -> list[_Line]:
    """A heading set on two or three lines of the same size is one heading."""
    out: list[_Line] = []
    run = 0
    for line in lines:
        prev = out[-1] if out else None
        if (
            prev is not None
            and line.heading
            and prev.heading == line.heading
            and prev.page == line.page
            and prev.size == line.size
            and run < _HEADING_MAX_LINES
            and line.size > 0
        ):
            prev.text = f"{prev.text} {line.text}"
            run += 1
            continue
        run = 1
        out.append(line)
    return out


def _usual_gap(lines: list[_Line]) -> dict[int, float]:
    """The median spacing between consecutive body lines, per page."""
    gaps: dict[int, list[float]] = {}
    for prev, line in itertools.pairwise(lines):
        if prev.page == line.page and prev.y is not None and line.y is not None and not (prev.heading or line.heading):
            gap = prev.y - line.y
            if gap > 0:
                gaps.setdefault(line.page, []).append(gap)
    return {page: sorted(values)[len(values) // 2] for page, values in gaps.items()}


def _join(prev: str, line: str) -> str:
    if prev.endswith("-") and len(prev) > 1 and prev[-2].isalpha() and line[:1].islower():
        return prev + line  # a word hyphenated at the line end: "well-" + "known"
    return f"{prev} {line}"


def _blocks(lines: list[_Line]) -> list[Block]:
    blocks: list[Block] = []
    usual = _usual_gap(lines)
    text: str | None = None
    page = 0
    prev: _Line | None = None

    def flush() -> None:
        nonlocal text
        if text:
            blocks.append(Paragraph(text=text, page=page))
        text = None

    for line in lines:
        if line.heading:
            flush()
            blocks.append(Heading(level=line.heading, text=line.text, page=line.page))
            prev = line
            continue
        new = text is None or prev is None or prev.heading or prev.size != line.size or prev.page != line.page
        if not new and prev is not None and prev.y is not None and line.y is not None:
            gap = prev.y - line.y  # PDF y grows upwards: the next line down has a smaller y
            spacing = usual.get(line.page)
            new = gap < -1 or (spacing is not None and gap > spacing * _GAP_RATIO)  # up: another column
        if new:
            flush()
            text, page = line.text, line.page
        else:
            assert text is not None
            text = _join(text, line.text)
        prev = line
    flush()
    return blocks


@dataclass(frozen=True, slots=True)
class PdfText:
    document: ExtractedDocument
    title: str | None


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
    except MemoryError:
        raise
    except Exception as exc:
        raise Unreadable(f"not a readable PDF ({_reason(exc)})") from None
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")
        except MemoryError:
            raise
        except Exception as exc:
            raise Unreadable(f"encrypted PDF that cannot be opened ({_reason(exc)})") from None
        if opened == PasswordType.NOT_DECRYPTED:
            raise Unreadable("encrypted PDF: it needs a password to open, and ragsync reads no passwords")
    return reader


def _reason(exc: Exception) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message[:120]}" if message else type(exc).__name__


def extract_pdf(data: bytes) -> PdfText:
    """The blocks of every page, or Unreadable saying why not."""
    reader = _open(data)
    try:
        count = len(reader.pages)
        lines = [line for number, page in enumerate(reader.pages, 1) for line in _page_lines(page, number)]
        bookmarks = _outline(reader)
        meta_title = reader.metadata.title if reader.metadata is not None else None
    except (Unreadable, MemoryError):  # out of memory is the reader's budget, not the file's fault
        raise
    except Exception as exc:
        raise Unreadable(f"not a readable PDF ({_reason(exc)})") from None
    if count == 0:
        raise Unreadable("PDF without pages")
    if not lines:
        raise Unreadable(
            f"no text layer: none of its {count} page(s) has text to extract (a scan? ragsync does not do OCR)"
        )
    lines = _drop_running_lines(lines, count) or lines
    if bookmarks:
        lines = _apply_outline(lines, bookmarks)
    else:
        _size_headings(lines)
    blocks = _blocks(_merge_heading_lines(lines))
    title = _WS.sub(" ", str(meta_title)).strip() if meta_title else ""
    if not title:
        title = next((b.text for b in blocks if isinstance(b, Heading)), "")
    return PdfText(ExtractedDocument(blocks=tuple(blocks), pages=count), title or None)
