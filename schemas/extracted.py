"""The text of a binary document (PDF, DOCX), extracted by the connector, as it travels in an upsert.

Why the connector extracts and the event carries text, not the file's bytes (base64):

* Errors land where users look. An encrypted PDF, a scan without a text layer or a corrupt DOCX is
  found at scan time and is that document's line in the sync report; parsed in the indexer, it
  would be a dead letter an operator has to dig out, and the sync would report success.
* Size. A 30 MiB PDF is 40 MiB as base64, past the 10 MiB event limit; its text is typically a few
  percent of the file. Smaller events also mean less of the document copied into every log and
  every replay, which is what an erasure has to reach: the event holds only the text that the
  passages hold, no images, fonts or embedded files.
* One way. The connector reads the source, the indexer never does; the indexer only turns this
  typed structure into passages (`indexer.chunking.extracted`), with the same sizing, anchors and
  citations as every other format.

The structure is deliberately small: headings with a level, paragraphs, list items, tables. Each
block keeps the page it came from (1-based, the page a viewer opens with `#page=N`) when the format
has pages, so a citation can say the page.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Page = Annotated[int, Field(ge=1)]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    page: Page | None = None


class Heading(_Block):
    kind: Literal["heading"] = "heading"
    level: int = Field(ge=1, le=9)
    text: str


class Paragraph(_Block):
    kind: Literal["para"] = "para"
    text: str


class ListItem(_Block):
    kind: Literal["item"] = "item"
    text: str
    depth: int = Field(default=0, ge=0, le=9)  # 0: a top-level item; deeper items belong to the one above


class Table(_Block):
    kind: Literal["table"] = "table"
    rows: tuple[tuple[str, ...], ...]
    header_rows: int = Field(default=0, ge=0)  # the first rows that name the columns


Block = Annotated[Heading | Paragraph | ListItem | Table, Field(discriminator="kind")]


class ExtractedDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks: tuple[Block, ...]
    pages: int | None = Field(default=None, ge=0)  # page count, for formats that have pages
