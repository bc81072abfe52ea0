"""Ports of the indexer's stores. Every adapter passes one contract suite per port (tests/contract).

Search methods take an AccessFilter and must apply it *inside* the store query: tenant, ACL
entries granted as of the instant (an entry of `acl` whose `acl_since` is at or before it, see
schemas.principal.grants_allow) and validity at the instant (effective_from <= as_of < superseded_on).
A hit that the filter excludes must never be scored by a ranker, cached or returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from indexer.audit_chain import ChainRecord
from indexer.audit_records import DeletionRecord as DeletionRecord  # re-export (the records the audit port keeps)
from indexer.audit_records import PurgeRecord as PurgeRecord  # re-export
from indexer.doc_state import DocState as DocState  # re-export (the record the doc-state port keeps)
from indexer.doc_state import grants_json as grants_json  # re-export
from indexer.doc_state import with_grants_json as with_grants_json  # re-export
from schemas.errors import (
    StoreUnavailable as StoreUnavailable,  # re-export (schemas.errors)
)
from schemas.passages import Passage
from schemas.principal import AccessFilter
from schemas.text import DEFAULT_LEXICAL_ANALYZER as DEFAULT_LEXICAL_ANALYZER  # re-export
from schemas.text import LexicalAnalyzer as LexicalAnalyzer  # re-export

Vectors = npt.NDArray[np.float32]

MAX_SENTENCE_VECTORS = 48
"""Sentence vectors kept per passage (the first ones): a passage of at most ~1,000 characters rarely holds
more sentences of four words or more; the cap bounds what one point costs the store."""

SENTENCE_VECTOR = "sentences"
"""The name of the sentence multivector beside the passage's (unnamed) vector, on both Qdrant adapters."""


Removal = Literal["purge", "compaction", "server"]
"""How a deleted record's bytes leave an adapter's files; the ports whose adapters differ declare it as `removal`.

"purge": the adapter's `purge()` rewrites them out, and ragsync.purge records each purge that completed.
"compaction": the broker's log cleaner drops them on its own schedule; `remnants` reads what is left now.
"server": the server frees them itself (Redis); there is nothing of ours to run or to record.
"""

Durability = Literal["write", "flush"]
"""When a store's writes are durable; the ports whose adapters differ declare it as `durability`.

"write": when the call returns (Elasticsearch acknowledges once its translog holds the write, the
Qdrant server with `wait=True` once its WAL does; `flush` has nothing to do). A worker may then treat
a revocation or deletion as held by the store as soon as the write returned (IndexSink.apply `served`).
"flush": only once `flush` returned (the embedded stores' files, synced once per batch).
"""

PurgeDetails = dict[str, object]
"""What a purge did, as counts and flags (never text). `complete` or `checkpoint_complete` False: it
could not finish (a reader holding the WAL, a retention lease not yet past), so the purge is retried
and no record says the bytes are gone."""


@dataclass(frozen=True, slots=True)
class FieldWeights:
    """BM25 weight of each lexical field (SQLite FTS5 column weights, Elasticsearch boosts).

    Defaults measured on the evaluation sets (eval/*/README.md): the heading path names the topic
    of a passage, the page title that of the whole page.
    """

    title: float = 0.5
    heading: float = 1.5
    text: float = 1.0

    def __post_init__(self) -> None:
        if min(self.title, self.heading, self.text) < 0 or self.text == 0:
            raise ValueError(f"field weights must be >= 0 and the body weight > 0: {self}")


DEFAULT_FIELD_WEIGHTS = FieldWeights()


@dataclass(frozen=True, slots=True)
class StoredPassage:
    """What a store holds for one passage, as `ragsync verify` reconciles it: never used to answer."""

    passage_id: str
    version: int
    acl: tuple[str, ...]  # sorted; the entries the store's permission filter actually matches
    since: tuple[tuple[str, int], ...] = ()
    """(entry, epoch ms) pairs of the grant instants the filter compares, sorted by entry."""


