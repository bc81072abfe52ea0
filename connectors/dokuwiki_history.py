"""A DokuWiki page's revisions as versions (issue 19.3): which revisions, and each as a document.

Kept apart from connectors.dokuwiki (the API and the permissions) because it only needs two of the
wiki's calls: a batch of the page's changelog and a revision's rendered text.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from connectors.base import Earlier, SourceDocument

Versions = Callable[[int], list[tuple[int, str]]]
"""One batch of the page's changelog from its `first`-th entry, newest first: (revision, type)."""


@dataclass(frozen=True)
class PageHistory:
    """What the revisions of one listed page share: all but their time, fingerprint and text."""

    page: str
    current: int  # the listed (current) revision
    doc_id: str
    tenant: str
    acl: tuple[str, ...]
    base_url: str
    limit: int  # the setting `revisions`: the newest ones, the current one included


def newer_revisions(versions: Versions, current: int, after: int, limit: int) -> tuple[list[int], bool]:
    """Revisions older than `current` and newer than `after`, newest first, at most `limit - 1`;
    whether older ones were left out. Stops at a deletion (an earlier life of the page is not this
    page's history) and after a bounded number of calls."""
    wanted = limit - 1
    found: list[int] = []
    first = 0
    for _ in range(wanted + 2):
        batch = versions(first)
        if not batch:
            return found, False
        first += len(batch)
        for rev, kind in batch:
            if rev >= current:
                continue
            if rev <= after or kind == "D":
                return found, False
            if len(found) == wanted:
                return found, True
            found.append(rev)
    return found, True


def earlier(
    history: PageHistory, versions: Versions, reader: Callable[[int], Callable[[], Awaitable[bytes]]]
) -> Callable[[str | None], Awaitable[Earlier]]:
    """SourceDocument.earlier for one page. Each revision a version with its own time; the ACL of
    every one is the page's current one (the wiki keeps no ACL history, and the index never allows
    what the wiki denies now). `reader(rev)` fetches that revision's text."""

    async def revisions(indexed: str | None) -> Earlier:
        after = 0
        if indexed is not None:
            head = indexed.split(":", 1)[0]
            if not head.isdigit():  # cannot tell which revisions are newer: none rather than old as new
                return Earlier(errors=(f"indexed revision {indexed!r} unreadable, earlier revisions skipped",))
            after = int(head)
        older, more = await asyncio.to_thread(newer_revisions, versions, history.current, after, history.limit)
        docs = tuple(
            SourceDocument(
                doc_id=history.doc_id,
                tenant=history.tenant,
                acl=history.acl,
                title=history.page.rsplit(":", 1)[-1],
                content_type="html",
                source_url=f"{history.base_url}/doku.php?{urllib.parse.urlencode({'id': history.page, 'rev': rev})}",
                fingerprint=f"{rev}:-",
                fetch=reader(rev),
                effective_from=datetime.fromtimestamp(rev, UTC),
            )
            for rev in reversed(older)
        )
        limit = history.limit
        bounded = f"only the newest {limit} revisions indexed (revisions = {limit})" if more else ""
        return Earlier(docs, bounded=bounded)

    return revisions
