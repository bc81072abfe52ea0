"""The one place events change stores: upserts, revocations and deletions all go through here.

Both profiles call IndexSink.apply, the embedded worker and the Faust agents alike. Every write
is idempotent and versioned, and the document's state is written last, after every store
confirmed; so a crash at any point followed by redelivery converges to the same state, and an
event older than what was applied is ignored (a tombstone keeps a late upsert from resurrecting).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from indexer.apply_rules import ApplyResult, Outcome, access_of, is_stale, state_after_delete, tombstone_of
from indexer.chunker import CHUNKER_VERSION, IsolatedChunker, Unchunkable
from indexer.embed_pacing import EMBED_CALL_BUDGET_S as EMBED_CALL_BUDGET_S  # re-export (the workers pace by it)
from indexer.embed_pacing import EMBED_FIRST_CALL as EMBED_FIRST_CALL  # re-export (tests)
from indexer.embed_pacing import EMBED_SUB_BATCH, PREPARE_CHECK_EVERY, sub_batch_size
from indexer.embed_pacing import Preempted as Preempted  # re-export (raised by embed_upserts)
from indexer.grants import NONE, Grants, overtaken, regrant, restart
from indexer.payload import point_id
from indexer.ports import (
    Cache,
    DeletionAudit,
    DeletionRecord,
    DocState,
    DocStateStore,
    Embedder,
    LexicalIndex,
    VectorIndex,
    Vectors,
)
from indexer.sentence_vectors import SentenceTexts, all_texts, embed_sentences
from indexer.side_by_side import SideBySide
from indexer.upsert_passages import UpsertPassages, upsert_effective_from
from schemas._time import utcnow
from schemas.events import AclPayload, DeletePayload, Event, UpsertPayload
from schemas.passages import Passage
from schemas.passages import embedding_text as embedding_text  # re-export (schemas.passages)

log = logging.getLogger(__name__)


EMBEDDING_CACHE = "embedding-cache"
"""The copy name of the embedding cache in deletion records."""

MAX_AUDITED_IDS = 5000
"""Passage IDs and embedding keys listed per deletion record (counts are always complete)."""


class IndexSink:
    def __init__(
        self,
        lexical: LexicalIndex,
        vector: VectorIndex | None,
        embedder: Embedder | None,
        docs: DocStateStore,
        audit: DeletionAudit,
        cache: Cache,
        *,
        max_chars: int = 1000,
        clock: Callable[[], datetime] = utcnow,
        chunker: IsolatedChunker | None = None,
        sentence_texts: SentenceTexts | None = None,
    ) -> None:
        self.lexical = lexical
        self.vector = vector if embedder is not None else None
        self.embedder = embedder
        self.docs = docs
        self.audit = audit
        self.cache = cache
        self.clock = clock
        self.upsert_passages = UpsertPassages(max_chars, chunker)
        self._sub_batch = EMBED_SUB_BATCH
        """Texts per embedding call of a batch that may give way, learnt from the last call's pace."""
        self._side = SideBySide()
        self.sentence_texts = sentence_texts  # embedded beside each passage when the store keeps sentence vectors

    def _sentences(self) -> SentenceTexts | None:
        keeps = self.sentence_texts is not None and self.vector is not None and self.vector.sentence_vectors
        return self.sentence_texts if keeps else None

    def _embedded_texts(self, passages: Sequence[Passage]) -> list[str]:
        """Every text of these passages the embedder may have cached: the passage's, and its sentences'."""
        return [embedding_text(p) for p in passages] + all_texts(passages, self._sentences())

    def embed_upserts(
        self, events: Sequence[Event], interrupt: Callable[[], bool] | None = None, *, resume: bool = False
    ) -> dict[str, Vectors]:
        """Vectors for the passages of many upserts, embedded together.

        The model is several times faster on large, length-sorted batches than on one small batch
        per document, so a worker that holds a batch of upserts embeds them together and passes
        each event's vectors to `apply`. Stale events are skipped. The texts are sorted by their
        tokens once and embedded a sub-batch at a time (what the model does inside one call anyway;
        with an `interrupt`, as many as take about EMBED_CALL_BUDGET_S, see `sub_batch_size`);
        between two calls `interrupt()` may answer True, and Preempted is raised: a worker uses it
        to apply a revocation that arrived meanwhile instead of waiting for the whole batch. What was
        embedded is not lost: the embedding cache keeps it for the retry. With `resume` the pass goes on
        where the previous call of the same batch stopped (its next slice, streams.embedded_worker), so
        it starts at that call's pace, learnt a moment ago, rather than with a short first call.
        """
        if self.embedder is None or self.vector is None:
            return {}
        spans: list[tuple[str, int, int]] = []
        texts: list[str] = []
        extra: list[str] = []
        for i, event in enumerate(events):
            if i and i % PREPARE_CHECK_EVERY == 0 and interrupt is not None and interrupt():
                raise Preempted  # chunking a large batch takes seconds on a busy machine; chunks are kept
            payload = event.payload
            if not isinstance(payload, UpsertPayload) or is_stale(event, self.docs.get(event.tenant, event.doc_id)):
                continue
            try:
                passages = self.upsert_passages.passages(event, payload)
            except Unchunkable:
                continue  # apply() raises it again, and the worker dead-letters the event with the reason
            spans.append((event.event_id, len(texts), len(texts) + len(passages)))
            texts.extend(embedding_text(p) for p in passages)
            extra.extend(self._embedded_texts(passages)[len(passages) :])
        if not texts:
            return {}
        # Sentence texts ride along in the same sorted sub-batches; `apply` reads them from the cache.
        known = set(texts)
        texts = texts + [t for t in dict.fromkeys(extra) if t not in known]
        cost = self.embedder.token_counts(texts)  # by tokens, not characters: code pads less (bench/README.md)
        order = sorted(range(len(texts)), key=lambda i: cost[i])
        vectors = np.empty((len(texts), self.embedder.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            if start and interrupt is not None and interrupt():
                raise Preempted
            if interrupt is None:
                size = EMBED_SUB_BATCH
            else:
                size = self._sub_batch if start or resume else min(self._sub_batch, EMBED_FIRST_CALL)
            chunk = order[start : start + size]
            began = time.monotonic()
            vectors[chunk] = self.embedder.embed([texts[i] for i in chunk])
            if interrupt is not None:
                self._sub_batch = sub_batch_size(len(chunk), time.monotonic() - began)
            start += len(chunk)
        return {event_id: vectors[start:end] for event_id, start, end in spans}

    def flush(self) -> None:
        """Make the writes of every applied event durable: the stores first, their states last.

        If a store cannot flush, the states written since the last flush are discarded, so no
        state ever claims a version whose passages may not be on disk; the caller re-applies.
        """
        try:
            if self.vector is not None:
                self.vector.flush()
            self.lexical.flush()
            cache = self.embedder.cache if self.embedder is not None else None
            if cache is not None:
                cache.flush()  # the deletions' embedding-cache removals (one commit for the batch)
        except BaseException:
            self.docs.discard()
            raise
        self.docs.flush()

    def discard(self) -> None:
        """Forget unflushed states (the batch is abandoned and will be re-applied from the log)."""
        self.docs.discard()

    def close(self) -> None:
        """End the side-by-side writes' threads (a write in flight finishes first); the worker calls it
        when it shuts down. The stores are not closed here: they belong to whoever opened them."""
        self._side.close()

    def apply(
        self, event: Event, vectors: Vectors | None = None, served: Callable[[Event], None] | None = None
    ) -> ApplyResult:
        """Apply one event to every store; `vectors` may carry its passages' embeddings.

        `served(event)` is called once a revocation or deletion is durable in every store that answers
        queries and the cache is invalidated, before its bookkeeping (audit record, doc state): only
        when every store is durable on return (`durability` "write"), else the caller's flush decides.
        A worker clears the event's deny entry there; the bookkeeping still precedes the ack."""
        received_at = self.clock()
        state = self.docs.get(event.tenant, event.doc_id)
        if is_stale(event, state):
            self._overtaken(event, state)
            return ApplyResult(Outcome.STALE, event)
        payload = event.payload
        if isinstance(payload, UpsertPayload):
            result = self._upsert(event, payload, state, vectors)
        elif isinstance(payload, AclPayload):
            result = self._acl(event, payload, state, served if self.durable_on_write() else None)
        else:
            result = self._delete(event, payload, state, received_at, served if self.durable_on_write() else None)
        result.lag_s = (self.clock() - event.occurred_at).total_seconds()
        return result

    def passages_for(self, event: Event, payload: UpsertPayload, grants: Grants | None = None) -> list[Passage]:
        """The passages an upsert becomes (indexer.upsert_passages), under `grants`."""
        return self.upsert_passages.passages(event, payload, grants)

    def _upsert(
        self, event: Event, payload: UpsertPayload, state: DocState | None, vectors: Vectors | None = None
    ) -> ApplyResult:
        # An ACL event newer than this upsert may already have been applied (it overtook the
        # document backlog, or the delete before it): the content lands, under that newer ACL.
        tombstone = tombstone_of(state) if state is not None else None
        acl_version = state.acl_version if state is not None else None
        if acl_version is not None and tombstone is not None and acl_version <= tombstone:
            acl_version = None  # the ACL of deleted content
        newer_acl = acl_version is not None and acl_version > event.version
        before = state.grants() if state is not None else NONE
        if state is not None and state.deleted and not newer_acl:
            before = restart(before)  # a re-created document: the deleted one's readers carry nothing over
        effective_from = upsert_effective_from(event, payload)
        if newer_acl:
            grants = overtaken(before, payload.acl, event.version)
        else:
            grants = regrant(before, payload.acl, effective_from, event.version)
        passages = self.upsert_passages.passages(event, payload, grants)
        self.upsert_passages.forget(event, payload)
        result = ApplyResult(Outcome.APPLIED, event, passages_written=len(passages))
        if self.vector is not None and self.embedder is not None:
            if vectors is None or len(vectors) != len(passages):
                vectors = self.embedder.embed([embedding_text(p) for p in passages])
            result.passages_embedded = len(passages)
            sentences = self._sentences()
            per = None if sentences is None else embed_sentences(self.embedder, passages, sentences)
            self.vector.upsert(passages, vectors, per)
        self.lexical.upsert(passages)
        self._each_store(lambda s: s.supersede(event.tenant, event.doc_id, event.version, effective_from))
        access_changed = state is not None and access_of(state.grants()) != access_of(grants)
        if access_changed:
            # Every version carries the document's grants: narrowing reaches them all, and a
            # reader added now is admitted only from now on (indexer.grants).
            self._each_store(lambda s: s.set_acl(event.tenant, event.doc_id, grants.acl, grants.since))
        if state is not None and state.deleted:
            access_changed = True  # a resurrected doc may be readable by others than before
        if access_changed:
            self.cache.bump(event.tenant)
            result.cache_bumped = True
        self.docs.put(
            DocState(
                tenant=event.tenant,
                doc_id=event.doc_id,
                applied_version=max(event.version, state.applied_version if state else 0),
                deleted=False,
                content_version=event.version,
                acl_version=max(event.version, acl_version or 0),
                content_hash=payload.content_hash,
                chunker_version=CHUNKER_VERSION,
                passage_ids=[p.passage_id for p in passages],
                tombstone_version=tombstone,
            ).with_grants(grants)
        )
        return result

    def _overtaken(self, event: Event, state: DocState | None) -> None:
        """An older upsert or ACL change delivered after a newer one is not applied, but the readers
        its ACL lacked were granted again after it: their grants move up (indexer.grants.overtaken)."""
        payload = event.payload
        if state is None or state.deleted or isinstance(payload, DeletePayload):
            return
        tombstone = tombstone_of(state)
        if tombstone is not None and event.version <= tombstone:
            return  # the ACL of deleted content
        before = state.grants()
        after = overtaken(before, payload.acl, event.version)
        if access_of(after) == access_of(before):
            return
        self._each_store(lambda s: s.set_acl(event.tenant, event.doc_id, after.acl, after.since))
        self.cache.bump(event.tenant)
        self.docs.put(state.with_grants(after))

    def durable_on_write(self) -> bool:
        """Whether every store answering queries holds a write durably once it returned (ports.Durability)."""
        return self.lexical.durability == "write" and (self.vector is None or self.vector.durability == "write")

    def _write_stores(self, lexical: Callable[[], None], vector: Callable[[], None] | None) -> dict[str, datetime]:
        """A revocation's or deletion's write to each store, side by side on the cluster (indexer.side_by_side)."""
        return self._side.write_stores(self.lexical, lexical, self.vector, vector, self.clock)

    def _acl(
        self, event: Event, payload: AclPayload, state: DocState | None, served: Callable[[Event], None] | None
    ) -> ApplyResult:
        before = state.grants() if state is not None else NONE
        if state is not None and state.deleted:
            before = restart(before)  # the ACL of the document once re-created
        grants = regrant(before, payload.acl, event.occurred_at, event.version)
        vector = self.vector
        applied_at = self._write_stores(
            lambda: self.lexical.set_acl(event.tenant, event.doc_id, grants.acl, grants.since),
            None if vector is None else lambda: vector.set_acl(event.tenant, event.doc_id, grants.acl, grants.since),
        )
        self.cache.bump(event.tenant)
        invalidated_at = self.clock()
        if served is not None:
            served(event)
        new_state = state or DocState(tenant=event.tenant, doc_id=event.doc_id, applied_version=0)
        # On a tombstone the document stays deleted: the ACL waits for its re-created content.
        new_state.tombstone_version = tombstone_of(new_state)
        new_state.applied_version = max(event.version, new_state.applied_version)
        new_state.acl_version = event.version
        self.docs.put(new_state.with_grants(grants))
        return ApplyResult(
            Outcome.APPLIED, event, cache_bumped=True, applied_at=applied_at, cache_invalidated_at=invalidated_at
        )

    def _delete(
        self,
        event: Event,
        payload: DeletePayload,
        state: DocState | None,
        received_at: datetime,
        served: Callable[[Event], None] | None,
    ) -> ApplyResult:
        """Every version the deletion deleted leaves every store, their embedding-cache entries go, the
        cache is invalidated, and the audit records when each copy dropped it (IDs and counts only)."""
        # Content newer than the delete may already be applied (the document was re-created and its
        # upsert overtook this delete): then only the versions the delete deleted are removed.
        recreated = (
            state is not None
            and not state.deleted
            and state.content_version is not None
            and state.content_version > event.version
        )
        stored = self.lexical.doc_passages(event.tenant, event.doc_id)
        if recreated:
            stored = [p for p in stored if p.version < event.version]
        vector = self.vector
        if recreated:

            def delete_old_points(v: VectorIndex) -> None:
                old = [p.passage_id for p in v.inventory(event.tenant, event.doc_id) if p.version < event.version]
                v.delete_passages(event.tenant, old)

            removed_at = self._write_stores(
                lambda: self.lexical.delete_passages(event.tenant, [p.passage_id for p in stored]),
                None if vector is None else lambda: delete_old_points(vector),
            )
        else:
            # The IDs just listed, under the document's key: an adapter that would search for them again
            # deletes these instead (LexicalIndex.delete_doc); the vector store deletes by filter.
            listed = [p.passage_id for p in stored]
            removed_at = self._write_stores(
                lambda: self.lexical.delete_doc(event.tenant, event.doc_id, listed=listed),
                None if vector is None else lambda: vector.delete_doc(event.tenant, event.doc_id),
            )
        # Point IDs, not passage IDs: a passage ID's anchor is a slug of the document's headings,
        # i.e. words of it; a point ID is a hash, enough for a certificate to look the points up.
        details: dict[str, Any] = {
            "versions": sorted({p.version for p in stored}),
            "point_ids": [point_id(p.tenant, p.passage_id) for p in stored][:MAX_AUDITED_IDS],
        }
        if recreated:
            details["recreated_at_version"] = state.content_version if state is not None else None
        if self.embedder is not None and stored:
            forgotten, keys = self.embedder.forget(self._embedded_texts(stored))
            removed_at[EMBEDDING_CACHE] = self.clock()
            details["embedding_cache_removed"] = forgotten
            details["embedding_keys"] = [k.hex() for k in keys][:MAX_AUDITED_IDS]
        removed = len(stored)
        self.cache.bump(event.tenant)
        invalidated_at = self.clock()
        if served is not None:
            served(event)
        self.audit.append(
            DeletionRecord(
                event_id=event.event_id,
                tenant=event.tenant,
                doc_id=event.doc_id,
                version=event.version,
                received_at=received_at,
                removed_at=removed_at,
                cache_invalidated_at=invalidated_at,
                passages_removed=removed,
                erase=payload.erase,
                details=details,
            )
        )
        kept = state_after_delete(event, state, recreated=recreated)
        self.docs.put(kept)
        log.info(
            "deleted %s/%s v%d (%s): %d passages",
            event.tenant,
            event.doc_id,
            event.version,
            payload.reason,
            removed,
        )
        return ApplyResult(
            Outcome.APPLIED, event, cache_bumped=True, applied_at=removed_at, cache_invalidated_at=invalidated_at
        )

    def _each_store(self, action: Callable[[LexicalIndex | VectorIndex], None]) -> None:
        action(self.lexical)
        if self.vector is not None:
            action(self.vector)
