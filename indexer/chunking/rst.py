"""reStructuredText reader (docutils): the doctree to units.

Parsing is locked down, because a document is input, not configuration: `.. include::`, `.. raw::`
and `csv-table :file:/:url:` are disabled (they would read server files or URLs into the index),
no docutils.conf is read, nothing is written to stderr, smart quotes are off (quotes must match the
author's characters) and a problem in the markup never halts: docutils' own messages about it
(unknown directive, bad indentation) are dropped and the rest of the document is read.

The title docutils promotes from a lone top section is heading level 1, sections below it follow;
`docinfo` (the field list at the top: `:author:`, `:effective_from:`) is metadata, read by
`rst_metadata`, not passages. Generated tables of contents (`.. contents::`) are navigation, dropped.

Bounds (issue 18): docutils copies every indented block once per level it is nested in, so a
document whose text times its nesting depth passes MAX_NESTING_COST is refused before docutils sees
it (`nesting_cost`). Its cost is not linear on every other input either (a grid table a thousand
columns wide is quadratic), so outside tests it only runs in a child process within a budget:
connectors.extract at scan time, indexer.chunker.IsolatedChunker in the indexer.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from docutils import nodes
from docutils.core import publish_doctree

from indexer.chunking.units import MAX_PREFIX_LINES, Kind, Unchunkable, Unit, UnitBuilder, collapse, row_line

_SETTINGS: dict[str, Any] = {
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "_disable_config": True,
    "report_level": 5,
    "halt_level": 5,
    "traceback": True,  # raise instead of printing and calling sys.exit()
    "smart_quotes": False,
    "syntax_highlight": "none",
    "doctitle_xform": True,
    "docinfo_xform": True,
    "sectsubtitle_xform": False,
    "pep_references": False,
    "rfc_references": False,
    "input_encoding": "unicode",
    "output_encoding": "unicode",
    "language_code": "en",
}
_SKIP = (
    nodes.comment,
    nodes.system_message,
    nodes.substitution_definition,
    nodes.target,
    nodes.raw,
    nodes.docinfo,
    nodes.decoration,
    nodes.pending,
    nodes.image,
)


MAX_NESTING_COST = 64 * 1024 * 1024
"""Bound on `nesting_cost`: docutils holds about two bytes per unit of it (measured), so 128 MiB."""


def nesting_cost(text: str) -> int:
    """Characters times their nesting depth, the depth being the number of indentation levels open
    (as Python's tokenizer counts them). docutils copies each indented block once per level it is
    nested in, so this is what parsing costs: 2,000 list levels in 3.9 MB reached 1.24 GB before
    docutils gave up (issue 18). Linear, and never more than the parse it stands for."""
    levels = [0]
    cost = 0
    for line in text.split("\n"):
        body = line.lstrip(" \t")
        if not body:
            continue
        indent = len(line) - len(body)
        if "\t" in line[:indent]:
            indent = len(line[:indent].expandtabs(8))  # as docutils reads tabs
        while indent < levels[-1]:
            levels.pop()
        if indent > levels[-1]:
            levels.append(indent)
        cost += len(line) * len(levels)
    return cost


def parse_rst(text: str) -> nodes.document:
    """The doctree, never halting on markup errors. Other exceptions are docutils bugs on odd input.

    Unchunkable for a document nested too deeply to parse within bounds (before docutils starts).
    """
    cost = nesting_cost(text)
    if cost > MAX_NESTING_COST:
        raise Unchunkable(
            f"reStructuredText nested too deeply to read ({cost} characters times indentation levels,"
            f" limit {MAX_NESTING_COST})"
        )
    settings = dict(_SETTINGS, warning_stream=io.StringIO())
    try:
        return publish_doctree(text, settings_overrides=settings)
    except RecursionError:  # docutils recurses once per nested block (1000 indented quotes)
        raise Unchunkable("reStructuredText nested too deeply to read") from None


@dataclass(frozen=True, slots=True)
class RstMeta:
    title: str | None
    fields: dict[str, str]  # docinfo fields, names case-folded (`effective_from`, `author`)


def rst_metadata(text: str) -> RstMeta:
    document = parse_rst(text)
    title = next((collapse(c.astext()) for c in document.children if isinstance(c, nodes.title)), None)
    fields: dict[str, str] = {}
    for info in document.findall(nodes.docinfo):
        for child in info.children:
            if isinstance(child, nodes.field):
                name = collapse(child[0].astext()).casefold()
                value = collapse(child[1].astext())
            elif isinstance(child, nodes.Element) and child.tagname != "field":
                name, value = child.tagname.casefold(), collapse(child.astext())
            else:
                continue
            if name in fields and name.replace("-", "_") == "effective_from":
                raise ValueError(f"docinfo field {name!r} is given twice")  # two dates: guessing could publish early
            fields.setdefault(name, value)
    return RstMeta(title or None, fields)


def _text(node: nodes.Node) -> str:
    return collapse(node.astext())


class _Reader:
    def __init__(self) -> None:
        self.b = UnitBuilder()
        self.base = 0  # 1 when the document has a title: its sections are level 2

    def read(self, document: nodes.document) -> list[Unit]:
        self.base = 1 if any(isinstance(c, nodes.title) for c in document.children) else 0
        self._children(document, 0)
        return self.b.units

    def _children(self, node: nodes.Element, depth: int) -> None:
        for child in node.children:
            self._block(child, depth)

    def _block(self, node: nodes.Node, depth: int) -> None:
        if isinstance(node, _SKIP) or not isinstance(node, nodes.Element):
            return
        if isinstance(node, nodes.title):
            self.b.heading(max(1, depth + self.base), _text(node))
        elif isinstance(node, nodes.subtitle):
            self.b.heading(depth + self.base + 1, _text(node))
        elif isinstance(node, nodes.section):
            self._section(node, depth + 1)
        elif isinstance(node, nodes.topic) and "contents" in node["classes"]:
            return
        elif isinstance(node, nodes.paragraph | nodes.rubric | nodes.caption | nodes.attribution):
            self._unit("para", [(_text(node), False)])
        elif isinstance(node, nodes.literal_block | nodes.doctest_block):
            self._unit("code", [(node.astext().rstrip("\n"), True)])
        elif isinstance(node, nodes.line_block):
            self._unit("para", [(line, False) for line in _lines(node)])
        elif isinstance(node, nodes.bullet_list | nodes.enumerated_list):
            self._list(node)
        elif isinstance(node, nodes.definition_list):
            self._definitions(node)
        elif isinstance(node, nodes.field_list | nodes.option_list):
            self._fields(node)
        elif isinstance(node, nodes.table):
            self._table(node)
        elif isinstance(node, nodes.transition):
            self.b.boundary()
        elif isinstance(node, nodes.Admonition | nodes.block_quote | nodes.footnote | nodes.citation):
            parts = _flatten(node, 0)
            if isinstance(node, nodes.Admonition) and parts and not isinstance(node, nodes.admonition):
                parts[0] = (f"{node.tagname.capitalize()}: {parts[0][0]}", parts[0][1])
            if parts:
                self._unit("para", parts)
        else:  # containers: compound, container, figure, topic, sidebar, legend, ...
            self._children(node, depth)

    def _section(self, node: nodes.section, depth: int) -> None:
        state = self.b.save()
        self.b.boundary()
        self._children(node, depth)
        self.b.restore(state)

    def _unit(self, kind: Kind, parts: list[tuple[str, bool]], group: int = -1) -> Unit | None:
        parts = [p for p in parts if p[0].strip()]
        if not parts:
            return None
        return self.b.unit(kind, parts, group=group)

    def _list(self, node: nodes.Element) -> None:
        group = self.b.new_group()
        for number, item in enumerate(node.children, _start(node)):
            if not isinstance(item, nodes.list_item):
                continue
            parts = _flatten(item, 0)
            if parts and isinstance(node, nodes.enumerated_list):
                parts[0] = (f"{number}. {parts[0][0]}", parts[0][1])
            self._unit("item", parts, group)

    def _definitions(self, node: nodes.definition_list) -> None:
        group = self.b.new_group()
        for item in node.children:
            if not isinstance(item, nodes.definition_list_item):
                continue
            terms = [_text(c) for c in item.children if isinstance(c, nodes.term | nodes.classifier)]
            body = [p for c in item.children if isinstance(c, nodes.definition) for p in _flatten(c, 0)]
            unit = self.b.unit("def", body, group=group)
            unit.prefix.append(" : ".join(t for t in terms if t))

    def _fields(self, node: nodes.Element) -> None:
        group = self.b.new_group()
        for item in node.children:
            if not isinstance(item, nodes.Element) or len(item.children) < 2:
                continue
            name, body = item.children[0], item.children[1]
            unit = self.b.unit("def", _flatten(body, 0) if isinstance(body, nodes.Element) else [], group=group)
            unit.prefix.append(_text(name))

    def _table(self, node: nodes.table) -> None:
        group = self.b.new_group()
        header: list[str] = []
        body: list[str] = []
        for part in node.findall(lambda n: isinstance(n, nodes.thead | nodes.tbody)):
            target = header if isinstance(part, nodes.thead) else body
            for row in part.children:
                if isinstance(row, nodes.row):
                    cells = [_text(entry) for entry in row.children if isinstance(entry, nodes.entry)]
                    if any(cells):
                        target.append(row_line(cells))
        header, body = header[:MAX_PREFIX_LINES], header[MAX_PREFIX_LINES:] + body  # repeated on every row
        for line in body or [""]:
            unit = self.b.unit("row", [(line, False)] if line else [], group=group)
            unit.prefix.extend(header)


def _start(node: nodes.Element) -> int:
    start = node.get("start", 1)
    return start if isinstance(start, int) else 1


def _lines(node: nodes.Element) -> list[str]:
    return [collapse(line.astext()) for line in node.findall(nodes.line)]


def _flatten(node: nodes.Element, depth: int) -> list[tuple[str, bool]]:
    """Nested blocks of an item or a quote as parts, nesting shown by list markers (as for Markdown)."""
    parts: list[tuple[str, bool]] = []
    for child in node.children:
        if isinstance(child, _SKIP) or not isinstance(child, nodes.Element):
            continue
        if isinstance(child, nodes.literal_block | nodes.doctest_block):
            parts.append((child.astext().rstrip("\n"), True))
        elif isinstance(child, nodes.bullet_list | nodes.enumerated_list):
            for number, item in enumerate(child.children, _start(child)):
                if not isinstance(item, nodes.list_item):
                    continue
                sub = _flatten(item, depth + 1)
                marker = "  " * depth + (f"{number}. " if isinstance(child, nodes.enumerated_list) else "- ")
                if sub:
                    parts.append((marker + sub[0][0], sub[0][1]))
                    parts.extend(sub[1:])
        elif isinstance(child, nodes.line_block):
            parts.extend((line, False) for line in _lines(child))
        elif isinstance(child, nodes.table):
            for row in child.findall(nodes.row):
                cells = [_text(entry) for entry in row.children if isinstance(entry, nodes.entry)]
                if any(cells):
                    parts.append((row_line(cells), False))
        elif isinstance(child, nodes.TextElement):
            parts.append((_text(child), False))
        else:
            parts.extend(_flatten(child, depth))
    return [p for p in parts if p[0].strip()]


def read_rst(content: str, title: str = "") -> list[Unit]:
    document = parse_rst(content)
    try:
        return _Reader().read(document)
    except RecursionError:  # not reached in practice: docutils gives up on a shallower nesting
        raise Unchunkable("reStructuredText nested too deeply to read") from None
