"""A document's CPU work in a child process at a lower OS priority: chunking and the model's runs.

Why: the Faust worker applies ACL changes and deletions on a pool of threads and documents on one
thread whose OS priority is lowered (streams.appliers), but a thread's niceness does not lower what it
holds: chunking is pure Python and the Python side of embedding (windows, padding, pooling) holds the
worker's GIL, which every access thread, Faust's event loop, the Kafka consumer and the store clients
wait for. In a child that work holds the child's GIL, and the whole child runs niced, ONNX Runtime's
own threads included (the niceness is raised before the model loads, and threads inherit it).

What it is: one child process (spawn; started on first use, the model loaded once in it) answering
plain calls: chunk (chunk_document / chunk_extracted, text in, chunks out), embed (texts in, vectors
out) and token counts. It only computes. Every store write stays in the worker, under its per-document
locks and in its order, and so does the embedding cache: `ChildEmbedder` is the model as an Embedder,
and the worker's CachedEmbedder in front of it sends the child only the texts the cache misses (a new
version re-embeds only its changed passages, as in-process). `DocumentsChild.chunk` is the chunker's
in-process path (indexer.chunker.IsolatedChunker `inline`); large documents still go to the budgeted
children of indexer.budget.

A child that dies (a crash, an OOM kill) fails the call in flight with ChildDied, and the next call
starts a new child: the worker's applier retries the event in place (never acknowledged, never lost).
After MAX_DEATHS deaths in a row (of one kind of call) the call raises Unchunkable instead, which the
worker dead-letters with the reason: one document that kills every child must not stall its topic forever.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from indexer.chunker import Chunk, Unchunkable, chunk_document, chunk_extracted
from indexer.embedder import DEFAULT_MODEL_NAME, load_embedder
from indexer.ports import Embedder, EmbeddingCache, Vectors
from schemas.errors import ModelUnavailable
from schemas.extracted import ExtractedDocument

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_DEATHS = 3
"""Child deaths in a row that a call survives as ChildDied (retried); the next one is Unchunkable."""


class ChildDied(RuntimeError):
    """The documents child died during the call (a crash, an OOM kill): retry it, a new child starts."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Which model the child loads (indexer.embedder.load_embedder's arguments)."""

    path: Path | None = None
    name: str = DEFAULT_MODEL_NAME
    cache_dir: Path | None = None
    download: bool = False
    query_prefix: str = ""
    threads: int | None = None


# ---- the child's side (module-level functions: what the executor pickles by name) ----------------

_MODEL: Embedder | None = None


def _start(niceness: int, model: ModelSpec | None) -> None:
    """The child's initializer: lower the priority first (the model's threads inherit it), then load.

    `niceness` is absolute: a child restarted from the niced documents thread inherits that thread's
    niceness, and must not add its own on top of it."""
    global _MODEL
    if sys.platform != "win32":
        try:
            if os.getpriority(os.PRIO_PROCESS, 0) < niceness:
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
        except OSError as exc:
            log.warning("the documents child could not lower its priority: %s", exc)
    if model is not None:
        _MODEL = load_embedder(
            model.path,
            model.name,
            cache_dir=model.cache_dir,
            download=model.download,
            query_prefix=model.query_prefix,
            threads=model.threads,
        )


def _loaded() -> Embedder:
    if _MODEL is None:
        raise ModelUnavailable("the documents child has no model")
    return _MODEL


def _describe() -> tuple[str, int] | None:
    return None if _MODEL is None else (_MODEL.model_name, _MODEL.dim)


def _embed(texts: list[str]) -> Vectors:
    return np.asarray(_loaded().embed(texts), dtype=np.float32)


def _embed_query(text: str) -> Vectors:
    return np.asarray(_loaded().embed_query(text), dtype=np.float32)


def _token_counts(texts: list[str]) -> list[int]:
    return _loaded().token_counts(texts)