@dataclass(frozen=True, slots=True)
class Hit:
    passage: Passage
    score: float


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A dense hit: the vector stores hold IDs and the fields their filter needs, never text.

    Text lives in one store of record (the lexical store) and is read back through
    `LexicalIndex.passages` with the same permission filter. So a deletion has one copy of the
    text to remove from each store's files, and a vector store's write-ahead log or unvacuumed
    segment can never hold a document's words.
    """

    passage_id: str
    doc_id: str
    version: int
    score: float


class LexicalIndex(Protocol):
    """Writes are visible to the next search when they return; durable once `flush` returned.

    A worker flushes every store once per applied batch, before it commits the batch's offsets:
    nothing is acknowledged before it is durable, and a batch costs one sync, not one per write.
    """

    name: str

    combines_writes: bool
    """Whether concurrent `set_acl` and `delete_doc` calls share requests (group commit, indexer.combine):
    the calls queued while one write is in flight go out together in the next. Each call still returns
    only once its own change is visible. Declared by every adapter (the contract holds a combining one
    to two writes for twelve concurrent changes); False: each call writes on its own."""
    durability: Durability
    """When a write is durable: on return ("write") or once `flush` returned ("flush")."""

    def upsert(self, passages: Sequence[Passage]) -> None:
        """Insert or overwrite by passage_id; visible to the next search when this returns."""

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None: ...

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None:
        """Close the validity of every passage of versions < before_version that is open past the instant."""

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None:
        """Replace the ACL and its grant instants on every passage (every version) of the document."""

    def delete_doc(self, tenant: str, doc_id: str, listed: Sequence[str] | None = None) -> None:
        """Delete every passage (every version) of the document. `listed`: the IDs `doc_passages` returned
        just before, the caller holding the document's key meanwhile (no write of it since); an adapter
        that would search for the passages may delete exactly these instead, when its listing cannot
        have missed one. Others ignore it."""

    def search(self, query: str, access: AccessFilter, limit: int, floor: float) -> list[Hit]:
        """BM25 over body, heading path and title, each field weighted apart; hits below floor are dropped."""

    def passages(self, access: AccessFilter, passage_ids: Sequence[str]) -> list[Passage]:
        """The passages with these IDs that the filter admits (tenant, ACL, as-of), in no set order.

        The lexical store is the store of record for passage text: dense hits and cached rankings
        carry IDs only and are read back through this, with the permission filter in the query,
        so a revoked or deleted passage can never come out of a cache or a lagging vector store.
        """

    def doc_passages(self, tenant: str, doc_id: str) -> list[Passage]:
        """Every stored passage of the document (any version, ACL or date): for deletion, never for answering."""

    def count(self, tenant: str, doc_id: str | None = None) -> int:
        """Passages stored (any ACL, any date): for audits and tests, never for answering."""

    def inventory(self, tenant: str, doc_id: str) -> list[StoredPassage]:
        """Every passage of the document (any version, ACL, date), sorted by passage_id: for verify."""

    def counts_by_tenant(self) -> dict[str, int]:
        """Passages stored per tenant (any ACL, any date): for status, never for answering."""

    # ---- deletion made physical, retention, upkeep (ragsync.purge, ragsync.maintenance) --------

    def delete_superseded(self, before: datetime) -> list[Passage]:
        """Delete every passage superseded before the instant, every tenant (retention); returns them,
        so their embedding-cache entries can go too. None superseded: an empty list."""

    def purge(self) -> PurgeDetails:
        """Make every deletion so far physical: no file of the store keeps a deleted passage's text."""

    def purge_pending(self) -> int | None:
        """Index structures still holding deleted rows (FTS5 indexes not merged yet; 0 after a purge),
        for deletion certificates; None when the store cannot say (Elasticsearch reports per purge)."""

    def merge_step(self) -> bool:
        """One bounded step of segment merging; False when there is nothing to merge or the store
        merges on its own (Elasticsearch)."""

    def passages_after(self, cursor: int, limit: int) -> list[tuple[int, Passage]]:
        """Stored passages in storage order after `cursor`, each with its position, for the dense
        backfill that embeds what a model-less sync left without a vector. A store with no storage
        order of its own (Elasticsearch) returns none: there, a worker embeds every passage it applies."""

    def flush(self) -> None:
        """Make every write so far durable."""

    def close(self) -> None: ...


