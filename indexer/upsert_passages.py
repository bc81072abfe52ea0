"""What an upsert becomes: its chunks and the passages made of them, before any store is touched.

Kept apart from the sink (indexer.sink), which decides what events do to stores and states: this
is only text in, passages out. Chunking runs in-process or, for large documents, in a child within
a budget (indexer.chunker.IsolatedChunker); extracted text (PDF, DOCX) is chunked as extracted. A
batch's chunks are kept from embedding (IndexSink.embed_upserts) to apply, so a batch is chunked once.
"""

from __future__ import annotations

from datetime import datetime

from indexer.chunker import CHUNKER_VERSION, Chunk, IsolatedChunker, chunk_document, chunk_extracted
from indexer.grants import Grants
from schemas.events import Event, UpsertPayload
from schemas.passages import Passage, make_passage_id, url_at

MAX_KEPT = 4096
"""Events whose chunks are kept between embedding and apply; past it the memo starts afresh."""


def upsert_effective_from(event: Event, payload: UpsertPayload) -> datetime:
    """A stated date, else the event's time, to the second: the query side's default as-of is
    now floored to the second, so a document synced a moment ago is visible at once."""
    return payload.effective_from or event.occurred_at.replace(microsecond=0)


class UpsertPassages:
    def __init__(self, max_chars: int, chunker: IsolatedChunker | None) -> None:
        self.max_chars = max_chars
        self.chunker = chunker  # large documents chunked in a child within a budget; None: all in-process
        self._chunks: dict[tuple[str, str], list[Chunk]] = {}

    def _chunks_of(self, event: Event, payload: UpsertPayload) -> list[Chunk]:
        """Chunks by event and content, kept from embed_upserts to apply so a batch is chunked once."""
        key = (event.event_id, payload.content_hash)
        chunks = self._chunks.get(key)
        if chunks is None:
            if len(self._chunks) >= MAX_KEPT:
                self._chunks.clear()
            chunks = self.chunks(payload)
            self._chunks[key] = chunks
        return chunks

    def forget(self, event: Event, payload: UpsertPayload) -> None:
        """The event is applied: its chunks are not needed again."""
        self._chunks.pop((event.event_id, payload.content_hash), None)

    def passages(self, event: Event, payload: UpsertPayload, grants: Grants | None = None) -> list[Passage]:
        effective_from = upsert_effective_from(event, payload)
        if grants is None:  # for embedding only: the ACL is not part of what is embedded
            grants = Grants(tuple(payload.acl))
        return [
            Passage(
                passage_id=make_passage_id(event.doc_id, event.version, chunk.anchor),
                doc_id=event.doc_id,
                version=event.version,
                anchor=chunk.anchor,
                tenant=event.tenant,
                acl=grants.acl,
                acl_since=dict(grants.since),
                effective_from=effective_from,
                superseded_on=None,
                heading_path=chunk.heading_path,
                title=payload.title,
                text=chunk.text,
                source_url=url_at(payload.source_url, chunk.locus.fragment) if chunk.locus else payload.source_url,
                chunker_version=CHUNKER_VERSION,
            )
            for chunk in self._chunks_of(event, payload)
        ]

    def chunks(self, payload: UpsertPayload) -> list[Chunk]:
        """Unchunkable for content that cannot be chunked within bounds (the worker dead-letters it)."""
        if self.chunker is not None and payload.extracted is not None:
            return self.chunker.chunk(payload.extracted, payload.content_type, max_chars=self.max_chars, title="")
        if payload.extracted is not None:
            return chunk_extracted(payload.extracted, max_chars=self.max_chars)
        if payload.content_type == "pdf" or payload.content_type == "docx":  # the payload's validator forbids it
            raise ValueError(f"{payload.content_type} upsert without extracted text")
        if self.chunker is not None:
            return self.chunker.chunk(
                payload.content, payload.content_type, max_chars=self.max_chars, title=payload.title
            )
        return chunk_document(payload.content, payload.content_type, max_chars=self.max_chars, title=payload.title)
