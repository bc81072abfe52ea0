"""Reading a fetched file's content within a time and memory budget: one hostile file is that file's error.

A 33 KB PDF of 150k text operators kept pypdf busy for minutes, and a 1.5 MB DOCX whose document.xml
expands to 450 MB drove the scanner to gigabytes (issue 18): in the scanning process, the first held
back every event behind it and the second took the process down, and a scanner that is `ragsync
serve` took the answering and the revocations with it. So the formats whose parsers' cost nothing
here bounds (PDF, DOCX, reStructuredText through docutils) and every large file are read in a child
process under a Budget (indexer.budget: address space limited, killed past its time, kept between
files so a file costs a round trip, not an interpreter start). A file over its budget raises
OverBudget ("extraction exceeded 30 s", "extraction exceeded 1024 MiB of memory"), which the scan
reports as that file's error.

Small text files (Markdown, HTML, text, CSV, TSV up to `inline_bytes`) are read in-process: their
readers are linear (issue 8 item 7, issue 18) and a few hundred kilobytes cannot cost much, so a
folder of notes never starts a child.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from connectors.decoding import BinaryContent
from connectors.formats import Content, read_content
from connectors.formats.errors import Unreadable
from indexer.budget import Budget, OverBudget, PoolUser, near_limit
from schemas.events import ContentType
from schemas.extracted import ExtractedDocument

__all__ = ["CHILD_TYPES", "Budget", "Extractor", "OverBudget"]

CHILD_TYPES: frozenset[str] = frozenset({"pdf", "docx", "rst"})
"""Read in a child whatever their size: their parsers' cost is not bounded by anything we control."""


class Extractor(PoolUser):
    """`read` is connectors.formats.read_content within a Budget; thread-safe.

    `pool`: children shared with other users (the indexer's chunking), whose owner closes them; without
    one the extractor has its own, which `close` ends.
    """

    def in_child(self, content_type: str, size: int) -> bool:
        return content_type in CHILD_TYPES or size > self.budget.inline_bytes

    def read(self, content_type: ContentType, data: bytes) -> Content:
        """Raises what read_content raises (BinaryContent, Unreadable, ValueError) and OverBudget."""
        if not self.in_child(content_type, len(data)):
            return read_content(content_type, data)
        reply = self._pool.call(
            "connectors.extract:read_in_child", {"content_type": content_type}, data, what="extraction"
        )
        if reply.get("ok"):
            return _content(reply)
        kind, message = reply.get("kind"), str(reply.get("message", ""))
        if kind == "binary":
            raise BinaryContent(message)
        if kind == "unreadable":
            raise Unreadable(message)
        if kind == "invalid":
            raise ValueError(message)
        raise ValueError(f"cannot index: {message}")


def _content(reply: dict[str, Any]) -> Content:
    extracted = reply.get("extracted")
    effective = reply.get("effective_from")
    return Content(
        text=str(reply.get("text", "")),
        extracted=ExtractedDocument.model_validate(extracted) if extracted is not None else None,
        encoding=_optional_str(reply.get("encoding")),
        title=_optional_str(reply.get("title")),
        effective_from=datetime.fromisoformat(effective) if isinstance(effective, str) else None,
    )


def _optional_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def read_in_child(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    """The child's side of `Extractor.read`: read_content's result, or its error, as JSON values."""
    try:
        content = read_content(header["content_type"], data)
    except BinaryContent as exc:
        return {"ok": False, "kind": "binary", "message": str(exc)}
    except Unreadable as exc:
        if near_limit():  # "not a readable DOCX (XMLSyntaxError: unknown error)" from a failed allocation
            return {"ok": False, "kind": "memory", "retire": True}
        return {"ok": False, "kind": "unreadable", "message": str(exc)}
    except ValueError as exc:  # a bad effective date, front matter that is not YAML, reST nested too deeply
        return {"ok": False, "kind": "invalid", "message": str(exc)}
    except RecursionError:
        return {"ok": False, "kind": "invalid", "message": "nested too deeply to read"}
    return {
        "ok": True,
        "text": content.text,
        "extracted": content.extracted.model_dump(mode="json") if content.extracted is not None else None,
        "encoding": content.encoding,
        "title": content.title,
        "effective_from": content.effective_from.isoformat() if content.effective_from else None,
    }
