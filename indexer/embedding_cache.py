"""The embedding cache: vectors by sha256(model, text), so a text is embedded once wherever it appears.

Embedding is the ingest cost to avoid (25-55 passages/s on 2 cores for MiniLM). A new document
version re-embeds only the passages whose text changed, a second tenant's copy of a text costs no
embedding, and on the cluster profile a vector one worker computed is found by every other worker
on every machine (`indexer.redis_embeddings`); the embedded profile keeps the same cache in SQLite.

`CachedEmbedder` is the one place the cache is consulted. A cached value that is not a vector of
the model's dimension (a corrupt or foreign entry) is a miss and is overwritten, never returned.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from indexer.ports import Embedder, EmbeddingCache, PurgeDetails, Removal, Vectors
from schemas._memo import TextMemo


def embedding_key(model_name: str, text: str) -> bytes:
    return hashlib.sha256(f"{model_name}\x00{text}".encode()).digest()


_REQUEST: contextvars.ContextVar[dict[bytes, Vectors] | None] = contextvars.ContextVar(
    "ragsync_embedding_request", default=None
)


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """Within it, each text a request reads from the cache is read once per request.

    The sentences the reranker scored are scored again by the model: without this, the texts the
    process-wide memo (CachedEmbedder) does not hold yet were asked of the cache again. The scope's
    vectors live only as long as the request (a dict dropped at its end). A pool thread sees the
    scope when it runs in a copy of the caller's context (contextvars.copy_context().run).
    """
    token = _REQUEST.set({})
    try:
        yield
    finally:
        _REQUEST.reset(token)


class SqliteEmbeddingCache:
    """One table of (key, float32 bytes) in WAL mode: processes sharing a home share the cache."""

    removal: Removal = "purge"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA secure_delete=ON")  # a deleted entry's bytes are overwritten, not freed
        self._conn.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                marks = ",".join("?" for _ in chunk)
                for key, blob in self._conn.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk):
                    found[bytes(key)] = bytes(blob)
        return found

    def put_many(self, items: Mapping[bytes, bytes]) -> None:
        if not items:
            return
        with self._lock:
            if self._conn.in_transaction:  # removals waiting for `flush`: the entries join them
                self._conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", list(items.items()))
                return
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", list(items.items()))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def delete_many(self, keys: Sequence[bytes]) -> int:
        """Removed at once for every reader of this connection (the owner's queries), durable and seen
        by other processes at the next `flush`: the sink flushes with the stores, before the batch is
        acknowledged. One commit per deletion (an fsync each) made a round of 30 deletions take 1.9 s
        on a busy disk (bench/propagation.py --background-load 4)."""
        unique = list(dict.fromkeys(keys))
        removed = 0
        with self._lock:
            if unique and not self._conn.in_transaction:
                self._conn.execute("BEGIN IMMEDIATE")
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                marks = ",".join("?" for _ in chunk)
                removed += self._conn.execute(f"DELETE FROM vectors WHERE key IN ({marks})", chunk).rowcount
        return removed

    def flush(self) -> None:
        """Commit the removals (and entries) since the last flush: one commit for a batch's deletions."""
        with self._lock:
            if self._conn.in_transaction:
                self._conn.execute("COMMIT")

    def purge(self) -> PurgeDetails:
        """Checkpoint and truncate the write-ahead log, the last file that held deleted entries."""
        self.flush()
        with self._lock:
            busy, pages, moved = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return {"checkpoint_complete": busy == 0, "wal_pages": pages, "pages_checkpointed": moved}

    def close(self) -> None:
        self.flush()  # removals are never undone, whatever happened to the batch that made them
        with self._lock:
            self._conn.close()


class CachedEmbedder:
    """Wraps an embedder with an EmbeddingCache (or a SQLite file, given a path).

    In front of the cache, a short-lived memo of the vectors read or made in this process, by text
    (schemas._memo): an answer reads the vectors of every sentence of the fused top 50, mostly the same
    ones question after question, and hashing and reading hundreds of keys per search was a large part
    of an answer's CPU. A value is the vector of its key's text (what the cache would return); `forget`
    drops a deleted text's entry from the memo as from the cache. Questions are memoised the same way,
    apart (`embed_query` may prefix them), since the same question is asked again and again.
    """

    def __init__(self, inner: Embedder, cache: EmbeddingCache | Path, *, memo_ttl_s: float = 30.0) -> None:
        self._inner = inner
        # ~2 KB a vector with its text: at most ~50 MB and ~20 MB
        self._vectors: TextMemo[str, Vectors] = TextMemo(ttl_s=memo_ttl_s, max_entries=24_576)
        self._questions: TextMemo[str, Vectors] = TextMemo(ttl_s=memo_ttl_s, max_entries=8_192)
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.cache: EmbeddingCache = SqliteEmbeddingCache(cache) if isinstance(cache, Path) else cache
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _vector(self, blob: bytes) -> Vectors | None:
        if len(blob) != self.dim * 4:
            return None
        return np.frombuffer(blob, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        held: list[Vectors] = []
        for text in texts:
            vector = self._vectors.peek(text)
            if vector is None:
                break
            held.append(vector)
        else:
            with self._lock:
                self.hits += len(texts)
            return np.stack(held)
        vectors = self._embed(texts)
        for text, row in zip(texts, vectors, strict=True):
            self._vectors.put(text, row.copy())
        return vectors

    def _embed(self, texts: Sequence[str]) -> Vectors:
        keys = [embedding_key(self.model_name, t) for t in texts]
        scope = _REQUEST.get()
        found: dict[bytes, Vectors] = {}
        if scope is not None:
            found.update((k, scope[k]) for k in keys if k in scope)
        wanted = [k for k in keys if k not in found] if found else keys
        for key, blob in self.cache.get_many(wanted).items() if wanted else ():
            vector = self._vector(blob)
            if vector is not None:
                found[key] = vector
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found:
                missing.setdefault(key, text)
        with self._lock:
            self.hits += sum(1 for k in keys if k not in missing)
            self.misses += len(missing)
        if missing:
            fresh = np.asarray(self._inner.embed(list(missing.values())), dtype=np.float32)
            rows = dict(zip(missing, fresh, strict=True))
            found.update(rows)
            self.cache.put_many({key: row.tobytes() for key, row in rows.items()})
        if scope is not None:
            scope.update(found)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self._inner.token_counts(texts)

    def embed_query(self, text: str) -> Vectors:
        return self._questions.get(text, partial(self._inner.embed_query, text))

    def forget(self, texts: Sequence[str]) -> tuple[int, list[bytes]]:
        """Drop the entries of these texts (a deleted document's passages): (removed, their keys).

        A text another live document shares is embedded again the next time it is needed.
        """
        for text in texts:
            self._vectors.discard(text)
        keys = list(dict.fromkeys(embedding_key(self.model_name, t) for t in texts))
        return (self.cache.delete_many(keys) if keys else 0), keys

    def present(self, keys: Sequence[bytes]) -> int:
        """How many of these entries the cache still holds (deletion certificates)."""
        return len(self.cache.get_many(keys)) if keys else 0

    def close(self) -> None:
        self.cache.close()
