"""The query adapter's file: a float16 matrix in a .npz beside a note of how it was trained.

`load_adapter` checks the matrix against the embedder's dimension and refuses anything else (a file
for another model cannot silently move this model's questions); the adapter itself is query.adapter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from query.adapter import Matrix, QueryAdapter

PACKAGED = Path(__file__).resolve().parent / "data" / "query_adapter.npz"
"""The adapter trained on Debian documentation no evaluation set uses (bench/weak_train.py)."""


class AdapterUnavailable(ValueError):
    pass


def save_adapter(path: Path, matrix: Matrix, *, source: str, note: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        np.savez_compressed(f, matrix=matrix.astype(np.float16), source=np.array(source), note=np.array(note))


def load_adapter(path: Path, strength: float, dim: int) -> QueryAdapter:
    try:
        with np.load(path, allow_pickle=False) as data:
            matrix = np.asarray(data["matrix"], dtype=np.float32)
    except (OSError, KeyError, ValueError) as exc:
        raise AdapterUnavailable(f"cannot read the query adapter {path}: {exc}") from exc
    if matrix.shape != (dim, dim):
        raise AdapterUnavailable(f"the query adapter {path} is {matrix.shape}, the embedder gives {dim} dimensions")
    if not np.isfinite(matrix).all():
        raise AdapterUnavailable(f"the query adapter {path} holds non-finite values")
    return QueryAdapter(matrix, strength)
