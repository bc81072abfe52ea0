"""Micro-batched question embeddings (indexer.query_batch): concurrent requests' questions in one model
run, each request handed the row of its own question, a failure kept to its own request.

The model is the real MiniLM export. To make a batch happen on purpose, the first run is held until
every other question is queued behind it (a gate around the real embed), so the next run takes them all.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from indexer.ports import Vectors
from indexer.query_batch import QueryBatcher
from schemas.errors import ModelUnavailable

QUESTIONS = [
    # (tenant, question): two tenants asking at the same time, some of them the same words
    ("acme", "How do I revoke a session token?"),
    ("globex", "How do I revoke a session token?"),
    ("acme", "What does asyncio.run do with the event loop?"),
    ("globex", "Which exit status does subprocess.run return when the command is not found?"),
    ("acme", "How many days do customers have to request a refund?"),
    ("globex", "Where are the qdrant edge collections stored on disk, and how large can they grow before compaction?"),
    ("acme", "x"),
    ("globex", "Is the writer's lock held while the index is merged into one segment?"),
]


class Gated:
    """The real embed, whose first run waits (it has `entered`) until `release` is set."""

    def __init__(self, embed: Any) -> None:
        self.embed = embed
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(60)
        rows: Vectors = self.embed(texts)
        return rows


def ask_together(batcher: QueryBatcher, gate: Gated, texts: list[str]) -> list[Vectors | BaseException]:
    """The first text alone, held in its run until every other text (each from a thread of its own) is
    queued behind it: the runner's next run takes them all. Each thread's row or exception, in order."""
    batcher._embed_many = gate
    out: list[Vectors | BaseException] = [RuntimeError("not run")] * len(texts)

    def one(i: int) -> None:
        try:
            out[i] = batcher.embed(texts[i])
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    threads[0].start()
    assert gate.entered.wait(60)
    for t in threads[1:]:
        t.start()
    for _ in range(6000):
        if len(batcher._queue) == len(texts) - 1:
            break
        threading.Event().wait(0.01)
    gate.release.set()
    for t in threads:
        t.join(120)
    return out


def test_batched_questions_get_their_single_embeddings(embedder: Any) -> None:
    """Every question, embedded in one run with the others, gets the row it gets alone (float tolerance)
    whichever tenant asked it; rows of different questions are not swapped."""
    texts = [q for _, q in QUESTIONS]
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    batcher = QueryBatcher(embedder.embed, max_batch=32)
    gate = Gated(embedder.embed)
    rows = ask_together(batcher, gate, texts)
    assert batcher.largest == len(texts) - 1, gate.calls  # one alone (held), then every other in one run
    assert batcher.runs == 2
    for text, row, single in zip(texts, rows, alone, strict=True):
        assert isinstance(row, np.ndarray), row
        assert np.allclose(row, single, atol=1e-5), text
        assert float(row @ single) > 0.99999
    # each row is its own question's: the nearest single embedding is its own text's (the two tenants'
    # identical questions are the same row either way)
    for i, row in enumerate(rows):
        assert isinstance(row, np.ndarray)
        nearest = int(np.argmax(alone @ row))
        assert texts[nearest] == texts[i]


def test_a_failing_run_fails_only_its_own_question(embedder: Any) -> None:
    """A batch whose run raises is embedded again question by question: only the question whose own run
    fails gets the error; the others get their rows; the batcher keeps working afterwards."""
    texts = [q for _, q in QUESTIONS[:5]] + ["poison: the model fails on this one"]  # the first, alone, is fine

    def model(batch: Sequence[str]) -> Vectors:
        if any(t.startswith("poison") for t in batch):
            raise RuntimeError("onnxruntime failed")
        rows: Vectors = embedder.embed(batch)
        return rows

    batcher = QueryBatcher(model, max_batch=32)
    rows = ask_together(batcher, Gated(model), texts)
    assert batcher.largest == len(texts) - 1
    by_text = dict(zip(texts, rows, strict=True))
    error = by_text.pop("poison: the model fails on this one")
    assert isinstance(error, RuntimeError) and str(error) == "onnxruntime failed"
    for text, row in by_text.items():
        assert isinstance(row, np.ndarray), (text, row)
        assert np.allclose(row, embedder.embed([text])[0], atol=1e-5)
    assert np.allclose(batcher.embed("after the failure"), embedder.embed(["after the failure"])[0], atol=1e-5)


def test_a_model_giving_the_wrong_number_of_rows_is_an_error_not_a_shifted_row(embedder: Any) -> None:
    """Rows are handed out by position: a run that returns fewer rows than texts must not hand anyone a
    neighbour's row; each question is then run alone, and the one whose own run is short fails."""

    def short(batch: Sequence[str]) -> Vectors:
        rows: Vectors = embedder.embed(batch)
        return rows[:-1] if len(batch) > 1 or batch[0] == "short" else rows

    batcher = QueryBatcher(short, max_batch=32)
    texts = ["first, alone", "short", "how do I revoke a token?", "what is a passage?"]
    rows = ask_together(batcher, Gated(short), texts)
    assert isinstance(rows[1], ValueError)
    for text, row in zip(texts[2:], rows[2:], strict=True):
        assert isinstance(row, np.ndarray)
        assert np.allclose(row, embedder.embed([text])[0], atol=1e-5)


