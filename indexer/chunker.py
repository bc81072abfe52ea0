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

import html
import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal

from markdown_it import MarkdownIt
from markdown_it.token import Token

CHUNKER_VERSION = "structure-v1"  # bump whenever output for the same input may change

ContentType = Literal["markdown", "html", "text"]


@dataclass(frozen=True, slots=True)
class Chunk:
    anchor: str  # unique within the document, stable for the same input, [a-z0-9-]
    heading_path: tuple[str, ...]  # ("Refund policy", "Exceptions")
    text: str  # the passage body; the heading path is indexed separately, not prepended


def chunk_document(content: str, content_type: ContentType, *, max_chars: int = 1000, title: str = "") -> list[Chunk]:
    """`title` only matters for plain text: a first paragraph that just repeats it becomes the heading."""
    if max_chars < 40:
        raise ValueError("max_chars must be at least 40 so a prefix and some text fit in a chunk")
    content = content.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    if content_type == "markdown":
        units = _markdown_units(content)
    elif content_type == "html":
        units = _html_units(content)
    elif content_type == "text":
        units = _text_units(content, title)
    else:
        raise ValueError(f"unsupported content type: {content_type!r}")
    pieces = _merge(_size(_apply_lead_ins(units, max_chars), max_chars), max_chars)
    return _anchor(pieces)


# --------------------------------------------------------------------------- units

Kind = Literal["para", "code", "item", "row", "def"]
_MERGEABLE: frozenset[str] = frozenset({"para", "code"})
_LEAD_TARGETS: frozenset[str] = frozenset({"item", "row"})


@dataclass(slots=True)
class _Unit:
    """A structural unit before sizing; `prefix` lines are repeated on every piece it is cut into."""

    kind: Kind
    heading_path: tuple[str, ...]
    heading_id: int
    block: int
    group: int = -1
    prefix: list[str] = field(default_factory=list)
    parts: list[tuple[str, bool]] = field(default_factory=list)  # (text, is_code)


@dataclass(slots=True)
class _Piece:
    kind: Kind
    heading_path: tuple[str, ...]
    heading_id: int
    block: int
    text: str


_HeadingState = tuple[list[tuple[int, str]], tuple[str, ...], int]


class _Builder:
    """Heading stack, merge barriers and list/table groups shared by the three format readers."""

    def __init__(self) -> None:
        self.units: list[_Unit] = []
        self._headings: list[tuple[int, str]] = []
        self.path: tuple[str, ...] = ()
        self.heading_id = 0
        self.block = 0
        self._counter = 0

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def heading(self, level: int, text: str) -> None:
        text = _collapse(text.replace("¶", ""))
        if not text:
            return
        while self._headings and self._headings[-1][0] >= level:
            self._headings.pop()
        self._headings.append((level, text))
        self.path = tuple(t for _, t in self._headings)
        self.heading_id = self._next()
        self.block = self._next()

    def boundary(self) -> None:
        self.block = self._next()

    def new_group(self) -> int:
        return self._next()

    def save(self) -> _HeadingState:
        return (list(self._headings), self.path, self.heading_id)

    def restore(self, state: _HeadingState) -> None:
        self._headings, self.path, self.heading_id = list(state[0]), state[1], state[2]
        self.block = self._next()

    def unit(
        self,
        kind: Kind,
        parts: list[tuple[str, bool]] | None = None,
        *,
        group: int = -1,
    ) -> _Unit:
        unit = _Unit(kind, self.path, self.heading_id, self.block, group, [], parts or [])
        self.units.append(unit)
        return unit


_WS = re.compile(r"\s+")


