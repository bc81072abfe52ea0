"""The reader interface: every format reader turns a document into structural units.

A unit is what the author made one thing (a paragraph, a list item, a table row, a definition, a
code block), with its heading path and the barriers that keep sizing from merging across
sections. Readers for new formats (PDF, DOCX, CSV, reST) build units with `UnitBuilder` and hand
them to `indexer.chunker.chunk_units`; sizing, lead-ins and anchors are then the same for every
format, so a citation looks and behaves the same whatever the source was.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from schemas.errors import Unchunkable as Unchunkable  # re-export (schemas.errors)


@dataclass(frozen=True, slots=True)
class Locus:
    """Where a passage sits in a paged or row-numbered source (pages 3-4, row 12), for its citation."""

    unit: Literal["page", "row"]
    first: int
    last: int

    def span(self, other: Locus | None) -> Locus:
        if other is None or other.unit != self.unit:
            return self
        return Locus(self.unit, min(self.first, other.first), max(self.last, other.last))

    @property
    def fragment(self) -> str:
        """The URL fragment a viewer opens at: `page=3` (RFC 8118, PDF), `row=12` or `row=12-14` (RFC 7111, CSV)."""
        if self.unit == "page" or self.first == self.last:
            return f"{self.unit}={self.first}"
        return f"{self.unit}={self.first}-{self.last}"

    def __str__(self) -> str:
        if self.first == self.last:
            return f"{self.unit} {self.first}"
        return f"{self.unit}s {self.first}-{self.last}"


def span(a: Locus | None, b: Locus | None) -> Locus | None:
    return a.span(b) if a is not None else b


@dataclass(frozen=True, slots=True)
class Chunk:
    anchor: str  # unique within the document, stable for the same input, [a-z0-9-]
    heading_path: tuple[str, ...]  # ("Refund policy", "Exceptions")
    text: str  # the passage body; the heading path is indexed separately, not prepended
    locus: Locus | None = None  # the page(s) or row it comes from, for formats that number them


MAX_AMPLIFICATION = 8
AMPLIFICATION_SLACK = 4 * 1024 * 1024
"""A document's passages may hold 8 times its text, plus 4 MiB: a header repeated on every row of a
wide table stays well inside; a header repeated on a million one-character rows does not."""


def amplification_limit(source_chars: int) -> int:
    return MAX_AMPLIFICATION * source_chars + AMPLIFICATION_SLACK


def too_amplified(limit: int) -> Unchunkable:
    return Unchunkable(
        f"its passages would hold over {limit} characters (headers or terms repeated on every row or item)"
    )


MAX_PREFIX_LINES = 8
"""Lines a reader repeats on every unit of a group (table header rows, enclosing definition terms): a
table with 10,000 header rows would otherwise copy all of them onto each of its 10,000 rows."""

MAX_INDENT_LEVELS = 16
"""How deep a nested list item's marker is indented in its passage; deeper items are shown at this depth."""

Kind = Literal["para", "code", "item", "row", "def"]
MERGEABLE: frozenset[str] = frozenset({"para", "code"})
LEAD_TARGETS: frozenset[str] = frozenset({"item", "row"})


@dataclass(slots=True)
class Unit:
    """A structural unit before sizing; `prefix` lines are repeated on every piece it is cut into."""

    kind: Kind
    heading_path: tuple[str, ...]
    heading_id: int
    block: int
    group: int = -1
    prefix: list[str] = field(default_factory=list)
    parts: list[tuple[str, bool]] = field(default_factory=list)  # (text, is_code)
    locus: Locus | None = None
    aside: bool = False  # in a box set beside the text (a sidebar): sized and anchored after the text
    glued: set[int] = field(default_factory=set)
    """Indexes into `parts` of lines that head what follows (a definition term inside a list item or
    another definition): when the unit is cut, each starts the piece of the part after it."""


@dataclass(slots=True)
class Piece:
    kind: Kind
    heading_path: tuple[str, ...]
    heading_id: int
    block: int
    text: str
    locus: Locus | None = None
    aside: bool = False


HeadingState = tuple[list[tuple[int, str]], tuple[str, ...], int]


class UnitBuilder:
    """Heading stack, merge barriers and list/table groups shared by the format readers."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self._headings: list[tuple[int, str]] = []
        self.path: tuple[str, ...] = ()
        self.heading_id = 0
        self.block = 0
        self._counter = 0
        self.asides = 0  # open sidebars: units made now are `aside`

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def heading(self, level: int, text: str) -> None:
        text = collapse(text.replace("¶", ""))
        if not text:
            return
        while self._headings and self._headings[-1][0] >= level:
            self._headings.pop()
        self._headings.append((level, text))
        self.path = tuple(t for _, t in self._headings)
        self.heading_id = self._next()
        self.block = self._next()

    @property
    def depth(self) -> int:
        """The level of the innermost open heading (0 before any): a sidebar's title goes one below."""
        return self._headings[-1][0] if self._headings else 0

    def boundary(self) -> None:
        self.block = self._next()

    def new_group(self) -> int:
        return self._next()

    def save(self) -> HeadingState:
        return (list(self._headings), self.path, self.heading_id)

    def restore(self, state: HeadingState) -> None:
        self._headings, self.path, self.heading_id = list(state[0]), state[1], state[2]
        self.block = self._next()

    def unit(
        self,
        kind: Kind,
        parts: list[tuple[str, bool]] | None = None,
        *,
        group: int = -1,
        locus: Locus | None = None,
    ) -> Unit:
        unit = Unit(kind, self.path, self.heading_id, self.block, group, [], parts or [], locus, self.asides > 0)
        self.units.append(unit)
        return unit


_WS = re.compile(r"\s+")


def collapse(text: str) -> str:
    return _WS.sub(" ", text).strip()


def row_line(cells: list[str]) -> str:
    """One table row as its Markdown source line; a literal pipe is escaped as Markdown does."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


Reader = Callable[[str, str], list[Unit]]
"""(content, title) -> units. `title` is the best title known outside the content (file name, metadata)."""
