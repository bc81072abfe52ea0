"""Dense embeddings with fastembed, loaded only from a local model folder, with a vector cache.

Embedding is the ingest cost to avoid (25-55 passages/s on 2 cores for MiniLM), so vectors are
cached by sha256(model, text): a new document version re-embeds only passages whose text
changed, and identical text anywhere is embedded once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.ports import Embedder, Vectors

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


class ModelUnavailable(RuntimeError):
    pass


class FastEmbedder:
    """fastembed's TextEmbedding over a local ONNX export; never touches a model hub."""

    def __init__(self, model_path: Path, model_name: str = DEFAULT_MODEL_NAME, batch_size: int = 32) -> None:
        if not (model_path / "model.onnx").is_file():
            raise ModelUnavailable(f"no model.onnx under {model_path}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from fastembed import TextEmbedding

        cache_dir = Path(os.environ.get("RAGSYNC_FASTEMBED_CACHE", "/tmp/ragsync-fastembed"))
        try:
            self._model = TextEmbedding(
                model_name=model_name, specific_model_path=str(model_path), cache_dir=str(cache_dir)
            )
        except Exception as exc:  # fastembed raises bare Exceptions for unknown models and bad files
            raise ModelUnavailable(f"fastembed could not load {model_name} from {model_path}: {exc}") from exc
        self.model_name = model_name
        self.batch_size = batch_size
        self.dim = int(self.embed(["probe"]).shape[1])

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        # Sorting by length keeps each batch's padding small; order is restored below.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows = list(self._model.embed([texts[i] for i in order], batch_size=self.batch_size))
        out = np.empty((len(texts), len(rows[0])), dtype=np.float32)
        for position, index in enumerate(order):
            out[index] = rows[position]
        return out

    def embed_query(self, text: str) -> Vectors:
        row: Vectors = self.embed([text])[0]
        return row


class CachedEmbedder:
    """Wraps an embedder with a persistent SQLite cache keyed by sha256(model, text)."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self._inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.model_name}\x00{text}".encode()).digest()

    def embed(self, texts: Sequence[str]) -> Vectors:
        keys = [self._key(t) for t in texts]
        found: dict[bytes, Vectors] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                chunk = list(dict.fromkeys(keys[start : start + 500]))
                marks = ",".join("?" for _ in chunk)
                for key, blob in self._conn.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk):
                    found[bytes(key)] = np.frombuffer(blob, dtype=np.float32)
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found:
                missing.setdefault(key, text)
        self.hits += len(keys) - sum(1 for k in keys if k in missing)
        self.misses += len(missing)
        if missing:
            fresh = self._inner.embed(list(missing.values()))
            with self._lock:
                self._conn.execute("BEGIN")
                for key, row in zip(missing, fresh, strict=True):
                    vec = np.asarray(row, dtype=np.float32)
                    found[key] = vec
                    self._conn.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)", (key, vec.tobytes()))
                self._conn.execute("COMMIT")
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def embed_query(self, text: str) -> Vectors:
        return self._inner.embed_query(text)

    def close(self) -> None:
        self._conn.close()


def load_embedder(model_path: Path | None, model_name: str = DEFAULT_MODEL_NAME) -> Embedder | None:
    """The dense ranker is optional: without a loadable model everything runs on BM25, said once."""
    if model_path is None:
        log.warning(
            "No embedding model configured (set RAGSYNC_EMBED_MODEL_PATH): dense retrieval is disabled, "
            "answers use BM25 only."
        )
        return None
    try:
        return FastEmbedder(model_path, model_name)
    except ModelUnavailable as exc:
        log.warning("Embedding model unavailable (%s): dense retrieval is disabled, answers use BM25 only.", exc)
        return None