def _collapse(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _row_line(cells: list[str]) -> str:
    """One table row as its Markdown source line; a literal pipe is escaped as Markdown does."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


# --------------------------------------------------------------------------- markdown

_MD = MarkdownIt("commonmark").enable("table")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_TAG = re.compile(r"<!--.*?-->|<[^>]*>", re.DOTALL)


def _strip_front_matter(content: str) -> str:
    match = _FRONT_MATTER.match(content)
    return content[match.end() :] if match else content


def _inline_text(token: Token) -> str:
    out: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type == "softbreak":
            out.append(" ")
        elif child.type == "hardbreak":
            out.append("\n")
        elif child.type == "image":
            out.append(_inline_text(child))
    return "\n".join(_collapse(line) for line in "".join(out).split("\n")).strip()


def _close_index(tokens: list[Token], i: int) -> int:
    """Index just past the token that closes tokens[i] (or i + 1 for a self-contained token)."""
    if tokens[i].nesting != 1:
        return i + 1
    depth = 0
    for j in range(i, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j + 1
    return len(tokens)


def _md_items(tokens: list[Token], start: int, stop: int) -> list[tuple[int, int]]:
    """(first, stop) token ranges of the direct items of the list opened at tokens[start]."""
    items: list[tuple[int, int]] = []
    j = start + 1
    while j < stop:
        if tokens[j].type == "list_item_open":
            end = _close_index(tokens, j)
            items.append((j + 1, end - 1))
            j = end
        else:
            j += 1
    return items


def _md_table(tokens: list[Token], start: int, stop: int) -> tuple[list[str], list[str]]:
    """(header lines, body row lines) of the table opened at tokens[start]."""
    head: list[str] = []
    body: list[str] = []
    row: list[str] = []
    in_head = False
    for j in range(start, stop):
        tok = tokens[j]
        if tok.type == "thead_open":
            in_head = True
        elif tok.type == "thead_close":
            in_head = False
        elif tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open") and j + 1 < stop and tokens[j + 1].type == "inline":
            row.append(_collapse(_inline_text(tokens[j + 1])))
        elif tok.type == "tr_close":
            (head if in_head else body).append(_row_line(row))
    return head, body


def _md_blocks(tokens: list[Token], start: int, stop: int, depth: int) -> list[tuple[str, bool]]:
    """Flatten nested block content (inside a list item or quote) into parts, nesting shown by markers."""
    parts: list[tuple[str, bool]] = []
    j = start
    while j < stop:
        tok = tokens[j]
        end = _close_index(tokens, j)
        if tok.type in ("paragraph_open", "heading_open") and j + 1 < stop:
            parts.append((_inline_text(tokens[j + 1]), False))
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            number = int(tok.attrGet("start") or 1)
            for first, last in _md_items(tokens, j, end):
                sub = _md_blocks(tokens, first, last, depth + 1)
                marker = "  " * depth + (f"{number}. " if tok.type == "ordered_list_open" else "- ")
                number += 1
                if sub:
                    parts.append((marker + sub[0][0], sub[0][1]))
                    parts.extend(sub[1:])
        elif tok.type in ("fence", "code_block"):
            parts.append((tok.content.rstrip("\n"), True))
        elif tok.type == "table_open":
            header, rows = _md_table(tokens, j, end)
            parts.extend((line, False) for line in [*header, *rows])
        elif tok.type == "blockquote_open":
            parts.extend(_md_blocks(tokens, j + 1, end - 1, depth))
        elif tok.type == "html_block":
            parts.append((_collapse(html.unescape(_TAG.sub(" ", tok.content))), False))
        j = end
    return [p for p in parts if p[0].strip()]


def _markdown_units(content: str) -> list[_Unit]:
    tokens = _MD.parse(_strip_front_matter(content))
    b = _Builder()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        end = _close_index(tokens, i)
        if tok.type == "heading_open":
            b.heading(int(tok.tag[1:]), _inline_text(tokens[i + 1]))
        elif tok.type == "paragraph_open":
            b.unit("para", [(_inline_text(tokens[i + 1]), False)])
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            group = b.new_group()
            number = int(tok.attrGet("start") or 1)
            for first, last in _md_items(tokens, i, end):
                parts = _md_blocks(tokens, first, last, 0)
                if tok.type == "ordered_list_open" and parts:
                    parts[0] = (f"{number}. {parts[0][0]}", parts[0][1])
                number += 1
                b.unit("item", parts, group=group)
        elif tok.type in ("fence", "code_block"):
            b.unit("code", [(tok.content.rstrip("\n"), True)])
        elif tok.type == "table_open":
            group = b.new_group()
            header, rows = _md_table(tokens, i, end)
            for row in rows or [""]:
                b.unit("row", [(row, False)] if row else [], group=group).prefix.extend(header)
        elif tok.type == "blockquote_open":
            b.unit("para", _md_blocks(tokens, i + 1, end - 1, 0))
        elif tok.type == "html_block":
            b.unit("para", _md_blocks(tokens, i, end, 0))
        i = end
    return b.units


# --------------------------------------------------------------------------- plain text

_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def _text_units(content: str, title: str) -> list[_Unit]:
    b = _Builder()
    paragraphs = [p.strip() for p in _BLANK_LINES.split(content)]
    paragraphs = [p for p in paragraphs if p]
    if paragraphs and title and _collapse(paragraphs[0]).casefold() == _collapse(title).casefold():
        b.heading(1, paragraphs.pop(0))
    for paragraph in paragraphs:
        lines = "\n".join(line.rstrip() for line in paragraph.split("\n"))
        b.unit("para", [(lines, False)])
    return b.units


# --------------------------------------------------------------------------- html

_SKIP_TAGS = frozenset(
    {"script", "style", "nav", "header", "footer", "head", "noscript", "template", "svg", "button", "select"}
)
_SKIP_ROLES = frozenset({"navigation", "banner", "contentinfo", "search"})
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "caption", "dd", "details", "dialog", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
        "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot",
        "th", "thead", "tr", "ul", "menu", "br",
    }
)  # fmt: skip
_CLOSES_P = _BLOCK_TAGS - {"br", "caption", "td", "th", "tr", "tbody", "thead", "tfoot", "dd", "dt", "li"}
_P_SCOPE = frozenset({"table", "td", "th", "li", "dd", "dt", "blockquote", "button", "div", "section", "body"})
# Inline tags carry no structure we use; removing them up front more than halves the parser's work on
# Sphinx pages, where every token of highlighted code and every cross-reference is wrapped in spans.
_INLINE_TAGS = re.compile(
    r"""<(?:/\s*)?(?:a|abbr|b|cite|code|dfn|em|font|i|kbd|mark|q|s|samp|small|span|strong|sub|sup|tt|u|var)"""
    r"""\b(?:[^>"']++|"[^"]*+"|'[^']*+')*+>""",
    re.IGNORECASE,
)
_HEADERLINK = re.compile(r"<a\b[^>]*\bheaderlink\b[^>]*>[^<]*</a>", re.IGNORECASE)
_MAIN_HINT = re.compile(
    r"""<main\b|\brole\s*=\s*["']?main\b|<div\b[^>]*\bclass\s*=\s*["']?(?:[^"'>]*\s)?body[\s"'>]""",
    re.IGNORECASE,
)


class _StopParsing(Exception):
    """Raised once the main content region has closed: nothing after it can be emitted."""


@dataclass(slots=True)
class _Open:
    """One open HTML element and the bookkeeping to undo when it closes."""

    tag: str
    skip: bool = False
    main: bool = False
    unit: bool = False
    heading: int = 0
    section: _HeadingState | None = None
    pre: bool = False
    part_break: bool = False
    list_: bool = False
    dl: bool = False
    table: bool = False
    row: bool = False
    cell: bool = False
    term: bool = False
    thead: bool = False


@dataclass(slots=True)
class _OpenUnit:
    unit: _Unit
    buf: list[str] = field(default_factory=list)
    code: bool = False
    marker: str = ""
    in_term: bool = False
    term: list[str] = field(default_factory=list)
    implicit: bool = False

    def flush(self) -> None:
        text = "".join(self.buf)
        self.buf.clear()
        text = text.strip("\n").rstrip() if self.code else _collapse(text)
        if text:
            self.unit.parts.append((self.marker + text, self.code))
        self.marker = ""


@dataclass(slots=True)
class _ListCtx:
    group: int
    ordered: bool
    owner: _OpenUnit | None
    number: int = 0


@dataclass(slots=True)
class _DlCtx:
    group: int
    outer: _OpenUnit | None
    current: _OpenUnit | None = None
    last: str = ""


@dataclass(slots=True)
class _TableCtx:
    group: int
    owner: _OpenUnit | None
    flatten: bool
    header: list[str] = field(default_factory=list)  # rendered header lines
    header_emitted: bool = False
    row: list[str] | None = None
    row_all_th: bool = True
    in_head: bool = False
    body_rows: int = 0


class _HtmlReader(HTMLParser):
    def __init__(self, main_only: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.b = _Builder()
        self.main_only = main_only
        self.saw_main = False
        self._stack: list[_Open] = []
        self._skip = 0
        self._in_main = 0
        self._units: list[_OpenUnit] = []
        self._lists: list[_ListCtx] = []
        self._dls: list[_DlCtx] = []
        self._tables: list[_TableCtx] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None

    # -- plumbing

    @property
    def _active(self) -> bool:
        return not self._skip and (self._in_main > 0 or not self.main_only)

    def _open_unit(self, kind: Kind, group: int = -1, implicit: bool = False) -> _OpenUnit:
        self._close_implicit()
        ou = _OpenUnit(self.b.unit(kind, group=group), implicit=implicit)
        self._units.append(ou)
        return ou

    def _close_implicit(self) -> None:
        if self._units and self._units[-1].implicit:
            self._units.pop().flush()

    def _break(self) -> None:
        if self._units:
            self._units[-1].flush()

    def _implied_close(self, tag: str) -> None:
        """The end tags real-world HTML leaves out: an open p, li, dt/dd, row or cell ends here."""
        if tag in _CLOSES_P:
            self._close_nearest("p", _P_SCOPE)
        if tag == "li":
            self._close_nearest("li", frozenset({"ul", "ol", "menu"}))
        elif tag in ("dt", "dd"):
            self._close_nearest(("dt", "dd"), frozenset({"dl"}))
        elif tag == "tr":
            self._close_nearest("tr", frozenset({"table", "thead", "tbody", "tfoot"}))
        elif tag in ("td", "th"):
            self._close_nearest(("td", "th"), frozenset({"tr", "table"}))
        elif tag in ("thead", "tbody", "tfoot"):
            self._close_nearest(("thead", "tbody", "tfoot"), frozenset({"table"}))

    def _close_nearest(self, tags: str | tuple[str, ...], scope: frozenset[str]) -> None:
        names = (tags,) if isinstance(tags, str) else tags
        for idx in range(len(self._stack) - 1, -1, -1):
            tag = self._stack[idx].tag
            if tag in names:
                self._pop_to(idx)
                return
            if tag in scope:
                return

    def _pop_to(self, idx: int) -> None:
        while len(self._stack) > idx:
            self._close(self._stack.pop())

    # -- parser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and self._active:
                self._line_break()
            return
        self._implied_close(tag)
        el = _Open(tag)
        self._stack.append(el)
        if self._skip:
            return
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if (
            tag in _SKIP_TAGS
            or a.get("role") in _SKIP_ROLES
            or "hidden" in a
            or (tag == "a" and "headerlink" in classes)
        ):
            el.skip = True
            self._skip += 1
            return
        if self.main_only and not self._in_main:
            if tag == "main" or a.get("role") == "main" or (tag == "div" and "body" in classes):
                el.main = True
                self._in_main += 1
                self.saw_main = True
            return
        self._start(el, tag, a, classes)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        for idx in range(len(self._stack) - 1, -1, -1):
            if self._stack[idx].tag == tag:
                self._pop_to(idx)
                return

    def handle_data(self, data: str) -> None:
        if self._skip or (self.main_only and not self._in_main):
            return
        if self._cell is not None:
            self._cell.append(data)
        elif self._heading is not None:
            self._heading.append(data)
        elif self._units:
            ou = self._units[-1]
            (ou.term if ou.in_term else ou.buf).append(data)
        elif not data.isspace():
            self._open_unit("para", implicit=True).buf.append(data)

    def _line_break(self) -> None:
        if self._cell is not None:
            self._cell.append(" ")
        elif self._heading is not None:
            self._heading.append(" ")
        elif self._units:
            ou = self._units[-1]
            if ou.in_term:
                ou.term.append(" ")
            elif ou.code:
                ou.buf.append("\n")
            else:
                ou.flush()

    # -- element semantics

    def _start(self, el: _Open, tag: str, a: dict[str, str | None], classes: list[str]) -> None:
        if tag in _BLOCK_TAGS:
            self._close_implicit()
        table = self._tables[-1] if self._tables else None
        if self._cell is not None:
            if tag == "table":
                self._tables.append(_TableCtx(-1, None, flatten=True))
                el.table = True
            elif tag in _BLOCK_TAGS:
                self._cell.append(" ")
            return
        if tag in _HEADINGS and not self._units:
            el.heading = _HEADINGS[tag]
            self._heading = []
        elif tag == "section" or (tag == "div" and "section" in classes):
            el.section = self.b.save()
            self.b.boundary()
        elif tag == "pre":
            el.pre = True
            if self._units:
                self._break()
            else:
                el.unit = True
                self._open_unit("code")
            self._units[-1].code = True
        elif tag in ("p", "blockquote"):
            if self._units:
                self._break()
                el.part_break = True
            else:
                el.unit = True
                self._open_unit("para")
        elif tag in ("ul", "ol", "menu"):
            el.list_ = True
            owner = self._units[-1] if self._units else None
            self._break()
            self._lists.append(_ListCtx(self.b.new_group(), tag == "ol", owner))
        elif tag == "li":
            ctx = self._lists[-1] if self._lists else None
            if ctx is not None:
                ctx.number += 1
            marker = f"{ctx.number}. " if ctx is not None and ctx.ordered else ""
            if self._units:
                self._break()
                depth = sum(1 for lc in self._lists if lc.owner is not None and lc.owner is self._units[-1])
                self._units[-1].marker = "  " * max(depth - 1, 0) + (marker or "- ")
                el.part_break = True
            else:
                el.unit = True
                self._open_unit("item", ctx.group if ctx is not None else self.b.new_group()).marker = marker
        elif tag == "dl":
            el.dl = True
            outer = self._units[-1] if self._units else None
            self._break()
            self._dls.append(_DlCtx(self.b.new_group(), outer))
        elif tag in ("dt", "dd"):
            self._start_definition(el, tag, a)
        elif tag == "table":
            el.table = True
            owner = self._units[-1] if self._units else None
            self._break()
            self._tables.append(_TableCtx(self.b.new_group(), owner, flatten=False))
        elif table is not None and not table.flatten:
            if tag == "thead":
                el.thead = True
                table.in_head = True
            elif tag == "tr":
                el.row = True
                table.row, table.row_all_th = [], True
            elif tag in ("td", "th"):
                if table.row is None:
                    table.row, table.row_all_th = [], True
                table.row_all_th = table.row_all_th and tag == "th"
                el.cell = True
                self._cell = []
                table.row.append("")
        elif tag in _BLOCK_TAGS and self._units:
            self._break()
            el.part_break = True

    def _start_definition(self, el: _Open, tag: str, a: dict[str, str | None]) -> None:
        """dt+dd form one unit; a nested dl of linkable terms (API members) gets units of its own."""
        ctx = self._dls[-1] if self._dls else None
        if ctx is None:
            ctx = _DlCtx(self.b.new_group(), None)
            self._dls.append(ctx)
        current = self._units[-1] if self._units else None
        nested = ctx.outer is not None
        if tag == "dt":
            own_unit = current is None or (
                not nested or (current is ctx.outer and current.unit.kind == "def" and "id" in a)
            )
            if not own_unit:
                self._break()
                el.part_break = True
                ctx.last = "absorbed"
                return
            if ctx.current is None or ctx.last != "dt":
                ou = self._open_unit("def", ctx.group)
                if nested and ctx.outer is not None:
                    ou.unit.prefix.extend(ctx.outer.unit.prefix)
                ctx.current = ou
            else:
                self._units.append(ctx.current)
            ctx.current.in_term = True
            el.unit = el.term = True
            ctx.last = "dt"
        else:
            if ctx.current is not None and ctx.last in ("dt", "dd"):
                self._units.append(ctx.current)
                el.unit = True
            elif not nested and current is None:
                ctx.current = self._open_unit("def", ctx.group)
                el.unit = True
            else:
                self._break()
                el.part_break = True
            ctx.last = "dd" if el.unit else "absorbed"

    def _close(self, el: _Open) -> None:
        if el.skip:
            self._skip -= 1
            return
        if el.main:
            self._in_main -= 1
            self._close_implicit()
            raise _StopParsing
        if el.tag in _BLOCK_TAGS:
            self._close_implicit()
        if el.heading and self._heading is not None:
            self.b.heading(el.heading, "".join(self._heading))
            self._heading = None
        if el.cell and self._cell is not None:
            table = self._tables[-1]
            if table.row:
                table.row[-1] = _collapse("".join(self._cell).replace("¶", ""))
            self._cell = None
        if el.row:
            self._finish_row(self._tables[-1])
        if el.thead:
            self._tables[-1].in_head = False
        if el.table:
            self._finish_table(self._tables.pop())
        if el.term:
            ou = self._units[-1]
            term = _collapse("".join(ou.term).replace("¶", ""))
            ou.term.clear()
            ou.in_term = False
            if term:
                ou.unit.prefix.append(term)
        if el.pre and self._units:
            self._units[-1].flush()
            self._units[-1].code = False
        if el.unit:
            self._units.pop().flush()
        if el.part_break or el.list_ or el.dl:
            self._break()
        if el.list_:
            self._lists.pop()
        if el.dl:
            self._dls.pop()
        if el.section is not None:
            self.b.restore(el.section)

    def _finish_row(self, table: _TableCtx) -> None:
        row, table.row = table.row, None
        if table.flatten or not row:
            return
        if not any(row):
            return
        if table.in_head or (not table.header and table.body_rows == 0 and table.row_all_th):
            table.header.append(_row_line(row))
            return
        table.body_rows += 1
        self._emit_row(table, _row_line(row))

    def _emit_row(self, table: _TableCtx, line: str) -> None:
        """A row of a table inside a list item or definition becomes lines of that unit instead."""
        if table.owner is None:
            unit = self.b.unit("row", [(line, False)] if line else [], group=table.group)
            unit.prefix.extend(table.header)
            return
        if not table.header_emitted:
            table.owner.unit.parts.extend((h, False) for h in table.header)
            table.header_emitted = True
        if line:
            table.owner.unit.parts.append((line, False))

    def _finish_table(self, table: _TableCtx) -> None:
        if table.flatten:
            return
        self._finish_row(table)
        if table.body_rows == 0 and table.header:
            self._emit_row(table, "")

    def finish(self) -> list[_Unit]:
        self.close()
        self._pop_to(0)
        while self._units:
            self._units.pop().flush()
        return self.b.units


def _html_units(content: str) -> list[_Unit]:
    content = _INLINE_TAGS.sub("", _HEADERLINK.sub("", content))
    main_only = bool(_MAIN_HINT.search(content))
    units = _read_html(content, main_only)
    if main_only and not any(u.parts or u.prefix for u in units):
        units = _read_html(content, False)
    return units


def _read_html(content: str, main_only: bool) -> list[_Unit]:
    reader = _HtmlReader(main_only)
    try:
        reader.feed(content)
        return reader.finish()
    except _StopParsing:
        reader._stack.clear()
        while reader._units:
            reader._units.pop().flush()
        return reader.b.units


# --------------------------------------------------------------------------- lead-ins, size, merge

_LEAD_IN_MAX_FRACTION = 4


def _apply_lead_ins(units: list[_Unit], max_chars: int) -> list[_Unit]:
    out: list[_Unit] = []
    lead: tuple[int, str] | None = None
    for i, unit in enumerate(units):
        if lead is not None and unit.group == lead[0] and unit.kind in _LEAD_TARGETS:
            unit.prefix.insert(0, lead[1])
            out.append(unit)
            continue
        lead = None
        nxt = units[i + 1] if i + 1 < len(units) else None
        if (
            unit.kind == "para"
            and len(unit.parts) == 1
            and nxt is not None
            and nxt.kind in _LEAD_TARGETS
            and nxt.block == unit.block
        ):
            text = unit.parts[0][0].strip()
            if text.endswith(":") and len(text) <= max_chars // _LEAD_IN_MAX_FRACTION:
                lead = (nxt.group, text)
                continue
        out.append(unit)
    return out


def _size(units: list[_Unit], max_chars: int) -> list[_Piece]:
    pieces: list[_Piece] = []
    for unit in units:
        parts = [(t, code) for t, code in unit.parts if t.strip()]
        prefix = "\n".join(p for p in unit.prefix if p)
        body = "\n".join(t for t, _ in parts)
        whole = f"{prefix}\n{body}" if prefix and body else prefix or body
        if len(whole) <= max_chars:
            texts = [whole]
        else:
            if prefix and len(prefix) <= max_chars // 3:
                budget = max_chars - len(prefix) - 1
            else:
                parts = [(p, False) for p in unit.prefix if p] + parts
                prefix, budget = "", max_chars
            packed = _pack([s for t, code in parts for s in _split(t, code, budget)], "\n", budget)
            texts = [f"{prefix}\n{p}" if prefix else p for p in packed]
        for text in texts:
            if text.strip():
                pieces.append(_Piece(unit.kind, unit.heading_path, unit.heading_id, unit.block, text))
    return pieces


def _pack(segments: list[str], sep: str, budget: int) -> list[str]:
    out: list[str] = []
    current = ""
    for seg in segments:
        if current and len(current) + len(sep) + len(seg) <= budget:
            current = f"{current}{sep}{seg}"
        else:
            if current:
                out.append(current)
            current = seg
    if current:
        out.append(current)
    return out


def _merge(pieces: list[_Piece], max_chars: int) -> list[_Piece]:
    """Small neighbouring paragraphs become one passage; items, rows and definitions stay citable alone."""
    out: list[_Piece] = []
    for piece in pieces:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.kind in _MERGEABLE
            and piece.kind in _MERGEABLE
            and prev.block == piece.block
            and prev.heading_id == piece.heading_id
            and len(prev.text) + 2 + len(piece.text) <= max_chars
        ):
            prev.text = f"{prev.text}\n\n{piece.text}"
        else:
            out.append(piece)
    return out


# --------------------------------------------------------------------------- splitting

_SENTENCE_END = re.compile(r"""([.!?]+)["'”’)\]]*\s+(?=["'“‘(\[]?[A-Z0-9])""")
_ABBREVIATIONS = frozenset(
    {"e.g.", "i.e.", "cf.", "vs.", "viz.", "al.", "mr.", "mrs.", "ms.", "dr.", "prof.", "st.", "no.", "fig.",
     "approx.", "inc.", "ltd.", "jr.", "sr.", "resp.", "ca.", "eq.", "sec.", "vol.", "p.", "pp."}
)  # fmt: skip
_INITIALS = re.compile(r"^(?:[A-Za-z]\.)+$")
_WORD = re.compile(r"\S+")


def _split(text: str, code: bool, budget: int) -> list[str]:
    """Cut one over-long part: code by lines, prose by sentences, then words, then characters."""
    if len(text) <= budget:
        return [text]
    if code:
        out: list[str] = []
        for line in _pack(text.split("\n"), "\n", budget):
            out.extend(_split_words(line, budget) if len(line) > budget else [line])
        return out
    out = []
    for sentence in _pack(_sentences(text), " ", budget):
        out.extend(_split_words(sentence, budget) if len(sentence) > budget else [sentence])
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences as substrings of the text (stripped), not cut at "e.g.", initials or "3.11"."""
    return _sentences(text)


def _sentences(text: str) -> list[str]:
    cuts = [0]
    for match in _SENTENCE_END.finditer(text):
        if match.group(1) == ".":
            word = text[text.rfind(" ", 0, match.start(1)) + 1 : match.end(1)]
            word = word.rsplit("\n", 1)[-1].lstrip("(\"'“‘[").lower()
            if word in _ABBREVIATIONS or _INITIALS.match(word):
                continue
        cuts.append(match.end())
    cuts.append(len(text))
    return [s for s in (text[a:b].strip() for a, b in itertools.pairwise(cuts)) if s]


def _split_words(text: str, budget: int) -> list[str]:
    out: list[str] = []
    start = end = -1
    for match in _WORD.finditer(text):
        if start >= 0 and match.end() - start <= budget:
            end = match.end()
            continue
        if start >= 0:
            out.append(text[start:end])
        start, end = match.start(), match.end()
        while end - start > budget:
            out.append(text[start : start + budget])
            start += budget
    if start >= 0 and end > start:
        out.append(text[start:end])
    return out


# --------------------------------------------------------------------------- anchors

_SLUG_MAX = 60
_NON_SLUG = re.compile(r"[^a-z0-9]+")


def _slug(path: tuple[str, ...]) -> str:
    if not path:
        return "root"
    ascii_text = unicodedata.normalize("NFKD", "-".join(path)).encode("ascii", "ignore").decode()
    slug = _NON_SLUG.sub("-", ascii_text.lower()).strip("-")
    return slug[:_SLUG_MAX].strip("-") or "section"


def _anchor(pieces: list[_Piece]) -> list[Chunk]:
    """`<section slug>-<ordinal>`; the ordinal is digits only, so unique section slugs make unique anchors."""
    slugs: dict[int, str] = {}
    used: set[str] = set()
    ordinals: dict[int, int] = {}
    chunks: list[Chunk] = []
    for piece in pieces:
        text = piece.text.strip("\n")
        if not text.strip():
            continue
        slug = slugs.get(piece.heading_id)
        if slug is None:
            base = slug = _slug(piece.heading_path)
            n = 1
            while slug in used:
                n += 1
                slug = f"{base}-{n}"
            used.add(slug)
            slugs[piece.heading_id] = slug
        ordinals[piece.heading_id] = ordinal = ordinals.get(piece.heading_id, 0) + 1
        chunks.append(Chunk(f"{slug}-{ordinal}", piece.heading_path, text))
    return chunks
