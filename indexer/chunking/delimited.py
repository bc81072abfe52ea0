"""CSV and TSV reader: one passage per row, under its header, with its row number.

The first record is the header (the convention of spreadsheet exports); every later record is a
`row` unit rendered as a two-line Markdown table, header first, exactly as a Markdown or HTML table
row is, so a row passage reads alone and the column names are there for both rankers. Each row
carries its record number, header = row 1 as in a spreadsheet and in RFC 7111 (`#row=3` is the
second data row), so a citation says which row to open.

Reading never fails: quoted fields may hold newlines and delimiters, rows may be ragged, and a
quote left open runs to the end of the file as one field (so nothing is lost, and sizing cuts it).
A CSV file's delimiter is guessed among `,` `;` tab and `|` (Excel writes `;` in many locales): the
one the header holds that splits the most of the first lines into as many fields as the header.
`csv.Sniffer` is not used: its regular expressions backtrack on long quoted fields.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from indexer.chunking.units import Locus, Unit, UnitBuilder, amplification_limit, collapse, row_line, too_amplified

_SNIFF_LINES = 50
_DELIMITERS = ",;\t|"
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))  # an open quote may run to the end: keep it whole


class _Dialect(csv.Dialect):
    delimiter = ","
    quotechar = '"'
    doublequote = True
    skipinitialspace = False
    lineterminator = "\n"
    quoting = csv.QUOTE_MINIMAL
    strict = False


def _outside_quotes(line: str, delimiter: str) -> int:
    count, quoted = 0, False
    for char in line:
        if char == '"':
            quoted = not quoted
        elif char == delimiter and not quoted:
            count += 1
    return count


def _delimiter(content: str) -> str:
    lines: list[str] = []
    for line in io.StringIO(content):
        if line.strip():
            lines.append(line[:4096])
        if len(lines) == _SNIFF_LINES:
            break
    best, best_score = ",", 0.0
    for delimiter in _DELIMITERS:
        counts = [_outside_quotes(line, delimiter) for line in lines]
        if not counts or counts[0] == 0:
            continue
        score = sum(1 for c in counts if c == counts[0]) / len(counts)
        if score > best_score:
            best, best_score = delimiter, score
    return best


def _records(content: str, delimiter: str) -> Iterator[list[str]]:
    dialect = type("_Read", (_Dialect,), {"delimiter": delimiter})
    return csv.reader(io.StringIO(content, newline=""), dialect)


def _read(content: str, delimiter: str) -> list[Unit]:
    b = UnitBuilder()
    records = _records(content, delimiter)
    header: list[str] | None = None
    group = b.new_group()
    heads: dict[int, str] = {}  # the header line per row width, made once: every row shares it
    limit, total = amplification_limit(len(content)), 0  # refused while reading, not after a million rows
    for number, record in enumerate(records, 1):
        cells = [collapse(cell) for cell in record]
        if not any(cells):
            continue
        if header is None:
            header = cells
            continue
        width = max(len(header), len(cells))
        row = cells + [""] * (width - len(cells))
        unit = b.unit("row", [(row_line(row), False)], group=group, locus=Locus("row", number, number))
        head = heads.get(width)
        if head is None:
            head = heads[width] = row_line(header + [""] * (width - len(header)))
        unit.prefix.append(head)
        total += len(head) + len(unit.parts[0][0])
        if total > limit:
            raise too_amplified(limit)
    if header is not None and not b.units:
        b.unit("row", group=group, locus=Locus("row", 1, 1)).prefix.append(row_line(header))
    return b.units


def read_csv(content: str, title: str = "") -> list[Unit]:
    return _read(content, _delimiter(content))


def read_tsv(content: str, title: str = "") -> list[Unit]:
    return _read(content, "\t")
