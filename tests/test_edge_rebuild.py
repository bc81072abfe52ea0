"""qdrant-edge optimize and vacuum run on a copy in a child process, never freezing the owner.

`EdgeShard.optimize` holds the GIL while it builds, so in-process it stopped the owner's queries and
worker (revocations too) for seconds. These tests pin what the out-of-process rebuild must keep:
the live shard answers and takes writes while the child works, those writes survive the swap, a
failed child changes nothing, and a crash mid-swap loses nothing.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import NOW, make_passage, unit

import indexer.qdrant_edge as edge
from indexer.qdrant_edge import EdgeVectorIndex
from schemas.principal import AccessFilter

DIM = 8
STAFF = AccessFilter("acme", ("group:staff",), NOW)


def filled(path: Path, n: int = 40) -> EdgeVectorIndex:
    index = EdgeVectorIndex(path, DIM)
    passages = [make_passage(f"p{i}", doc_id=f"d{i}.md", anchor="a-1") for i in range(n)]
    index.upsert(passages, np.stack([unit(1, i / n) for i in range(n)]))
    index.flush()
    return index


def visible(index: EdgeVectorIndex, access: AccessFilter = STAFF) -> set[str]:
    return {h.doc_id for h in index.search(unit(1, 0.5), access, 100, 0.0)}


def test_the_live_shard_answers_and_writes_while_the_child_vacuums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = filled(tmp_path / "vectors")
    index.delete_doc("acme", "d0.md")
    real_run = subprocess.run
    during: dict[str, Any] = {}

    def run_with_traffic(*args: Any, **kwargs: Any) -> Any:
        # Another thread queries and writes while the child is about to run: it must not wait for
        # the rebuild (a join timeout fails the test if the shard's lock were held).
        def traffic() -> None:
            during["seen"] = visible(index)
            index.set_acl("acme", "d1.md", ["group:hr"], {})  # a revocation
            index.delete_doc("acme", "d2.md")
            index.upsert([make_passage("new", doc_id="new.md", anchor="a-1")], np.stack([unit(1, 0.5)]))

        worker = threading.Thread(target=traffic)
        worker.start()
        worker.join(timeout=10)
        during["blocked"] = worker.is_alive()
        return real_run(*args, **kwargs)

    monkeypatch.setattr(edge.subprocess, "run", run_with_traffic)
    details = index.purge()

    assert during["blocked"] is False
    assert "d3.md" in during["seen"] and "d0.md" not in during["seen"]
    assert details["vacuumed"] is True
    assert index.last_rebuild["journaled_writes"] == 3
    # The writes made while the child ran are in the swapped-in shard, and durable.
    _assert_traffic_applied(index)
    _assert_traffic_applied(_reopen(index, tmp_path / "vectors"))
    assert not (tmp_path / "vectors.rebuild").exists() and not (tmp_path / "vectors.old").exists()


def test_a_failed_child_keeps_the_live_shard_and_its_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = filled(tmp_path / "vectors")

    def failing(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        index.set_acl("acme", "d1.md", ["group:hr"], {})
        return subprocess.CompletedProcess(args[0], 1, "", "Segmentation fault")

    monkeypatch.setattr(edge.subprocess, "run", failing)
    assert index.optimize() is False
    assert "d1.md" not in visible(index) and "d3.md" in visible(index)
    assert not (tmp_path / "vectors.rebuild").exists()


def test_a_crash_between_the_swap_renames_recovers_the_previous_shard(tmp_path: Path) -> None:
    path = tmp_path / "vectors"
    filled(path).close()
    path.rename(tmp_path / "vectors.old")  # the crash: the live shard moved aside, the copy not yet in
    (tmp_path / "vectors.rebuild").mkdir()  # and a half-built copy left behind
    recovered = EdgeVectorIndex(path, DIM)
    assert "d5.md" in visible(recovered)
    assert not (tmp_path / "vectors.old").exists() and not (tmp_path / "vectors.rebuild").exists()


def test_the_child_really_optimizes_a_copy(tmp_path: Path) -> None:
    """No monkeypatching: the real child process vacuums the copy, which then serves."""
    index = filled(tmp_path / "vectors")
    for i in range(10):
        index.delete_doc("acme", f"d{i}.md")
    assert index.purge()["vacuumed"] is True
    assert index.last_rebuild["child_s"] > 0
    assert visible(index) == {f"d{i}.md" for i in range(10, 40)}
    assert index.held([edge.point_id("acme", "d0.md@1#a-1")]) == 0


def _assert_traffic_applied(index: EdgeVectorIndex) -> None:
    seen = visible(index)
    assert "new.md" in seen and "d3.md" in seen
    assert not {"d0.md", "d1.md", "d2.md"} & seen
    assert "d1.md" in visible(index, AccessFilter("acme", ("group:hr",), NOW))


def _reopen(index: EdgeVectorIndex, path: Path) -> EdgeVectorIndex:
    index.close()
    return EdgeVectorIndex(path, DIM)
