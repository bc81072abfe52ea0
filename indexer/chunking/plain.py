"""Plain-text reader: blank lines separate paragraphs; a first line repeating the title is the heading."""

from __future__ import annotations

import re

from indexer.chunking.units import Unit, UnitBuilder, collapse

_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def read_text(content: str, title: str = "") -> list[Unit]:
    b = UnitBuilder()
    paragraphs = [p.strip() for p in _BLANK_LINES.split(content)]
    paragraphs = [p for p in paragraphs if p]
    if paragraphs and title and collapse(paragraphs[0]).casefold() == collapse(title).casefold():
        b.heading(1, paragraphs.pop(0))
    for paragraph in paragraphs:
        lines = "\n".join(line.rstrip() for line in paragraph.split("\n"))
        b.unit("para", [(lines, False)])
    return b.units
