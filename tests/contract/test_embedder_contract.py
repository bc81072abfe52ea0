"""Embedder contract: the fastembed model alone and behind its embedding cache (what Components opens).

Unit-norm float32 rows, one per text, the same vector for the same text whichever way it is asked
for; and the cache capabilities a deletion uses (forget, present, the cache to purge), answered
with "nothing held" by an embedder that has no cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer.embedding_cache import CachedEmbedder, embedding_key

TEXTS = ["Access is revoked before the next query.", "The scheduler scans every five minutes."]


def _bare(tmp: Path, model: Any) -> Any:
    return model


def _cached(tmp: Path, model: Any) -> Any:
    return CachedEmbedder(model, tmp / "embeddings.db")


FACTORIES: dict[str, Callable[[Path, Any], Any]] = {"fastembed": _bare, "cached": _cached}


@pytest.fixture(params=list(FACTORIES))
def port(request: pytest.FixtureRequest, tmp_path: Path, embedder: Any) -> Any:
    return FACTORIES[request.param](tmp_path, embedder)


def test_unit_norm_rows_one_per_text(port: Any) -> None:
    vectors = port.embed(TEXTS)
    assert vectors.dtype == np.float32 and vectors.shape == (2, port.dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert port.embed([]).shape == (0, port.dim)
    assert np.allclose(port.embed(TEXTS[1:])[0], vectors[1], atol=1e-5)  # a text's vector does not depend on its batch
    query = port.embed_query(TEXTS[0])
    assert query.shape[-1] == port.dim and float(query.reshape(-1) @ vectors[0]) > float(query.reshape(-1) @ vectors[1])


def test_cache_capabilities_say_what_is_held(port: Any) -> None:
    port.embed(TEXTS)
    keys = [embedding_key(port.model_name, t) for t in TEXTS]
    if port.cache is None:  # no cache: nothing held, nothing to forget
        assert port.present(keys) == 0 and port.forget(TEXTS) == (0, [])
        return
    assert port.present(keys) == 2
    assert port.forget(TEXTS[:1]) == (1, keys[:1])
    assert port.present(keys) == 1
