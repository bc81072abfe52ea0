"""An idle `ragsync serve` after deletions and an erasure (issue 20): a real serve process on the
embedded profile, with the embedding model loaded (so the vector store purges too).

Before the fix the owner purged in a loop forever after any deletion (each purge record made the
next purge pending), kept its purge records in a transaction it never committed (holding state.db's
write lock; `ragsync erase` beside it waited minutes and failed), and the certificate it computed
counted those uncommitted records while `ragsync audit verify` counted the file's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL_PATH
from serving import Serve, cli, environment
from state_db import writable
from waiting import wait_until

pytestmark = pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")

IDLE_S = 25.0
BOUND_S = 30


def write_drive(root: Path) -> None:
    (root / "acme").mkdir(parents=True)
    (root / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(6):
        (root / f"acme/note{i}.md").write_text(f"# Note {i}\n\nThe meeting number {i} moved to room {100 + i}.\n")


def verified(env: dict[str, str]) -> dict[str, Any]:
    """`ragsync audit verify`: the trail read from the file by another process."""
    out: dict[str, Any] = json.loads(cli(env, "audit", "verify", "--json").stdout)
    assert out["ok"], out
    return out


def certified(env: dict[str, str], path: str) -> dict[str, Any]:
    """`ragsync audit deletion`: computed inside serve (it owns the stores)."""
    done = cli(env, "audit", "deletion", path, "--json", check=False)
    assert done.returncode in (0, 1), done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def test_idle_serve_after_deletions_is_quiet_and_erase_beside_it_returns_at_once(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    write_drive(drive)
    env = environment(tmp_path / "home", RAGSYNC_PURGE_MAX_DELAY_S=str(BOUND_S))
    state_db = tmp_path / "home/state.db"
    with Serve(env) as serve:
        assert json.loads(cli(env, "sync", str(drive), "--tenant", "acme", "--json").stdout)["applied"] == 6
        for i in range(3):
            (drive / f"acme/note{i}.md").unlink()
        report = json.loads(cli(env, "sync", str(drive), "--tenant", "acme", "--json").stdout)
        assert report["deletes"] == 3 and report["applied"] == 3, report

        # An erasure with serve running: applied and purged by serve, confirmed within the bound.
        started = time.monotonic()
        erased = cli(env, "erase", "--tenant", "acme", "acme/note3.md", check=False, timeout=BOUND_S + 60)
        took = time.monotonic() - started
        assert erased.returncode == 0, f"erase exited {erased.returncode} after {took:.0f}s: {erased.stderr}"
        assert erased.stdout.startswith("erased: acme/drive:acme/note3.md") and "purged from every store" in (
            erased.stdout
        )

        # The first purge after the deletions: every copy of each deleted document purged physically.
        for path in ("acme/note0.md", "acme/note3.md"):
            wait_until(lambda p=path: certified(env, p)["complete"], 60, f"{path} purged")
        first = verified(env)
        kinds_before = first["records"]
        assert kinds_before >= 4 + 2, first  # 4 deletions, and at least two stores' purges

        # Idle: no record is added, state.db's write lock is free whenever another process asks.
        deadline = time.monotonic() + IDLE_S
        while time.monotonic() < deadline:
            assert writable(state_db, timeout_s=0.5), "serve holds state.db's write lock while idle"
            time.sleep(1.0)
        after = verified(env)
        assert after["records"] == first["records"] and after["head"] == first["head"], (
            f"an idle serve appended {after['records'] - first['records']} audit records in {IDLE_S:.0f}s"
        )

        # One trail, one count: the certificate serve computes and `audit verify` from the file agree.
        for path in ("acme/note0.md", "acme/note3.md"):
            trail = certified(env, path)["audit_trail"]
            assert trail["intact"] and (trail["records"], trail["head"]) == (after["records"], after["head"]), (
                trail,
                after,
            )
        assert verified(env)["records"] == after["records"]
    assert "Traceback" not in serve.output()
