"""A slow file never delays a revocation of its own sync (issue 18), with `ragsync serve` running.

The attack: a PDF that keeps its reader busy for minutes, and in the same sync a manifest edit that
revokes another document. Before, the ACL event waited in the scanner's batch until the scan ended
(210 s), and the revoked reader kept reading meanwhile. Now the listing pass publishes it before any
content is read, and the PDF costs its budget and is reported. Measured from the revocation's
publication to the first answer served without the document; the bound asserted is the project's
2 s (`revocation_bound_s`); the figure itself goes to bench/bombs.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from bomb_files import RestrictedFolder, pdf_operators_bomb
from conftest import MODEL_PATH
from serving import ROOT, Serve, cites, cli, environment, token
from waiting import wait_until

from schemas.events import AclPayload, Event, doc_path
from streams.ports import TOPIC_ACL
from streams.sqlite_log import SqliteEventLog

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}"),
]

QUESTION = "What is the access code for the vault?"
TIMEOUT_S = 10
VAULT = RestrictedFolder(
    "vault",
    ("group:staff",),
    "group:vault-admins",
    "code.md",
    "# Vault access\n\nThe access code for the vault is 4417-ledger. It changes yearly.\n",
)


def test_a_slow_file_in_the_same_sync_never_delays_a_revocation(tmp_path: Path) -> None:
    drive = VAULT.write(tmp_path / "drive")
    env = environment(tmp_path / "home", RAGSYNC_EXTRACT_TIMEOUT_S=str(TIMEOUT_S))
    ann = token("acme", "ann", "staff")
    with Serve(env) as serve:
        first = json.loads(cli(env, "sync", str(drive), "--tenant", "acme", "--json").stdout)
        assert first["applied"] == 2, first
        assert cites(serve.ask(ann, QUESTION), VAULT.path)

        (drive / "acme/slow.pdf").write_bytes(pdf_operators_bomb(150_000, pages=4))  # a minute or more for pypdf
        VAULT.narrow(drive)
        sync = subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", "sync", str(drive), "--tenant", "acme", "--json"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(
            lambda: not cites(serve.ask(ann, QUESTION), VAULT.path),
            120,
            "the vault note to disappear after the manifest edit",
            every_s=0.02,
        )
        gone_at = time.time()
        out, err = sync.communicate(timeout=300)
        finished_at = time.time()
        assert sync.returncode == 3, f"the slow file is a read error (exit 3):\n{err}"

    report = json.loads(out)
    [error] = report["errors"]
    assert error.startswith("acme/slow.pdf") and f"extraction exceeded {TIMEOUT_S} s" in error
    assert {"path": "acme/slow.pdf", "reason": "over budget", "detail": f"extraction exceeded {TIMEOUT_S} s"} in (
        report["skipped"]
    )
    assert report["acl_changes"] == 1 and report["applied"] == 1

    log = SqliteEventLog(tmp_path / "home" / "events.db")
    try:
        [acl] = [Event.model_validate_json(r.value) for r in log.poll(TOPIC_ACL, "test-inspect", 10)[-1:]]
    finally:
        log.close()
    assert doc_path(acl.doc_id) == VAULT.path and acl.payload == AclPayload(acl=(VAULT.kept_by,))
    published_at = datetime.timestamp(acl.occurred_at)
    effective_s = gone_at - published_at
    assert effective_s <= 2.0, f"revoked {effective_s:.2f} s after it was published (bound 2 s)"
    assert finished_at - gone_at >= TIMEOUT_S / 2, "effective while the slow file was still being read"
