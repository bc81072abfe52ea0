"""Markdown reader (CommonMark + tables, front matter dropped): tokens to units."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from indexer.chunking.units import Unit, UnitBuilder, collapse, row_line
from schemas.text import html_for_parser

_MD = MarkdownIt("commonmark").enable("table")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
_TAG = re.compile(r"<!--(?:[^-]++|-(?!->))*+-->|<[^<>]*+>")
"""Linear (with html_for_parser first): an unclosed "<" fails at the next "<", not at the end."""


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
    return "\n".join(collapse(line) for line in "".join(out).split("\n")).strip()


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
            row.append(collapse(_inline_text(tokens[j + 1])))
        elif tok.type == "tr_close":
            (head if in_head else body).append(row_line(row))
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
            parts.append((collapse(html.unescape(_TAG.sub(" ", html_for_parser(tok.content)))), False))
        j = end
    return [p for p in parts if p[0].strip()]


def read_markdown(content: str, title: str = "") -> list[Unit]:
    tokens = _MD.parse(_strip_front_matter(content))
    b = UnitBuilder()
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
