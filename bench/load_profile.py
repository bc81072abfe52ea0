"""Where a served answer's time goes, for bench/api_load.py: the serve's CPU (its workers' included) and
py-spy samples of it summed by stage (question embedding, sentence embeddings, stores, answer step, HTTP)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

STAGES = (
    # (stage, substrings of a frame, first match from the leaf upwards wins)
    ("question embedding (ONNX)", ("embed_query", "query_batch")),  # query_batch: the batcher's runner thread
    ("sentence embeddings (ONNX)", ("onnxruntime", "fastembed")),
    ("embedding cache", ("get_many", "embedding_key", "redis_embeddings", "embedding_cache")),
    ("reranker (Python)", ("query/rerank.py",)),
    ("answer step (Python)", ("query/extractive.py", "query/reading.py", "query/sentences.py")),
    ("lexical store", ("sqlite_fts", "indexer/elastic")),
    ("vector store", ("qdrant",)),
    ("deny set / result cache", ("indexer/deny", "redis_deny", "indexer/cache", "redis_cache", "indexer/state")),
    ("tokens", ("query/tokens.py",)),
    ("query worker, retrieval (Python)", ("query/retrieval.py", "query/worker.py", "query/loop.py", "query/citat")),
    ("HTTP, JSON, event loop", ("uvicorn", "starlette", "fastapi", "pydantic", "h11", "httptools", "asyncio", "anyio")),
)


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (Linux /proc): what an answer costs the serve, a figure
    that a busy machine inflates much less than latency or throughput (which depend on the CPU share the
    serve gets beside other jobs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The direct children of a process (the workers of `serve --workers N`)."""
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(p) for p in listed]


def cpu_seconds(pid: int) -> float:
    """CPU of a serve and its workers so far."""
    total = 0.0
    for one in (pid, *children(pid)):
        with contextlib.suppress(OSError):
            total += process_cpu_seconds(one)
    return total


def stage_of(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):
        for stage, needles in STAGES:
            if any(n in frame for n in needles):
                if stage == "sentence embeddings (ONNX)" and ("embed_query" in stack or "query_batch" in stack):
                    return "question embedding (ONNX)"  # the same ONNX frames, under embed_query
                return stage
    return "other Python"


def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "100",
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
            "--subprocesses",  # the workers of serve --workers N
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def spy_for(pid: int, seconds: float, out: Path) -> None:
    """py-spy for `seconds`; on a crowded machine it can hang, so it is stopped after a grace period."""
    proc = py_spy(pid, seconds, out)
    try:
        proc.wait(seconds + 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled on SIGINT
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def summarise_profile(path: Path) -> dict[str, Any]:
    """Samples of busy threads by stage (a stage is the innermost frame that names one)."""
    if not path.is_file():
        return {"error": "py-spy wrote nothing"}
    totals: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            totals[stage_of(stack)] += int(count)
    total = sum(totals.values()) or 1
    return {"samples": total, "share": {k: round(v / total, 3) for k, v in totals.most_common()}}
