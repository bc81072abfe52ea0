"""DOCX to extracted blocks (python-docx): headings from styles, lists, tables as rows.

Body paragraphs and tables are read in document order. A paragraph is a heading when its style
(or a style it is based on) is `Title` or `Heading N`, or when it or its style sets an outline
level, which is what Word's navigation pane uses and what survives localised style names
("Überschrift 1"). When the document has a Title paragraph, headings sit one level below it, so a
passage's heading path reads "Expenses handbook > Meals". A numbered or bulleted paragraph is a
list item, its level the item's depth. Tables become rows under their header: the rows marked
"repeat as header row", else the first row; a merged cell's text is given once, in its first column.

DOCX has no fixed pages (Word lays them out when it opens the file), so blocks carry no page;
citations name the section. Headers, footers, comments and text boxes are not read.

Refused with a reason: a file that is not a ZIP package (a password-protected .docx is an OLE
container; so is a legacy .doc renamed), a package that would expand past a sane size (a ZIP
bomb), and a package python-docx cannot read.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from typing import Any

import docx
from docx.table import Table as DocxTable
from docx.text.paragraph import Paragraph as DocxParagraph

from connectors.formats.errors import Unreadable
from schemas.extracted import Block, ExtractedDocument, Heading, ListItem, Paragraph, Table

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_MAX_EXPANDED = 512 * 1024 * 1024
_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_LIST_STYLE = re.compile(r"^list\b.*?(\d)?$", re.IGNORECASE)
_WS = re.compile(r"\s+")
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


@dataclass(frozen=True, slots=True)
class DocxText:
    document: ExtractedDocument
    title: str | None


def _reason(exc: Exception) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message[:120]}" if message else type(exc).__name__


def _check_package(data: bytes) -> None:
    if data.startswith(_OLE_MAGIC):
        raise Unreadable(
            "encrypted or legacy Word file (an OLE container, not a DOCX package): "
            "a password-protected .docx cannot be read without its password"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            expanded = sum(info.file_size for info in package.infolist())
            names = set(package.namelist())
    except zipfile.BadZipFile:
        raise Unreadable("not a readable DOCX (not a ZIP package: corrupt or another format)") from None
    if expanded > _MAX_EXPANDED:
        raise Unreadable(f"DOCX expands to {expanded} bytes (limit {_MAX_EXPANDED}): not read")
    if "word/document.xml" not in names:
        raise Unreadable("not a readable DOCX (no word/document.xml in the package)")


def _styles(paragraph: DocxParagraph) -> list[Any]:
    """The paragraph's style and the styles it is based on, nearest first (cycles cut)."""
    chain: list[Any] = []
    style = paragraph.style
    while style is not None and all(style is not s for s in chain) and len(chain) < 20:
        chain.append(style)
        style = style.base_style
    return chain


def _outline_level(element: Any) -> int | None:
    ppr = element.find(f"{_W}pPr") if element is not None else None
    level = ppr.find(f"{_W}outlineLvl") if ppr is not None else None
    if level is None:
        return None
    try:
        value = int(level.get(f"{_W}val"))
    except (TypeError, ValueError):
        return None
    return value + 1 if 0 <= value < 9 else None  # 9 is "body text"


def _heading(paragraph: DocxParagraph) -> int | str | None:
    """ "title", a heading level, or None for body text."""
    direct = _outline_level(paragraph._p)
    if direct is not None:
        return direct
    for style in _styles(paragraph):
        name = (style.name or "").strip()
        if name.lower() == "title":
            return "title"
        match = _HEADING_STYLE.match(name)
        if match:
            return int(match.group(1))
        level = _outline_level(style.element)
        if level is not None:
            return level
    return None


def _list_depth(paragraph: DocxParagraph) -> int | None:
    numpr: Any = paragraph._p.find(f"{_W}pPr/{_W}numPr")
    if numpr is not None:
        num_id = numpr.find(f"{_W}numId")
        ilvl = numpr.find(f"{_W}ilvl")
        if num_id is not None and num_id.get(f"{_W}val") != "0":  # numId 0 switches numbering off
            try:
                return min(int(ilvl.get(f"{_W}val")) if ilvl is not None else 0, 9)
            except (TypeError, ValueError):
                return 0
    for style in _styles(paragraph):
        match = _LIST_STYLE.match(style.name or "")
        style_ppr = style.element.pPr
        if match or (style_ppr is not None and style_ppr.numPr is not None):
            digit = match.group(1) if match else None
            return min(int(digit) - 1, 9) if digit else 0
    return None


def _table(table: DocxTable) -> Table:
    rows: list[tuple[str, ...]] = []
    header_rows = 0
    for index, row in enumerate(table.rows):
        cells: list[str] = []
        previous: Any = None
        for cell in row.cells:
            if previous is not None and cell._tc is previous:
                cells.append("")  # a merged cell: its text once, the columns it spans stay aligned
                continue
            previous = cell._tc
            cells.append(_WS.sub(" ", cell.text).strip())
        rows.append(tuple(cells))
        trpr = row._tr.trPr
        if index == header_rows and trpr is not None and trpr.find(f"{_W}tblHeader") is not None:
            header_rows += 1
    if header_rows == 0 and len(rows) > 1:
        header_rows = 1
    return Table(rows=tuple(rows), header_rows=header_rows)


def extract_docx(data: bytes) -> DocxText:
    """The blocks of the document body, or Unreadable saying why not."""
    _check_package(data)
    try:
        document = docx.Document(io.BytesIO(data))
        items = list(document.iter_inner_content())
        core_title = document.core_properties.title
        kinds = [_heading(p) if isinstance(p, DocxParagraph) else None for p in items]
        blocks = _blocks(items, kinds)
    except (Unreadable, MemoryError):  # out of memory is the reader's budget, not the file's fault
        raise
    except Exception as exc:
        raise Unreadable(f"not a readable DOCX ({_reason(exc)})") from None
    first_title = next(
        (b.text for b, kind in zip(items, kinds, strict=True) if kind == "title" and isinstance(b, DocxParagraph)),
        None,
    )
    title = _WS.sub(" ", core_title or "").strip() or (_WS.sub(" ", first_title).strip() if first_title else "")
    if not title:
        title = next((b.text for b in blocks if isinstance(b, Heading)), "")
    return DocxText(ExtractedDocument(blocks=tuple(blocks)), title or None)


def _blocks(items: list[Any], kinds: list[int | str | None]) -> list[Block]:
    offset = 1 if "title" in kinds else 0
    blocks: list[Block] = []
    for item, kind in zip(items, kinds, strict=True):
        if isinstance(item, DocxTable):
            blocks.append(_table(item))
            continue
        if not isinstance(item, DocxParagraph):
            continue
        text = "\n".join(_WS.sub(" ", line).strip() for line in item.text.split("\n")).strip()
        if not text:
            continue
        if kind == "title":
            blocks.append(Heading(level=1, text=_WS.sub(" ", text)))
        elif isinstance(kind, int):
            blocks.append(Heading(level=min(kind + offset, 9), text=_WS.sub(" ", text)))
        elif (depth := _list_depth(item)) is not None:
            blocks.append(ListItem(text=text, depth=depth))
        else:
            blocks.append(Paragraph(text=text))
    return blocks
