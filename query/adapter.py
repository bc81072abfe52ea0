"""A learned query-side adapter: the question's vector moved before the dense search (issue 23 item 3).

A matrix W (dim x dim) trained on weak heading -> body pairs from documentation no evaluation set uses
(`bench/weak_pairs.py`, `bench/weak_train.py`) maps a question's embedding towards the bodies that answer
it. Only the question's vector moves: stored passage vectors are unchanged (no re-index), and the
vector store's search, with its permission filter inside the query, is called exactly as before: the
adapter changes the order of what the asker may read, never what may be read.

`strength` blends: the vector searched is normalise((1 - s) q + s W q), so 0 is the plain question and
1 the adapter alone. Pure functions: loading the matrix from a file is the caller's (ragsync).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class QueryAdapter:
    matrix: Matrix
    strength: float = 1.0

    def __post_init__(self) -> None:
        rows, cols = self.matrix.shape
        if rows != cols:
            raise ValueError(f"a query adapter is square, not {rows} x {cols}")
        if not 0.0 <= self.strength <= 1.0:
            raise ValueError(f"strength is in [0, 1], not {self.strength}")

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[0])

    def apply(self, vector: Matrix) -> Matrix:
        """The unit vector searched for this question vector (the vector itself when strength is 0)."""
        q = np.asarray(vector, dtype=np.float32)
        if q.shape != (self.dim,):
            raise ValueError(f"a {self.dim}-dimensional adapter cannot move a vector of shape {q.shape}")
        if self.strength == 0.0:
            return q
        moved = (1.0 - self.strength) * q + self.strength * (self.matrix @ q)
        norm = float(np.linalg.norm(moved))
        if not np.isfinite(norm) or norm < 1e-6:
            return q
        out: Matrix = (moved / norm).astype(np.float32)
        return out
