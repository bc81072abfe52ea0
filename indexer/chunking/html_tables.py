"""HTML tables to units: header rows repeated on every body row, property sheets kept whole.

A table's rows are units of their own (each row is one fact, and its header says what the cells
mean), unless the table sits inside a list item or definition, where its rows become lines of that
unit. Split out of `html_reader` because it is its own idea: the reader tracks open elements and
hands each finished row here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexer.chunking.units import MAX_PREFIX_LINES, Unit, UnitBuilder, row_line


@dataclass(slots=True)
class TableCtx:
    group: int
    owner: Unit | None  # the list item or definition the table sits in, whose lines its rows become
    flatten: bool  # a table inside a table cell: its text goes to the cell
    header: list[str] = field(default_factory=list)  # rendered header lines
    header_emitted: bool = False
    row: list[str] | None = None
    row_all_th: bool = True
    in_head: bool = False
    body_rows: int = 0
    row_keyed: bool = False  # the current row starts with a header cell (<th>Syntax:</th><td>...)
    pending: list[tuple[str, bool]] = field(default_factory=list)  # (line, keyed) rows of a headerless table


def finish_row(b: UnitBuilder, table: TableCtx) -> None:
    row, table.row = table.row, None
    if table.flatten or not row:
        return
    if not any(row):
        return
    header_row = table.in_head or (not table.header and table.body_rows == 0 and table.row_all_th)
    if header_row and len(table.header) < MAX_PREFIX_LINES:  # repeated on every row: a few lines at most
        table.header.append(row_line(row))
        return
    table.body_rows += 1
    if table.owner is None and not table.header:
        table.pending.append((row_line(row), table.row_keyed and len(row) > 1))
        return
    _emit_row(b, table, row_line(row))


def _emit_row(b: UnitBuilder, table: TableCtx, line: str) -> None:
    """A row of a table inside a list item or definition becomes lines of that unit instead."""
    if table.owner is None:
        unit = b.unit("row", [(line, False)] if line else [], group=table.group)
        unit.prefix.extend(table.header)
        return
    if not table.header_emitted:
        table.owner.parts.extend((h, False) for h in table.header)
        table.header_emitted = True
    if line:
        table.owner.parts.append((line, False))


def finish_table(b: UnitBuilder, table: TableCtx) -> None:
    if table.flatten:
        return
    finish_row(b, table)
    if table.body_rows == 0 and table.header:
        _emit_row(b, table, "")
    if table.pending and all(keyed for _, keyed in table.pending):
        # A property sheet (every row "<th>Syntax:</th><td>...</td>", no header row) is one unit:
        # alone, "| Default: | None |" does not say what it is the default of.
        b.unit("row", [(line, False) for line, _ in table.pending], group=table.group)
    else:
        for line, _ in table.pending:
            _emit_row(b, table, line)