def _chunk(content: str | ExtractedDocument, content_type: str, max_chars: int, title: str) -> list[Chunk]:
    if isinstance(content, ExtractedDocument):
        return chunk_extracted(content, max_chars=max_chars)
    return chunk_document(content, content_type, max_chars=max_chars, title=title)  # type: ignore[arg-type]


def _identity() -> tuple[int, int]:
    """(pid, niceness) of the child: for tests and the worker's log."""
    return os.getpid(), _niceness()


def _niceness() -> int:
    """This thread's niceness (0 where there is none: Windows)."""
    return os.getpriority(os.PRIO_PROCESS, 0) if sys.platform != "win32" else 0


# ---- the worker's side --------------------------------------------------------------------------


class DocumentsChild:
    """The one child process computing documents for this worker; thread-safe, restarted after a death."""

    def __init__(self, model: ModelSpec | None, *, nice: int = 10, max_deaths: int = MAX_DEATHS) -> None:
        """`nice`: how much lower than the creating thread's the child's priority is."""
        self.model = model
        self.niceness = min(19, _niceness() + nice)
        self.max_deaths = max_deaths
        self.started = 0
        """Children started so far (one, unless some died)."""
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._deaths: dict[str, int] = {}
        """Deaths in a row per kind of call, cleared by a call of that kind that returned: a document's
        retry chunks it again before the embedding that killed the child, so one count for all calls
        would be cleared between two deaths on the same document."""
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the documents child is closed")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start,
                    initargs=(self.niceness, self.model),
                )
                self.started += 1
            return self._pool

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the child. ChildDied when it died meanwhile (the next call starts another);
        Unchunkable past `max_deaths` deaths in a row; the child's own exceptions as they are."""
        pool = self._executor()
        kind = str(fn.__name__)  # type: ignore[attr-defined]  # the child's functions above
        try:
            result = pool.submit(fn, *args).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
                deaths = self._deaths[kind] = self._deaths.get(kind, 0) + 1
                if deaths > self.max_deaths:
                    del self._deaths[kind]
            pool.shutdown(wait=False, cancel_futures=True)
            if deaths > self.max_deaths:
                log.error("the documents child died %d times in a row; giving up on the document", deaths)
                raise Unchunkable(f"the process computing it died {deaths} times in a row") from None
            log.warning("the documents child died (%d in a row); the event is retried with a new child", deaths)
            raise ChildDied(f"the documents child died during {kind}") from None
        with self._lock:
            self._deaths.pop(kind, None)
        return result

    def identity(self) -> tuple[int, int]:
        """(pid, niceness) of the current child, starting it if needed."""
        return self.call(_identity)

    def chunk(self, content: str | ExtractedDocument, content_type: str, *, max_chars: int, title: str) -> list[Chunk]:
        """What indexer.chunker chunks in-process, computed in the child (IsolatedChunker `inline`)."""
        return self.call(_chunk, content, content_type, max_chars, title)

    def close(self) -> None:
        with self._lock:
            pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class ChildEmbedder:
    """The model in the documents child as an Embedder (no cache of its own: put a CachedEmbedder in front)."""

    def __init__(self, child: DocumentsChild, model_name: str, dim: int) -> None:
        self.child = child
        self.model_name = model_name
        self.dim = dim

    @classmethod
    def start(cls, child: DocumentsChild) -> ChildEmbedder | None:
        """Start the child and load its model; None when it has none (dense retrieval off, as in-process)."""
        described = child.call(_describe)
        return None if described is None else cls(child, *described)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.child.call(_embed, list(texts))

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self.child.call(_token_counts, list(texts))

    def embed_query(self, text: str) -> Vectors:
        return self.child.call(_embed_query, text)

    @property
    def cache(self) -> EmbeddingCache | None:
        return None

    def forget(self, texts: Sequence[str]) -> tuple[int, list[bytes]]:
        return 0, []

    def present(self, keys: Sequence[bytes]) -> int:
        return 0
