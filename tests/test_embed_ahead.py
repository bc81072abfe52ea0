"""An upsert batch is embedded a slice ahead of its apply (streams.embedded_worker._apply_documents).

While the worker writes one slice of documents into the stores, a helper thread embeds the next, so
the model does not wait for the stores. What must not change: records applied in log order, one
flush and one commit per batch, nothing acknowledged before it is durable, a store error
acknowledging only the records applied before it, a revocation going before the records not yet
applied. Real stores throughout (tests/test_write_path.py's home); the model is a stand-in whose
calls can be held until the apply has begun, so the overlap is shown by order, never by timing.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_indexing import acl, texts, upsert
from test_write_path import FakeEmbedder, Journal, RecordingLexical, home

from schemas.events import Event
from schemas.passages import Passage
from streams.embedded_worker import EMBED_AHEAD_DOCS, GROUP, EmbeddedWorker
from streams.ports import TOPIC_ACL, TOPIC_DOCUMENTS
from streams.sqlite_log import SqliteEventLog

DOCS = 2 * EMBED_AHEAD_DOCS + EMBED_AHEAD_DOCS // 2
"""Three slices: two full ones and a half one."""


def number(text: str) -> int:
    """The backlog document a text or call is from (-1: not one of them)."""
    found = re.search(r"(?:number |t:k)(\d+)", text)
    return int(found.group(1)) if found else -1


class HeldEmbedder(FakeEmbedder):
    """Holds the first call that embeds a text of the second slice until `release` is set (at most
    `wait_s`), and notes whether it was released, and by then which thread called."""

    def __init__(self, wait_s: float = 10.0) -> None:
        super().__init__()
        self.release = threading.Event()
        self.wait_s = wait_s
        self.released: bool | None = None
        self.threads: set[str] = set()
        self.before_hold: Any = None

    def embed(self, items: Any) -> np.ndarray:
        self.threads.add(threading.current_thread().name)
        if self.released is None and any(number(t) >= EMBED_AHEAD_DOCS for t in items):
            if self.before_hold is not None:
                self.before_hold()
            self.released = self.release.wait(self.wait_s)
        return super().embed(items)


def spy_applies(sink: Any, order: list[str], on_apply: Any = None) -> None:
    original = sink.apply

    def spy(event: Event, *args: Any) -> Any:
        order.append(f"{event.kind.value}:{event.doc_id}")
        if on_apply is not None:
            on_apply(event)
        return original(event, *args)

    sink.apply = spy


def publish_backlog(log: SqliteEventLog) -> None:
    log.publish_many([upsert(1, f"Kappa fact number {i}.", doc=f"t:k{i}.md") for i in range(DOCS)])


def test_the_next_slice_is_embedded_while_the_one_before_is_applied(tmp_path: Path) -> None:
    """The second slice's embedding is held until the first slice's apply has begun: before, a batch
    was embedded whole before any of it was applied, and the held call waited out its timeout."""
    journal = Journal()
    model = HeldEmbedder()
    h = home(tmp_path, journal, embedder=model)
    publish_backlog(h["log"])
    order: list[str] = []
    spy_applies(h["sink"], order, lambda _: model.release.set())
    stats = EmbeddedWorker(h["log"], h["sink"]).drain()
    assert model.released is True, "the first slice was applied while the second was being embedded"
    assert any(name.startswith("ragsync-embed-ahead") for name in model.threads)
    assert order == [f"upsert:t:k{i}.md" for i in range(DOCS)], "applied in log order"
    assert journal.calls == ["lexical.flush", f"commit:{DOCS}"], "one flush and one commit for the batch"
    assert stats.applied == DOCS and stats.passages_embedded == DOCS
    assert h["vector"].count("acme") == h["lexical"].count("acme") == DOCS
    assert h["log"].lag(TOPIC_DOCUMENTS, GROUP) == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("ragsync-embed-ahead")], "helper stopped"


class FailingLexical(RecordingLexical):
    """A store that fails on one document's passages (a full disk, say), every time."""

    def __init__(self, path: Path, journal: Journal, doc_id: str) -> None:
        super().__init__(path, journal)
        self.doc_id = doc_id

    def upsert(self, passages: Any) -> None:
        batch: list[Passage] = list(passages)
        if any(p.doc_id == self.doc_id for p in batch):
            raise OSError("disk full")
        super().upsert(batch)


def test_a_store_error_in_a_later_slice_acknowledges_only_the_records_applied_before_it(tmp_path: Path) -> None:
    journal = Journal()
    h = home(tmp_path, journal, embedder=FakeEmbedder())
    failing_at = EMBED_AHEAD_DOCS + 3
    lexical = FailingLexical(tmp_path / "failing.db", journal, f"t:k{failing_at}.md")
    h["sink"].lexical = lexical
    publish_backlog(h["log"])
    with pytest.raises(OSError, match="disk full"):
        EmbeddedWorker(h["log"], h["sink"], max_retries=0).drain()
    assert journal.calls == ["lexical.flush", f"commit:{failing_at}"], "the prefix was made durable, then acknowledged"
    assert h["log"].lag(TOPIC_DOCUMENTS, GROUP) == DOCS - failing_at
    assert h["docs"].get("acme", f"t:k{failing_at - 1}.md") is not None
    assert h["docs"].get("acme", f"t:k{failing_at}.md") is None, "the failing document is not acknowledged"
    assert lexical.count("acme") == failing_at
    assert not [t for t in threading.enumerate() if t.name.startswith("ragsync-embed-ahead")], "helper stopped"


def test_a_revocation_published_while_the_next_slice_embeds_goes_before_it(tmp_path: Path) -> None:
    """Another process revokes a document while the second slice is embedded (the first being applied):
    the apply stops before its next record, what was applied is committed, and the ACL change is
    applied before any document of the second slice."""
    journal = Journal()
    model = HeldEmbedder()
    h = home(tmp_path, journal, embedder=model)
    log: SqliteEventLog = h["log"]
    log.publish(upsert(1, "Secret roadmap for the next year.", doc="t:roadmap.md"))
    EmbeddedWorker(log, h["sink"]).drain()
    assert model.released is None, "nothing held yet"
    publish_backlog(log)
    other = SqliteEventLog(tmp_path / "events.db")  # another process's publisher
    order: list[str] = []

    def revoke() -> None:
        other.publish(acl(2, ("group:board",), doc="t:roadmap.md"))
        order.append("revocation published")
        model.release.set()

    model.before_hold = revoke
    spy_applies(h["sink"], order)
    worker = EmbeddedWorker(log, h["sink"])
    stats = worker.drain()
    acl_at = order.index("acl:t:roadmap.md")
    later_slices = [i for i, c in enumerate(order) if c.startswith("upsert:") and number(c) >= EMBED_AHEAD_DOCS]
    assert later_slices and acl_at < min(later_slices), order
    assert order.index("revocation published") < acl_at
    assert worker.preemptions >= 1 and stats.applied == DOCS + 1
    assert texts(h["lexical"], "secret roadmap") == []
    assert log.lag(TOPIC_ACL, GROUP) == 0 and log.lag(TOPIC_DOCUMENTS, GROUP) == 0
    assert h["vector"].count("acme") == h["lexical"].count("acme") == DOCS + 1
