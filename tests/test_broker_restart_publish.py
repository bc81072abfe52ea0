"""The Kafka broker restarts while `ragsync sync` is publishing: no event is lost, none is recorded unacked.

A private broker (tests/faults.py `PrivateServices`, own ports and data) is stopped and started again
(`services down kafka`, then `up --keep kafka` on the same data) once the first batches of a large
sync are acknowledged and while the rest are still being sent. Restarted at once, the sync must finish
once the broker is back (the producer retries within kafka_delivery_timeout_s); kept down past a short
delivery bound, it must fail with a one-line error (exit 1). Either way:

- every document the connector state records as emitted has that exact version in Kafka (the state
  never advanced past an event the broker did not acknowledge);
- after one more `ragsync sync`, every document of the source is in Kafka at the version the state
  records, with the source's exact bytes (content hash and text): nothing was lost, and the re-run
  emitted only what the first one had not recorded.

Ingesting the documents (and `ragsync verify`) is not repeated here: a worker applying ~6,000 embedded
documents takes minutes on this machine, and test_cluster_faults.py already restarts the broker
under a worker with verify after recovery. This test is about the publishing side.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults import REPO, PrivateServices
from waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DOCS = 6000
"""Enough that publishing lasts several seconds here (about 1,500 documents a second unloaded)."""
STOP_AFTER = 512
"""Stop the broker once this many upserts are acknowledged: two of the scan's 256-event batches."""


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    private = PrivateServices()
    try:
        private.up("kafka")
        yield private
    finally:
        private.close()