def test_a_question_waiting_behind_a_stuck_run_gives_model_unavailable_after_the_timeout() -> None:
    """The first question leads and is stuck in its run; the one queued behind it gives up after the
    timeout with ModelUnavailable (and leaves the queue) instead of waiting for ever."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(batch: Sequence[str]) -> Vectors:
        entered.set()
        release.wait(30)
        return np.zeros((len(batch), 4), dtype=np.float32)

    batcher = QueryBatcher(stuck, timeout_s=0.2)
    leader = threading.Thread(target=batcher.embed, args=("the leader",))
    leader.start()
    try:
        assert entered.wait(30)
        with pytest.raises(ModelUnavailable, match="no question embedding within"):
            batcher.embed("anything")
        assert batcher._queue == []
    finally:
        release.set()
        leader.join(30)
    assert np.array_equal(batcher.embed("after"), np.zeros(4, dtype=np.float32))  # the lead was not lost


def test_every_question_of_many_threads_gets_its_own_row_and_no_thread_is_left_waiting() -> None:
    """Many threads at once, two lanes: each gets the row of its own text (a model whose row encodes the
    text), none hangs, and batches of more than one happened."""
    barrier = threading.Barrier(24)

    def model(batch: Sequence[str]) -> Vectors:
        threading.Event().wait(0.005)  # a run takes a while, so that others queue behind it
        return np.array([[float(t.split()[-1]), float(len(batch))] for t in batch], dtype=np.float32)

    batcher = QueryBatcher(model, max_batch=8, lanes=2)
    out: dict[int, float] = {}

    def one(i: int) -> None:
        barrier.wait(30)
        for n in range(10):
            out[i * 100 + n] = float(batcher.embed(f"question {i * 100 + n}")[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert out == {k: float(k) for k in out} and len(out) == 240
    assert 1 < batcher.largest <= 8 and batcher.runs < 240
    assert batcher._leaders == 0 and batcher._queue == []


def test_the_embedder_batches_questions_and_a_lone_question_is_embedded_as_before(embedder: Any) -> None:
    """FastEmbedder(query_batch=n) routes embed_query through a batcher; a lone question is a run of one,
    so its row is bit for bit the unbatched one."""
    from conftest import MODEL_PATH

    from indexer.embedder import FastEmbedder

    batched = FastEmbedder(MODEL_PATH, query_batch=16)
    assert batched._questions is not None and batched._questions.max_batch == 16
    assert embedder._questions is None  # the default: one question a run
    text = "How do I revoke a session token?"
    assert np.array_equal(batched.embed_query(text), embedder.embed_query(text))
