"""What every source connector provides, in the shape of the Elastic connectors framework.

A connector only lists documents and knows how to fetch each one; it never decides what changed
and never emits events. Listing is cheap (paths, ACLs, a fingerprint such as mtime+size) and the
content is fetched lazily, so the scanner (connectors.scan) can skip every unchanged document
without reading it. Metadata that lives inside the content (title, effective date) is therefore
read by the scanner, after a fetch it needed anyway, with `content_metadata` below.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from html.parser import HTMLParser
from typing import Literal, Protocol

from markdown_it import MarkdownIt

from connectors.front_matter import read_front_matter
from indexer.chunking.rst import rst_metadata
from schemas.events import ContentType as ContentType
from schemas.events import TextContentType as TextContentType
from schemas.instants import parse_instant
from schemas.text import html_for_parser


@dataclass(frozen=True)
class SourceDocument:
    doc_id: str
    tenant: str
    acl: tuple[str, ...]
    title: str  # best title known without reading the content; the scanner prefers one found inside it
    content_type: ContentType
    source_url: str
    fingerprint: str  # cheap change hint (e.g. mtime_ns+size); equal fingerprint => content not re-read
    fetch: Callable[[], Awaitable[bytes]]
    effective_from: datetime | None = None  # when None, the scanner takes it from the content, if stated
    narrowed: tuple[str, ...] = ()
    """Why its ACL is stricter than the source's own permissions (connectors.permissions), one line each:
    the sync report lists them as 'permissions narrowed: <doc>: <why>'."""
    locked: bool = False
    """Its access cannot be known (a broken manifest above it): every indexed copy becomes readable by
    nobody, whatever its tenant, and the content is not read. `tenant` and `acl` mean nothing then."""
    earlier: Callable[[str | None], Awaitable[Earlier]] | None = None
    """A source that keeps revisions (a wiki): given the fingerprint indexed last (None on first
    sight), the revisions between it and this one. The scanner asks only when this document's
    content is to be read, and emits each as an upsert of its own version before this one."""


@dataclass(frozen=True)
class Earlier:
    """Revisions older than a listed document and newer than the one indexed, oldest first; each a
    SourceDocument of the same doc_id with its own fingerprint, fetch and effective_from."""

    revisions: tuple[SourceDocument, ...] = ()
    errors: tuple[str, ...] = ()
    """Revisions that could not be listed or read: each one's error, reported; nothing else depends on it."""
    bounded: str = ""
    """Why older revisions were left out (the source's bound), for the sync report; empty when none were."""


SkipReason = Literal[
    "symlink",
    "inside the ragsync home",
    "unsupported type",
    "too large",
    "binary",
    "unreadable",
    "not a file",
    "over budget",  # reading it took longer or more memory than a file may (connectors.extract)
]


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file the connector saw and did not index, with why: every such file is in the sync report."""

    path: str  # relative to the source root
    reason: SkipReason
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


class PassReport:
    """`errors` and `skipped` of the SourceConnector port, kept the same way by every connector: each
    documents() pass starts both lists afresh, and a reader gets copies, so a report being written
    out is never changed under it by the next pass."""

    _errors: list[str]
    _skipped: list[Skipped]

    @property
    def errors(self) -> list[str]:
        return list(self._errors)

    @property
    def skipped(self) -> list[Skipped]:
        return list(self._skipped)


class SourceConnector(Protocol):
    name: str  # short, stable source name (schemas.events.SOURCE_NAME_PATTERN): the namespace of its doc IDs
    location: str  # what the name is bound to, e.g. "drive:/abs/root": one location per name (ConnectorState.claim)

    def documents(self) -> AsyncIterator[SourceDocument]: ...

    @property
    def errors(self) -> list[str]:
        """Read errors of the last documents() pass; non-empty means the listing may be incomplete."""
        ...

    @property
    def skipped(self) -> list[Skipped]:
        """Files of the last documents() pass that are not documents (links, other types), with why."""
        ...

    @property
    def locked_folders(self) -> tuple[str, ...]:
        """Folders under a broken manifest in the last documents() pass ("" is the whole source).

        While `errors` holds deletes back, a document gone from under one of them is locked (readable
        by nobody) rather than left with its old readers. A source without manifests returns ().
        """
        ...


@dataclass(frozen=True, slots=True)
class ContentMeta:
    title: str | None = None
    effective_from: datetime | None = None


def parse_effective_from(value: object) -> datetime:
    """A date means midnight UTC; a datetime without offset is taken as UTC (schemas.instants)."""
    if isinstance(value, str):
        value = value.strip().strip("\"'").strip()
    return parse_instant(value, field="effective_from")


def content_metadata(content_type: ContentType, text: str) -> ContentMeta:
    """Title and effective date stated inside a text format. Raises ValueError on an unreadable date.

    A bad date is an error rather than "no date": publishing a policy meant for later as
    effective now would answer questions with rules that do not apply yet.
    """
    if content_type == "markdown":
        return _markdown_meta(text)
    if content_type == "html":
        return _html_meta(text)
    if content_type == "rst":
        return _rst_meta(text)
    return ContentMeta()


def _rst_meta(text: str) -> ContentMeta:
    """The document title, and `:effective_from:` in the field list at the top (docutils' docinfo)."""
    meta = rst_metadata(text)
    raw = meta.fields.get("effective_from") or meta.fields.get("effective-from")
    return ContentMeta(meta.title, parse_effective_from(raw) if raw else None)


_MD = MarkdownIt("commonmark")


def _markdown_meta(text: str) -> ContentMeta:
    """`title` and `effective_from` from the YAML front matter (connectors.front_matter), else the first heading."""
    front = read_front_matter(text)
    raw = front.fields.get("effective_from")
    effective = parse_effective_from(raw) if raw is not None and raw != "" else None
    title = front.text("title") or _first_markdown_heading(front.body)
    return ContentMeta(title or None, effective)


def _first_markdown_heading(body: str) -> str | None:
    tokens = _MD.parse(body)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            children = tokens[i + 1].children or []
            heading = " ".join("".join(c.content for c in children if c.type in ("text", "code_inline")).split())
            if heading:
                return heading
    return None


class _Done(Exception):
    """Everything _HtmlMeta looks for is in the head or the first h1: stop reading there."""


class _HtmlMeta(HTMLParser):
    """Reads <title>, <meta name="effective_from"> and the first h1, then stops."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] | None = None
        self.h1: list[str] | None = None
        self.title_text = ""
        self.h1_text = ""
        self.effective: str | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "meta" and (a.get("name") or "").lower() in ("effective_from", "effective-from"):
            if self.effective is None and a.get("content"):
                self.effective = a.get("content")
        elif tag == "title" and not self.title_text:
            self.title = []
        elif tag == "h1" and not self.h1_text:
            self.h1 = []
        elif tag == "a" and "headerlink" in (a.get("class") or "").split():
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.title is not None:
            self.title_text = " ".join("".join(self.title).split())
            self.title = None
        elif tag == "head" and self.title_text:
            raise _Done
        elif tag == "h1" and self.h1 is not None:
            self.h1_text = " ".join("".join(self.h1).replace("¶", "").split())
            self.h1 = None
            raise _Done
        elif tag == "a" and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self.title is not None:
            self.title.append(data)
        if self.h1 is not None:
            self.h1.append(data)


def _html_meta(text: str) -> ContentMeta:
    parser = _HtmlMeta()
    try:
        parser.feed(html_for_parser(text))
        parser.close()
    except _Done:
        pass
    effective = parse_effective_from(parser.effective) if parser.effective else None
    return ContentMeta(parser.title_text or parser.h1_text or None, effective)