def _write_drive(drive: Path) -> None:
    acme = drive / "acme"
    acme.mkdir(parents=True)
    (acme / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(DOCS):
        words = f"Page {i} explains procedure {i} and its {uuid.uuid4().hex} reference. " * 12
        (acme / f"p{i:05d}.md").write_text(f"# Page {i}\n\n{words}\n")


def _documents_topic(bootstrap: str, topic: str) -> dict[str, list[dict[str, Any]]]:
    """Every upsert in the documents topic, by doc_id, in offset order (read start to end now)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, bootstrap_timeout_ms=30_000)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        assert tps, f"no topic {topic}"
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: dict[str, list[dict[str, Any]]] = {}
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading the documents topic took over 60 s"
            for messages in consumer.poll(timeout_ms=500).values():
                for m in messages:
                    if m.value is None:
                        continue
                    event = json.loads(m.value)
                    if event.get("kind") == "upsert":
                        out.setdefault(event["doc_id"], []).append(event)
        return out
    finally:
        consumer.close(autocommit=False)


def _acked_upserts(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, bootstrap_timeout_ms=5_000)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return 0
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
        return int(sum(ends.values()))
    finally:
        consumer.close(autocommit=False)


def _state(home: Path) -> dict[str, tuple[int, str]]:
    """Qualified doc_id -> (version, content_hash) the connector state records as emitted."""
    from schemas.events import qualify_doc_id

    with sqlite3.connect(home / "connectors.db") as conn:
        rows = conn.execute(
            "SELECT source, doc_id, version, content_hash FROM connector_docs WHERE deleted = 0"
        ).fetchall()
    return {qualify_doc_id(source, doc_id): (version, digest) for source, doc_id, version, digest in rows}


def _sync(env: dict[str, str], drive: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ragsync.cli", "sync", str(drive), "--tenant", "acme", "--json"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    "outage",
    [
        pytest.param("restart", id="restart"),
        pytest.param("past-delivery-bound", id="down-past-the-delivery-bound"),
    ],
)
def test_broker_restart_mid_publish_loses_no_event_and_records_none_unacked(
    services: PrivateServices, tmp_path: Path, outage: str
) -> None:
    """`restart`: stopped and started at once, the sync must finish (default 120 s delivery bound).
    `past-delivery-bound`: kept down past a 3 s kafka_delivery_timeout_s, the sync must fail in one
    line while the broker is down, having recorded only what was acknowledged."""
    began = time.monotonic()
    drive, home = tmp_path / "drive", tmp_path / "home"
    _write_drive(drive)
    prefix = f"brk{uuid.uuid4().hex[:6]}."
    topic = f"{prefix}documents"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")},
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(home),
        "RAGSYNC_CONFIG": os.devnull,
        "RAGSYNC_KAFKA_BOOTSTRAP": services.kafka,
        "RAGSYNC_KAFKA_TOPIC_PREFIX": prefix,
        "PYTHONPATH": str(REPO),
    }
    if outage == "past-delivery-bound":
        env["RAGSYNC_KAFKA_DELIVERY_TIMEOUT_S"] = "3"

    first = _sync(env, drive)
    try:
        wait_until(
            lambda: _acked_upserts(services.kafka, topic) >= STOP_AFTER,
            60,
            "the first batches",
            alive=[first],
            tolerate=(Exception,),
        )
        acked_at_stop = _acked_upserts(services.kafka, topic)
        assert first.poll() is None, "the sync finished before the broker stopped: raise DOCS"
        stop_started = time.monotonic()
        services.down("kafka")
        stopped_s = time.monotonic() - stop_started
        still_publishing = first.poll() is None
        if outage == "past-delivery-bound":
            # the sync gives up while the broker is still down: it cannot have waited for its return
            wait_until(lambda: first.poll() is not None, 60, "the sync to give up", every_s=0.2)
        restart_s = services.up("kafka", keep=True)
        out, err = first.communicate(timeout=180)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    back_at = time.monotonic()
    assert still_publishing, "the sync finished while the broker was stopping: raise DOCS"
    assert acked_at_stop < DOCS, acked_at_stop
    if outage == "restart":
        outcome = "completed after the broker returned"
        assert first.returncode == 0, (first.returncode, err[-3000:])
        assert json.loads(out)["upserts"] == DOCS
    else:
        outcome = "failed with a one-line error"
        assert first.returncode == 1, (first.returncode, err[-3000:])
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: Kafka at "), err[-3000:]
        assert "not acknowledge" in lines[0], lines[0]
        print(f"\n{lines[0]}")

    # Fail closed: whatever the state records as emitted, Kafka acknowledged at that exact version.
    recorded = _state(home)
    in_kafka = _documents_topic(services.kafka, topic)
    unacked = [
        doc_id
        for doc_id, (version, digest) in recorded.items()
        if not any(e["version"] == version and e["payload"]["content_hash"] == digest for e in in_kafka.get(doc_id, []))
    ]
    assert unacked == [], f"{len(unacked)} documents recorded as emitted but not in Kafka, e.g. {unacked[:3]}"

    rerun = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", "sync", str(drive), "--tenant", "acme", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    report = json.loads(rerun.stdout)
    # The re-run emits at least what the first sync had not recorded. (After a first sync that did not
    # complete, the chunker version is not recorded either, so it re-emits the recorded ones too.)
    assert report["upserts"] + report["unchanged"] == DOCS, report
    assert report["upserts"] >= DOCS - len(recorded), (report, len(recorded))
    if outage == "restart":
        assert report["upserts"] == 0, report
    if outage == "past-delivery-bound":
        assert 0 < len(recorded) < DOCS, len(recorded)  # the acked batches stay recorded, the rest not

    final = _state(home)
    in_kafka = _documents_topic(services.kafka, topic)
    assert len(final) == DOCS
    from schemas.events import qualify_doc_id, source_name_from

    source = source_name_from(drive.name, "drive")
    wrong: list[str] = []
    for path in sorted((drive / "acme").glob("*.md")):
        doc_id = qualify_doc_id(source, path.relative_to(drive).as_posix())
        version, digest = final[doc_id]
        events = in_kafka.get(doc_id, [])
        latest = max(events, key=lambda e: e["version"]) if events else None
        data = path.read_bytes()
        if (
            latest is None
            or latest["version"] != version
            or latest["payload"]["content_hash"] != hashlib.sha256(data).hexdigest()
            or digest != latest["payload"]["content_hash"]
            or latest["payload"]["content"] != data.decode()
        ):
            wrong.append(doc_id)
    assert wrong == [], f"{len(wrong)} documents not in Kafka as the source has them, e.g. {wrong[:3]}"
    duplicates = sum(len(v) - 1 for v in in_kafka.values())
    print(
        f"\nbroker {outage} mid-publish: {outcome} (exit {first.returncode}) after {back_at - stop_started:.1f}s;"
        f" {acked_at_stop} of {DOCS} upserts acked at the stop; stop {stopped_s:.1f}s, start {restart_s:.1f}s;"
        f" recorded by the first sync {len(recorded)}, re-emitted {report['upserts']},"
        f" duplicate records {duplicates}; test {time.monotonic() - began:.1f}s"
    )
