"""Work the owner of an embedded home does when the event log is empty, one bounded step at a time.

Each step is short (one embedding call, a few hundred pages of FTS5 merging), runs on the worker's
thread, and is only taken when no event waits, so it never delays a revocation by more than one
step. In order:

1. Dense backfill: passages a sync wrote while no embedding model was loaded have no vector, so
   dense retrieval cannot find them. Once a model is loaded they are embedded, in storage order,
   with the ACL and dates they carry in the lexical store right now.
2. Physical purges of deletions (ragsync.purge: FTS5 merged, WAL truncated, segments vacuumed, erased
   log records checkpointed); while the worker is busy, `purge_if_overdue` purges anyway once a
   deletion has waited `purge_max_delay_s`.
3. FTS5 segment merging (the batched write path leaves one segment per batch and turns automatic
   merging off).
4. HNSW: once enough points changed and no query ran for a moment, qdrant-edge's `optimize`
   builds the index where its thresholds say a segment is large enough. It runs on a copy in a
   child process (it holds the GIL, so in-process it froze queries and revocations for seconds:
   bench/edge_optimize.py), so this step costs the owner only the copy and the swap.

Before each step, the deny-set clears that failed are retried once due (streams.deny_clears): while
the owner is busy its confirmations retry them, and this is what retries them once it is idle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from indexer.payload import point_id
from indexer.sentence_vectors import embed_sentences
from query.retrieval import passage_sentence_texts
from ragsync.purge import RETENTION_EVERY_S, Purger
from ragsync.wiring import Components
from schemas.passages import embedding_text
from streams.tracking import Tracker

log = logging.getLogger(__name__)

BACKFILL_STEP = 32
OPTIMIZE_AFTER_CHANGED = 2_000
QUIET_BEFORE_OPTIMIZE_S = 2.0


@dataclass
class DenseGap:
    passages: int  # in the lexical store
    vectors: int  # in the vector store

    @property
    def missing(self) -> int:
        return max(0, self.passages - self.vectors)


def dense_gap(components: Components) -> DenseGap | None:
    """Passages against vectors, or None when dense retrieval is off (no model, hence no vector store)."""
    lexical, vector = components.lexical, components.vector
    if vector is None:
        return None
    by_tenant = lexical.counts_by_tenant()
    return DenseGap(sum(by_tenant.values()), sum(vector.count(tenant) for tenant in by_tenant))


class Maintenance:
    def __init__(
        self,
        components: Components,
        *,
        optimize_after: int = OPTIMIZE_AFTER_CHANGED,
        tracker: Tracker | None = None,
    ) -> None:
        self.components = components
        self.optimize_after = optimize_after
        self.tracker = tracker
        """The worker's tracker: its deny-set clears that failed are retried at every step."""
        self.purger = Purger(components)
        self._pending_since: float | None = None
        self._checked_at = 0.0
        self._retention_at = 0.0
        self._cursor = 0
        gap = dense_gap(components)
        self._backfill = gap is not None and gap.missing > 0
        self.backfilled = 0
        if self._backfill and gap is not None:
            log.warning("%d passages have no vector yet (synced without a model): embedding them", gap.missing)

    def step(self) -> bool:
        """Do one bounded piece of work; False when there is nothing left to do. Deny-set clears
        that failed are retried first, when due (never "work left": their schedule is their own)."""
        if self.tracker is not None:
            self.tracker.retry_clears()
        return self._backfill_step() or self._purge_step() or self._merge_step() or self._optimize_step()

    def _purge_step(self) -> bool:
        """Deletions waiting to leave the stores' files physically: purge them (ragsync.purge), and
        apply `retain_superseded_days` once an hour."""
        days = self.components.settings.retain_superseded_days
        if days is not None and time.monotonic() - self._retention_at >= RETENTION_EVERY_S:
            self._retention_at = time.monotonic()
            self.purger.expire_superseded(days)
        if self.purger.pending() == 0:  # no deletion newer than every store's last purge
            self._pending_since = None
            return False
        if self.purger.due():  # else a purge that failed waits to be retried
            self.purger.run()
            self._pending_since = None
        return False

    def purge_if_overdue(self) -> None:
        """While the worker is busy: purge anyway once a deletion has waited `purge_max_delay_s`."""
        now = time.monotonic()
        if self._pending_since is None:
            if now - self._checked_at < 1.0:
                return
            self._checked_at = now
            if self.purger.pending() == 0:
                return
            self._pending_since = now
        if now - self._pending_since >= self.components.settings.purge_max_delay_s:
            self.purger.run()
            self._pending_since = None

    def run(self) -> None:
        while self.step():
            pass

    def _backfill_step(self) -> bool:
        if not self._backfill:
            return False
        lexical, vector, embedder = self.components.lexical, self.components.vector, self.components.embedder
        if vector is None or embedder is None:
            self._backfill = False
            return False
        rows = lexical.passages_after(self._cursor, BACKFILL_STEP)
        if not rows:
            self._backfill = False
            log.info("dense backfill done: %d passages embedded", self.backfilled)
            return False
        by_point = {point_id(p.tenant, p.passage_id): p for _, p in rows}
        present = vector.point_ids(list(by_point))
        missing = [p for pid, p in by_point.items() if pid not in present]
        if missing:
            vectors = embedder.embed([embedding_text(p) for p in missing])
            sentences = embed_sentences(embedder, missing, passage_sentence_texts) if vector.sentence_vectors else None
            vector.upsert(missing, vectors, sentences)
            vector.flush()
            self.backfilled += len(missing)
        self._cursor = rows[-1][0]
        return True

    def _merge_step(self) -> bool:
        return self.components.lexical.merge_step()

    def _optimize_step(self) -> bool:
        if "vector" not in self.components.opened():
            return False
        vector = self.components.vector
        if vector is None or not vector.optimize_due(self.optimize_after, QUIET_BEFORE_OPTIMIZE_S):
            return False
        started = time.perf_counter()
        before = vector.indexed()
        if vector.optimize():
            after = vector.indexed()
            log.warning(
                "vector index optimized in %.1fs: %d of %d points in HNSW",
                time.perf_counter() - started,
                after[1] if after is not None else 0,
                before[0] if before is not None else 0,
            )
        return False
