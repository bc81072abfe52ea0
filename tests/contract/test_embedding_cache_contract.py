"""EmbeddingCache contract: SQLite (embedded) and Redis (cluster), through CachedEmbedder as workers use it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from indexer.embedding_cache import CachedEmbedder, embedding_key


class CountingEmbedder:
    """A deterministic embedder that counts the texts it was asked to embed (what the cache must save)."""

    dim = 8

    def __init__(self, model_name: str = "model-a") -> None:
        self.model_name = model_name
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        rows = []
        for text in texts:
            rng = np.random.default_rng(abs(hash((self.model_name, text))) % 2**32)
            v = rng.standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows)

    def embed_query(self, text: str) -> np.ndarray:
        row: np.ndarray = self.embed([text])[0]
        return row

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """The port's cost measure; characters will do for a stand-in."""
        return [len(t) for t in texts]


def test_missing_keys_are_absent_and_values_round_trip(open_embedding_cache: Callable[[], Any]) -> None:
    cache = open_embedding_cache()
    a, b = embedding_key("m", "alpha"), embedding_key("m", "beta")
    assert cache.get_many([a, b]) == {}
    value = np.arange(8, dtype=np.float32).tobytes()
    cache.put_many({a: value})
    assert cache.get_many([a, b, a]) == {a: value}
    cache.put_many({a: np.ones(8, dtype=np.float32).tobytes()})
    assert np.frombuffer(cache.get_many([a])[a], dtype=np.float32).tolist() == [1.0] * 8, "a put overwrites"


def test_a_second_worker_never_re_embeds_what_the_first_did(open_embedding_cache: Callable[[], Any]) -> None:
    texts = [f"passage {i}" for i in range(700)]  # more than one batch of the Redis adapter
    first_model, second_model = CountingEmbedder(), CountingEmbedder()
    first = CachedEmbedder(first_model, open_embedding_cache())
    vectors = first.embed(texts)
    assert len(first_model.embedded) == 700 and first.misses == 700

    second = CachedEmbedder(second_model, open_embedding_cache())  # another worker, same shared cache
    again = second.embed([*texts, *texts[:10]])  # a second tenant's copy of ten of them, too
    assert second_model.embedded == [] and second.hits == 710 and second.misses == 0
    assert again.dtype == np.float32 and again.shape == (710, 8)
    assert np.array_equal(again[:700], vectors) and np.array_equal(again[700:], vectors[:10])

    fresh = second.embed(["passage 3", "a new text"])
    assert second_model.embedded == ["a new text"]
    assert np.array_equal(fresh[0], vectors[3])


def test_models_do_not_share_entries(open_embedding_cache: Callable[[], Any]) -> None:
    a = CachedEmbedder(CountingEmbedder("model-a"), open_embedding_cache())
    b_model = CountingEmbedder("model-b")
    b = CachedEmbedder(b_model, open_embedding_cache())
    a.embed(["same text"])
    b.embed(["same text"])
    assert b_model.embedded == ["same text"], "another model's vector must not be reused"


def test_a_value_of_the_wrong_size_is_a_miss_and_is_replaced(open_embedding_cache: Callable[[], Any]) -> None:
    cache = open_embedding_cache()
    model = CountingEmbedder()
    cache.put_many({embedding_key(model.model_name, "bad"): b"\x00" * 12})
    embedder = CachedEmbedder(model, cache)
    vector = embedder.embed(["bad"])
    assert model.embedded == ["bad"] and vector.shape == (1, 8)
    assert len(cache.get_many([embedding_key(model.model_name, "bad")])[embedding_key(model.model_name, "bad")]) == 32
    assert embedder.embed([]).shape == (0, 8)


def test_redis_outage_makes_the_cache_a_miss_not_an_error() -> None:
    import socket

    from indexer.redis_embeddings import RedisEmbeddingCache

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = RedisEmbeddingCache(f"redis://127.0.0.1:{port}/0", socket_timeout_s=0.2)
    model = CountingEmbedder()
    embedder = CachedEmbedder(model, down)
    assert embedder.embed(["x", "y"]).shape == (2, 8) and model.embedded == ["x", "y"]
    embedder.close()


def test_forget_present_and_purge_as_deletions_use_them(open_embedding_cache: Callable[[], Any]) -> None:
    embedder = CachedEmbedder(CountingEmbedder(), open_embedding_cache())
    embedder.embed(["kept text", "gone text"])
    keys = [embedding_key("model-a", t) for t in ("kept text", "gone text")]
    assert embedder.present(keys) == 2 and embedder.present([]) == 0
    removed, forgotten = embedder.forget(["gone text", "gone text"])
    assert removed == 1 and forgotten == [keys[1]]
    assert embedder.present(keys) == 1 and embedder.forget([]) == (0, [])
    cache = embedder.cache
    if cache.removal == "purge":  # our files held the entry: the purge checkpoints it out
        assert cache.purge().get("checkpoint_complete") is True
    else:  # the server frees it itself: nothing of ours to run
        assert cache.removal == "server" and cache.purge() == {}
    assert embedder.present(keys) == 1
