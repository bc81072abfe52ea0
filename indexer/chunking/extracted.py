"""Reader for extracted documents (PDF, DOCX): the connector's typed blocks to units.

The connector did the format-specific work (schemas.extracted); this reader only maps blocks onto
the shared unit model, so a PDF section, a DOCX table row and a Markdown list item are sized,
anchored and cited alike. Pages travel on each unit as a `Locus`, and survive merging as a span.
"""

from __future__ import annotations

from indexer.chunking.units import MAX_PREFIX_LINES, Locus, Unit, UnitBuilder, collapse, row_line
from schemas.extracted import ExtractedDocument, Heading, ListItem, Paragraph, Table


def _locus(page: int | None) -> Locus | None:
    return Locus("page", page, page) if page is not None else None


def read_extracted(document: ExtractedDocument) -> list[Unit]:
    b = UnitBuilder()
    list_group: int | None = None
    item: Unit | None = None
    for block in document.blocks:
        if not isinstance(block, ListItem):
            list_group, item = None, None
        if isinstance(block, Heading):
            b.heading(block.level, block.text)
        elif isinstance(block, Paragraph):
            text = "\n".join(collapse(line) for line in block.text.split("\n")).strip()
            if text:
                b.unit("para", [(text, False)], locus=_locus(block.page))
        elif isinstance(block, ListItem):
            text = collapse(block.text)
            if not text:
                continue
            if block.depth > 0 and item is not None:
                item.parts.append(("  " * (block.depth - 1) + "- " + text, False))
                item.locus = item.locus.span(_locus(block.page)) if item.locus else _locus(block.page)
                continue
            if list_group is None:
                list_group = b.new_group()
            item = b.unit("item", [(text, False)], group=list_group, locus=_locus(block.page))
        elif isinstance(block, Table):
            _table(b, block)
    return b.units


def _table(b: UnitBuilder, table: Table) -> None:
    """One unit per body row, the header rows repeated on each (as for Markdown and HTML tables)."""
    rows = [[collapse(cell) for cell in row] for row in table.rows]
    header_rows = min(table.header_rows, MAX_PREFIX_LINES)  # repeated on every row: a few lines at most
    header = [row_line(r) for r in rows[:header_rows] if any(r)]
    body = [r for r in rows[header_rows:] if any(r)]
    if not header and not body:
        return
    group = b.new_group()
    locus = _locus(table.page)
    for row in body or [[]]:
        b.unit("row", [(row_line(row), False)] if row else [], group=group, locus=locus).prefix.extend(header)
