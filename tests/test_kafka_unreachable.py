"""A broker that cannot be reached: a prompt one-line error, exit 1, and nothing recorded as published.

Real sockets, no mock: the "broker" is a free port with nothing listening (connections are refused,
as while a broker is down or restarting). Before the bound, kafka-python's bootstrap retried with
backoffs growing to 30 s, so `ragsync sync` answered after about 31-35 s with a screen of
per-attempt ERROR lines.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port

from indexer.ports import StoreUnavailable
from streams.kafka_log import KafkaEventLog, KafkaUnavailable

REPO = Path(__file__).resolve().parents[1]


def test_event_log_on_a_closed_port_raises_within_the_connect_bound() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable) as caught:
        KafkaEventLog(f"127.0.0.1:{port}", topic_prefix="never.", connect_timeout_s=1.0)
    waited = time.monotonic() - started
    assert isinstance(caught.value, StoreUnavailable)  # the CLI's one-line, exit-1 path
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "kafka_connect_timeout_s" in message
    assert "\n" not in message
    # kafka-python's own default waits 30 s; the bound is what ends the wait (generous margin for load)
    assert waited < 15, waited


def _drive(root: Path, docs: int) -> Path:
    drive = root / "drive"
    (drive / "acme").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(docs):
        (drive / "acme" / f"page{i}.md").write_text(f"# Page {i}\n\nBody of page {i}.\n")
    return drive


def test_cluster_sync_with_the_broker_down_fails_in_one_line_and_records_nothing(tmp_path: Path) -> None:
    drive = _drive(tmp_path, 3)
    home = tmp_path / "home"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")},
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(home),
        "RAGSYNC_CONFIG": os.devnull,
        "RAGSYNC_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "RAGSYNC_KAFKA_CONNECT_TIMEOUT_S": "2",
        "PYTHONPATH": str(REPO),
    }
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", "sync", str(drive), "--tenant", "acme"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    waited = time.monotonic() - started
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr  # no traceback, no per-attempt kafka-python lines
    assert lines[0].startswith("error: Kafka at ") and "unreachable" in lines[0], lines[0]
    assert res.stdout == ""
    assert waited < 20, waited  # 2 s bound plus interpreter start-up; was > 30 s whatever the setting
    # The scan never ran: no document is recorded as emitted, so the next sync emits all three.
    db = home / "connectors.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM connector_docs").fetchone() == (0,)


def test_connect_timeout_setting_is_validated() -> None:
    from pydantic import ValidationError

    from ragsync.settings import Settings

    with pytest.raises(ValidationError):
        Settings(kafka_connect_timeout_s=0)
    with pytest.raises(ValidationError):
        Settings(kafka_delivery_timeout_s=-1)
