"""The qdrant-edge shard's configuration, for the live shard (indexer.qdrant_edge) and the child that
rebuilds a copy (indexer.edge_rebuild): one place, since a shard only loads under the layout it was
made with (with or without the sentence multivector)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as q

from indexer.ports import MAX_SENTENCE_VECTORS, SENTENCE_VECTOR, Vectors

VACUUM = q.EdgeOptimizersConfig(deleted_threshold=0.0, vacuum_min_vector_number=0)
"""Any segment with a deleted point is rebuilt without it at the next `optimize` (the defaults wait
for 20 % deleted in segments of 1000+ vectors: a deleted point's vector could stay for good)."""


def shard_config(dim: int, sentences: bool = False) -> Any:
    """The one shard configuration, for the live shard and for the child that rebuilds a copy; with
    `sentences`, the sentence multivector (max-sim) beside the passage vector on every point."""
    passage = q.EdgeVectorParams(size=dim, distance=q.Distance.Cosine)
    if not sentences:
        return q.EdgeConfig(vectors=passage, optimizers=VACUUM)
    return q.EdgeConfig(vectors={"": passage, SENTENCE_VECTOR: _sentence_params(dim)}, optimizers=VACUUM)


def _sentence_params(dim: int) -> Any:
    return q.EdgeVectorParams(
        size=dim, distance=q.Distance.Cosine, multivector_config=q.MultiVectorConfig(q.MultiVectorComparator.MaxSim)
    )


def load_shard(path: Path, dim: int, sentences: bool) -> tuple[Any, bool]:
    """The shard at `path` under its own layout (with or without sentence vectors: a config of the other
    layout is refused as incompatible), and whether it holds sentence vectors."""
    try:
        return q.EdgeShard.load(str(path), shard_config(dim, sentences)), sentences
    except Exception as exc:  # qdrant-edge raises its own bare exception types
        if "incompatible" not in str(exc):
            raise
    return q.EdgeShard.load(str(path), shard_config(dim, not sentences)), not sentences


def sentence_rows(rows: Vectors) -> list[list[float]]:
    """A passage's sentence vectors as the store takes them: the first MAX_SENTENCE_VECTORS rows."""
    kept: list[list[float]] = (
        np.asarray(rows, dtype=np.float64).reshape(-1, rows.shape[-1])[:MAX_SENTENCE_VECTORS].tolist()
    )
    return kept
