"""HTML reader: block structure to units, after main-content detection and boilerplate removal.

`indexer.chunking.boilerplate` decides what part of the page is the document (dropping navigation,
headers, footers, sidebars, link lists and permalinks); this module reads what is left: headings,
sections, paragraphs, lists, definition lists, tables and preformatted code, closing the elements
real-world HTML leaves open.

A sidebar the boilerplate pass kept (DocBook's `div.sidebar` "TIP ..." / "BACK TO BASICS ..." boxes,
reST's `aside.sidebar`: prose set beside the text, not navigation) is read as a subsection of the
section it sits in, its title (the first `.title` / `*-title` element) as its heading: its passages
say what box they come from, and the passages of the section around it keep their own heading and
ordinals (`indexer.chunking.anchors`), so a sidebar adds anchors without renumbering the section's.
Tables are read by `indexer.chunking.html_tables`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from indexer.chunking.boilerplate import PERMALINK, is_sidebar, main_content
from indexer.chunking.html_tables import TableCtx, finish_row, finish_table
from indexer.chunking.openstack import OpenStack
from indexer.chunking.units import (
    MAX_INDENT_LEVELS,
    MAX_PREFIX_LINES,
    HeadingState,
    Kind,
    Unit,
    UnitBuilder,
    collapse,
)
from schemas.text import html_for_parser

MAX_BOX_LEVEL = 7
"""A box's title is a heading one level below the section it sits in, never deeper than this: boxes
nested 100k deep would otherwise make a heading path 100k long, copied at every level."""
# Content that is never text; frame elements (nav, header, footer, ...) are cut earlier by boilerplate.
_SKIP_TAGS = frozenset({"script", "style", "head", "noscript", "template", "svg", "button", "select"})
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
# Links are kept for the boilerplate pass (link density), then removed like the other inline tags.
_INLINE = r"abbr|b|cite|code|dfn|em|font|i|kbd|mark|q|s|samp|small|span|strong|sub|sup|tt|u|var"
# Linear on any input: a tag's body never spans a "<", so "<a <a <a ... >" is not rescanned once per
# "<a" (issue 8 item 7); an attribute value holding "<" or ">" leaves its tag to the parser.
_ATTRS = r"""\b(?:[^<>"']++|"[^"<>]*+"|'[^'<>]*+')*+>"""
_INLINE_TAGS = re.compile(rf"<(?:/\s*)?(?:{_INLINE}){_ATTRS}", re.IGNORECASE)
_LINK_TAGS = re.compile(rf"<(?:/\s*)?a{_ATTRS}", re.IGNORECASE)
_HEADERLINK = re.compile(r"<a\b(?=[^<>]*?\bheaderlink\b)[^<>]*+>[^<]*+</a>", re.IGNORECASE)


@dataclass(slots=True)
class _Open:
    """One open HTML element and the bookkeeping to undo when it closes."""

    tag: str
    skip: bool = False
    unit: bool = False
    heading: int = 0
    section: HeadingState | None = None
    aside_block: int = -1  # a sidebar: the text's merge block, continued after it
    pre: bool = False
    part_break: bool = False
    list_: bool = False
    dl: bool = False
    table: bool = False
    row: bool = False
    cell: bool = False
    term: bool = False
    glue: bool = False  # a definition term absorbed as a line of the enclosing unit: heads its body
    thead: bool = False


@dataclass(slots=True)
class _OpenUnit:
    unit: Unit
    buf: list[str] = field(default_factory=list)
    code: bool = False
    marker: str = ""
    in_term: bool = False
    term: list[str] = field(default_factory=list)
    implicit: bool = False

    def flush(self) -> None:
        text = "".join(self.buf)
        self.buf.clear()
        text = text.strip("\n").rstrip() if self.code else collapse(text)
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


class _HtmlReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.b = UnitBuilder()
        self._stack: OpenStack[_Open] = OpenStack()
        self._skip = 0
        self._units: list[_OpenUnit] = []
        self._lists: list[_ListCtx] = []
        self._owned_lists: dict[int, int] = {}  # id(unit) -> open lists inside it (its items' indentation)
        self._dls: list[_DlCtx] = []
        self._tables: list[TableCtx] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self._title_level = 0  # a sidebar just opened: the level its leading title element takes

    # -- plumbing

    @property
    def _active(self) -> bool:
        return not self._skip

    def _open_unit(self, kind: Kind, group: int = -1, implicit: bool = False) -> _OpenUnit:
        self._close_implicit()
        self._title_level = 0  # content came first: the sidebar has no title of its own
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
        idx = self._stack.in_scope((tags,) if isinstance(tags, str) else tags, scope)
        if idx >= 0:
            self._pop_to(idx)

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
        self._stack.push(tag, el)
        if self._skip:
            return
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag in _SKIP_TAGS or "hidden" in a:
            el.skip = True
            self._skip += 1
            return
        self._start(el, tag, a, classes)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        idx = self._stack.nearest((tag,))
        if idx >= 0:
            self._pop_to(idx)

    def handle_data(self, data: str) -> None:
        if self._skip:
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
                self._tables.append(TableCtx(-1, None, flatten=True))
                el.table = True
            elif tag in _BLOCK_TAGS:
                self._cell.append(" ")
            return
        if tag in _HEADINGS and not self._units:
            el.heading = _HEADINGS[tag]
            self._title_level = 0
            self._heading = []
        elif self._title_level and not self._units and any(c == "title" or c.endswith("-title") for c in classes):
            el.heading, self._title_level = self._title_level, 0
            self._heading = []
        elif tag in ("div", "aside") and is_sidebar(classes):
            el.section, el.aside_block = self.b.save(), self.b.block
            self.b.boundary()
            self.b.asides += 1
            if self._units:  # inside a list item or definition: a passage of its own, not more lines of it
                el.unit = True
                self._open_unit("para")
            else:
                self._title_level = min(self.b.depth + 1, MAX_BOX_LEVEL)
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
            if owner is not None:
                self._owned_lists[id(owner)] = self._owned_lists.get(id(owner), 0) + 1
        elif tag == "li":
            ctx = self._lists[-1] if self._lists else None
            if ctx is not None:
                ctx.number += 1
            marker = f"{ctx.number}. " if ctx is not None and ctx.ordered else ""
            if self._units:
                self._break()
                depth = self._owned_lists.get(id(self._units[-1]), 0)
                indent = "  " * min(max(depth - 1, 0), MAX_INDENT_LEVELS)  # 20k nested lists: not 20k-space markers
                self._units[-1].marker = indent + (marker or "- ")
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
            self._break()
            self._tables.append(TableCtx(self.b.new_group(), self._units[-1].unit if self._units else None, False))
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
                if not table.row:
                    table.row_keyed = tag == "th"
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
                el.part_break = el.glue = True
                ctx.last = "absorbed"
                return
            if ctx.current is None or ctx.last != "dt":
                ou = self._open_unit("def", ctx.group)
                if nested and ctx.outer is not None:  # the nearest enclosing terms: 100k nested dls copy no more
                    ou.unit.prefix.extend(ctx.outer.unit.prefix[-(MAX_PREFIX_LINES - 1) :])
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
        if el.tag in _BLOCK_TAGS:
            self._close_implicit()
        if el.heading and self._heading is not None:
            self.b.heading(el.heading, "".join(self._heading))
            self._heading = None
        if el.cell and self._cell is not None:
            table = self._tables[-1]
            if table.row:
                table.row[-1] = collapse("".join(self._cell).replace("¶", ""))
            self._cell = None
        if el.row:
            finish_row(self.b, self._tables[-1])
        if el.thead:
            self._tables[-1].in_head = False
        if el.table:
            finish_table(self.b, self._tables.pop())
        if el.term:
            ou = self._units[-1]
            term = collapse("".join(ou.term).replace("¶", ""))
            ou.term.clear()
            ou.in_term = False
            if term:
                ou.unit.prefix.append(term)
        if el.pre and self._units:
            self._units[-1].flush()
            self._units[-1].code = False
        if el.glue and self._units:
            ou = self._units[-1]
            before = len(ou.unit.parts)
            ou.flush()
            if len(ou.unit.parts) > before:
                ou.unit.glued.add(len(ou.unit.parts) - 1)
        if el.unit:
            self._units.pop().flush()
        if el.part_break or el.list_ or el.dl:
            self._break()
        if el.list_:
            owner = self._lists.pop().owner
            if owner is not None:
                self._owned_lists[id(owner)] -= 1
        if el.dl:
            self._dls.pop()
        if el.section is not None:
            self.b.restore(el.section)
        if el.aside_block >= 0:
            self.b.asides -= 1
            self.b.block = el.aside_block
            self._title_level = 0

    def finish(self) -> list[Unit]:
        self.close()
        self._pop_to(0)
        while self._units:
            self._units.pop().flush()
        return self.b.units


def read_html(content: str, title: str = "") -> list[Unit]:
    """Units of the page's main content; the whole page when cutting the frame would leave nothing."""
    content = html_for_parser(content)  # HTMLParser is quadratic on constructs left open at the end
    content = _INLINE_TAGS.sub("", PERMALINK.sub("", _HEADERLINK.sub("", content)))
    units = _parse(_LINK_TAGS.sub("", main_content(content)))
    if not any(u.parts or u.prefix for u in units):
        units = _parse(_LINK_TAGS.sub("", content))
    return units


def _parse(content: str) -> list[Unit]:
    reader = _HtmlReader()
    # Again: removing inline and link tags can leave a construct open at the end ("<a <a <a >" loses
    # its one ">" with the last "<a >"), which HTMLParser would rescan from every "<" (issue 8 item 7).
    reader.feed(html_for_parser(content))
    return reader.finish()