class VectorIndex(Protocol):
    """Same visibility and durability rules as LexicalIndex."""

    name: str

    combines_writes: bool
    """As LexicalIndex.combines_writes: concurrent `set_acl` and `delete_doc` calls share requests."""
    durability: Durability
    """When a write is durable: on return ("write") or once `flush` returned ("flush")."""

    sentence_vectors: bool
    """Whether the store holds sentence vectors beside each passage vector (`upsert`'s `sentences`) and
    answers `search_sentences`. They live on the passage's own point (a named multivector beside the
    passage vector), so every write that reaches a passage (deletion, ACL change, supersession,
    retention) reaches its sentence vectors in the same operation. False: `sentences` are ignored and
    `search_sentences` returns none (a store created before them, or the setting off)."""

    def upsert(self, passages: Sequence[Passage], vectors: Vectors, sentences: Sequence[Vectors] | None = None) -> None:
        """`sentences`: per passage, its sentence vectors (rows; at most MAX_SENTENCE_VECTORS kept), stored
        when `sentence_vectors`; a passage given none is found by `search` but never by `search_sentences`."""

    def delete_passages(self, tenant: str, passage_ids: Sequence[str]) -> None: ...

    def supersede(self, tenant: str, doc_id: str, before_version: int, superseded_on: datetime) -> None: ...

    def set_acl(self, tenant: str, doc_id: str, acl: Sequence[str], since: Mapping[str, datetime]) -> None: ...

    def delete_doc(self, tenant: str, doc_id: str) -> None: ...

    def search(self, vector: Vectors, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        """Cosine similarity; hits below floor dropped by the store (score_threshold)."""

    def search_sentences(self, vector: Vectors, access: AccessFilter, limit: int, floor: float) -> list[VectorHit]:
        """Passages by their best sentence's cosine to the vector (max-sim), the same permission filter
        inside the store's query, hits below floor dropped by the store; none without `sentence_vectors`."""

    def count(self, tenant: str, doc_id: str | None = None) -> int: ...

    def inventory(self, tenant: str, doc_id: str) -> list[StoredPassage]: ...

    def point_ids(self, ids: Sequence[int | str]) -> set[str]:
        """Which of these point IDs the store holds (the dense backfill looks for missing ones)."""

    # ---- deletion made physical, retention, upkeep (ragsync.purge, ragsync.maintenance) --------

    def delete_superseded(self, before: datetime) -> None:
        """Delete every point superseded before the instant, every tenant (retention)."""

    def purge(self) -> PurgeDetails:
        """Make every deletion so far physical (segments holding deleted points vacuumed)."""

    def held(self, point_ids: Sequence[str]) -> int:
        """How many of these points the store still holds (deletion certificates; 0 for none)."""

    def deleted_vectors(self) -> int | None:
        """Deleted vectors still waiting for a vacuum; None when the store cannot say."""

    def indexed(self) -> tuple[int, int] | None:
        """(points, points with an HNSW-indexed vector) when the index is ours to build, else None."""

    def optimize_due(self, changed_at_least: int, quiet_s: float) -> bool:
        """Whether that many points changed since the last optimize and no search ran for `quiet_s`;
        always False for a server that builds its index itself (Qdrant)."""

    def optimize(self) -> bool:
        """Build HNSW and merge segments where the thresholds say so; True if it did work (False: a
        server that optimizes on its own)."""

    def flush(self) -> None:
        """Make every write so far durable."""

    def close(self) -> None: ...


class Embedder(Protocol):
    model_name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-norm float32 rows, one per text, every word piece of each text embedded (a text longer
        than the model's window is embedded as several windows pooled into its one vector)."""

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """What each text costs the model, in tokens (any monotone measure will do, e.g. characters):
        a batch is sorted by it, so the model's batches pad little."""

    def embed_query(self, text: str) -> Vectors: ...

    @property
    def cache(self) -> EmbeddingCache | None:
        """The embedding cache in front of the model (purged with the stores); None without one."""

    def forget(self, texts: Sequence[str]) -> tuple[int, list[bytes]]:
        """Drop the cache entries of these texts (a deleted document's passages): (removed, their keys).
        Without a cache: (0, []), nothing held."""

    def present(self, keys: Sequence[bytes]) -> int:
        """How many of these entries the cache still holds (deletion certificates); 0 without one."""


class EmbeddingCache(Protocol):
    """Vectors (float32 bytes) by sha256(model, text): every embedder sharing one embeds a text once."""

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The stored values of the keys that are present; an unreachable store answers with none."""

    def put_many(self, items: Mapping[bytes, bytes]) -> None: ...

    removal: Removal
    """"purge" (SQLite: `purge` truncates the WAL that held removed entries) or "server" (Redis)."""

    def delete_many(self, keys: Sequence[bytes]) -> int:
        """Remove these entries (a deleted document's passages); raises when the store is unreachable.
        Gone for this process at once; durable once `flush` returns (the sink flushes with the stores)."""

    def flush(self) -> None:
        """Make the removals since the last flush durable (Redis: they already are)."""

    def purge(self) -> PurgeDetails:
        """Make removals physical when `removal` is "purge"; otherwise nothing to do ({})."""

    def close(self) -> None: ...


class Cache(Protocol):
    """Result cache. Keys must already include tenant, scopes and the tenant's generation."""

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    def generation(self, tenant: str) -> int: ...

    def bump(self, tenant: str) -> int:
        """Invalidate every cached entry of the tenant (ACL change, deletion)."""

    def close(self) -> None: ...


class DocStateStore(Protocol):
    def get(self, tenant: str, doc_id: str) -> DocState | None: ...

    def put(self, state: DocState) -> None: ...

    def chunker_versions(self) -> set[str]:
        """Chunker versions of live documents: a stale one means the index must be re-chunked."""

    def states(self) -> list[DocState]:
        """Every document's state, tombstones included, sorted by (tenant, doc_id): for verify."""

    def counts_by_tenant(self) -> dict[str, int]:
        """Live (not deleted) documents per tenant, for status."""

    def flush(self) -> None:
        """Make every put so far durable; called only after every store flushed the same writes."""

    def discard(self) -> None:
        """Forget puts not flushed yet (a store flush failed): state must never be ahead of the stores."""

    def close(self) -> None: ...


class DeletionAudit(Protocol):
    """Append-only and hash-chained (indexer.audit_chain): an edited or removed record is detectable."""

    def append(self, record: DeletionRecord) -> None:
        """Append once per event_id; a redelivered delete does not add a second record."""

    def append_purge(self, record: PurgeRecord) -> None: ...

    def records(self, tenant: str | None = None) -> list[DeletionRecord]: ...

    def purges(self, store: str | None = None) -> list[PurgeRecord]: ...

    def tip(self) -> int:
        """Seq of the last record (0 when empty): what a purge starting now covers."""

    def latest(self, kind: str) -> int:
        """Seq of the last record of this kind (`deletion`, `purge`; 0: none). A purge is due while the
        last deletion is past what the stores' purges cover; purge records never make one due."""

    def chain(self) -> tuple[list[ChainRecord], tuple[int, str] | None]:
        """Every record as stored, in order, and the chain head kept beside them (for `audit verify`)."""

    def close(self) -> None: ...
