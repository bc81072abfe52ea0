"""A deleted document leaves no text behind on the cluster profile: Kafka, a Faust worker,
Elasticsearch, the Qdrant server and Redis, the embedding model loaded, through the real CLI.

After the deletion: the certificate reaches zero remnants (Kafka compaction, Elasticsearch expunge,
Qdrant vacuum all done), a raw scan of the documents and dlq topics (every record, from the start)
and of the broker's own segment files finds none of the document's words, Redis holds none of
them, nor does any file under the home; the propagation audit has the deletion.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_cluster_end_to_end import REPO, cli, start_ragsync, stop
from test_cluster_end_to_end import cluster_env as cluster_env  # the fixture
from test_deletion_physical import KEEP_WORDS, V1_WORDS, found_in, v1
from waiting import wait_until

from streams.faust_app import MAINTENANCE_INTERVAL_S
from streams.kafka_admin import ERASE_BOUND_S

DOC = "acme/ops/plan.md"


def topic_words(env: dict[str, str], words: tuple[str, ...]) -> dict[str, int]:
    """Occurrences of the words in every record of the documents and dlq topics, read from the start."""
    from kafka import KafkaConsumer, TopicPartition

    prefix = env["RAGSYNC_KAFKA_TOPIC_PREFIX"]
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9092", enable_auto_commit=False)
    hits: dict[str, int] = {}
    try:
        for topic in (f"{prefix}documents", f"{prefix}dlq"):
            parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            ends = consumer.end_offsets(parts)
            while any(consumer.position(tp) < ends[tp] for tp in parts):
                for messages in consumer.poll(timeout_ms=1000).values():
                    for m in messages:
                        for w in words:
                            if m.value and w.encode() in m.value:
                                hits[w] = hits.get(w, 0) + 1
    finally:
        consumer.close()
    return hits


def broker_files(env: dict[str, str]) -> list[Path]:
    """The broker's segment files of this test's topics, when the broker's log.dirs is on this machine."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092")
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        entries = {k: str(v.get("value")) for k, v in described["broker"]["1"].items()}
    finally:
        admin.close()
    prefix = env["RAGSYNC_KAFKA_TOPIC_PREFIX"]
    files: list[Path] = []
    for root in entries.get("log.dirs", entries.get("log.dir", "")).split(","):
        base = Path(root)
        if base.is_dir():
            files += [p for p in base.glob(f"{prefix}*/*") if p.is_file()]
    return files


def words_in(files: list[Path], words: tuple[str, ...]) -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a compacted segment removed while we scan
            continue
        for w in words:
            if w.encode() in data:
                hits.setdefault(w, []).append(path.name)
    return hits


def redis_values(client: Any, key: bytes) -> list[bytes]:
    """Every value a key holds, whatever its type (the deny set's log of clears is a sorted set)."""
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key)]
    if kind == "zset":
        return list(client.zrange(key, 0, -1))
    if kind == "hash":
        return [v for pair in client.hgetall(key).items() for v in pair]
    if kind == "list":
        return list(client.lrange(key, 0, -1))
    if kind == "set":
        return list(client.smembers(key))
    raise AssertionError(f"redis key {key!r} of a type this check cannot read: {kind}")


def redis_words(env: dict[str, str], words: tuple[str, ...]) -> list[str]:
    import redis

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        found = []
        for key in client.scan_iter(match=f"{env['RAGSYNC_REDIS_NAMESPACE']}:*", count=500):
            if any(w.encode() in value for value in redis_values(client, key) for w in words):
                found.append(key.decode())
        return found
    finally:
        client.close()


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_cluster_deletion_leaves_no_text_in_kafka_stores_or_redis(tmp_path: Path, cluster_env: dict[str, str]) -> None:
    home = Path(cluster_env["RAGSYNC_HOME"])
    drive = tmp_path / "drive"
    (drive / "acme/ops").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (drive / DOC).write_text(v1())
    (drive / "acme/ops/keep.md").write_text(f"# Keep\n\nThis page stays: {KEEP_WORDS[0]} lives on.\n")
    env = {**os.environ, **cluster_env, "PYTHONPATH": str(REPO)}
    worker = start_ragsync(["worker"], env, tmp_path / "worker.log")
    try:
        report = json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme", "--json"))
        assert report["upserts"] == 2
        token = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff").strip()
        question = "Who does the night shift call?"

        def answered() -> bool:
            """Whether the document still comes back for the question (what the deletion must stop)."""
            traced = json.loads(cli(cluster_env, "ask", question, "--token", token, "--json", "--show-trace"))
            ids = [i for s in traced["trace"]["searches"] for i in (*s["lexical_ids"], *s["dense_ids"])]
            return any(i.startswith(f"drive:{DOC}@") for i in ids)

        wait_until(answered, 120, "the worker to index the drive", every_s=0.5)
        from streams.kafka_log import KafkaEventLog

        events = KafkaEventLog("127.0.0.1:9092", topic_prefix=cluster_env["RAGSYNC_KAFKA_TOPIC_PREFIX"])
        try:  # a dead letter carrying the document's words under its key
            events.publish_raw("documents", f"acme/drive:{DOC}", f'{{"broken": "{V1_WORDS[0]}"}}'.encode())
            events.flush()
        finally:
            events.close()
        wait_until(
            lambda: bool(topic_words(cluster_env, V1_WORDS).get(V1_WORDS[0], 0) >= 2),
            60,
            "the dead letter",
            every_s=0.5,
        )
        assert words_in(broker_files(cluster_env), V1_WORDS), "the broker's files hold the words before"

        (drive / DOC).unlink()
        assert json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme", "--json"))["deletes"] == 1
        deleted_at = time.monotonic()
        wait_until(lambda: not answered(), 60, "the deletion to take effect", every_s=0.5)

        def certified() -> dict[str, Any] | None:
            result = CliRunnerResult(cluster_env, "audit", "deletion", DOC, "--json")
            return result if result is not None and result.get("complete") else None

        worker_log = tmp_path / "worker.log"
        cert = wait_until(
            certified,
            240,
            "a complete certificate",
            every_s=2.0,
            explain=lambda: (
                worker_log.read_text() + str(CliRunnerResult(cluster_env, "audit", "deletion", DOC, "--json"))
            ),
        )
        copies = {c["copy"]: c for c in cert["copies"]}
        assert {"elasticsearch", "qdrant", "event log", "dead-letter topic", "deny set", "embedding-cache"} <= set(
            copies
        ), copies
        assert copies["elasticsearch"]["removed_physically_at"], copies["elasticsearch"]
        assert copies["qdrant"]["removed_physically_at"], copies["qdrant"]
        assert cert["remnants"] == 0 and cert["unchecked"] == [] and cert["audit_trail"]["intact"]
        assert copies["event log"]["observed_compacted"] and copies["dead-letter topic"]["observed_compacted"]
        # Every store purged: the worker's purge timer adds nothing more (issue 20: it purged every
        # timer period forever, each purge record making the next purge pending).
        trail = json.loads(cli(cluster_env, "audit", "verify", "--json"))
        assert cert["audit_trail"]["records"] <= trail["records"]
        certified_at = time.monotonic()

        assert topic_words(cluster_env, V1_WORDS) == {}, "no record of the topics carries a word of the document"
        files = broker_files(cluster_env)
        wait_until(
            lambda: words_in(broker_files(cluster_env), V1_WORDS) == {} or None,
            ERASE_BOUND_S + 60,
            "the broker's segment files to lose the words",
            every_s=2.0,
            explain=lambda: str(words_in(broker_files(cluster_env), V1_WORDS)),
        )
        gone_after = time.monotonic() - deleted_at
        assert files, "the broker's log.dirs were scanned"
        assert words_in(broker_files(cluster_env), KEEP_WORDS), "the scan finds a live document's words"
        assert redis_words(cluster_env, V1_WORDS) == []
        assert found_in(home, V1_WORDS) == {}
        time.sleep(max(0.0, certified_at + 3 * MAINTENANCE_INTERVAL_S - time.monotonic()))
        assert json.loads(cli(cluster_env, "audit", "verify", "--json"))["records"] == trail["records"], (
            "the worker kept purging after every store had purged the deletion"
        )
        propagation = json.loads(cli(cluster_env, "audit", "propagation", "--json", "--bound", "3600"))
        assert propagation["events"] >= 1 and "delete/converged" in propagation["by_copy"]
        print(f"broker files free of the document {gone_after:.0f}s after the deletion was published")
    finally:
        stop(worker)


def CliRunnerResult(env: dict[str, str], *args: str) -> dict[str, Any] | None:
    """The command's JSON whatever its exit status (a certificate with remnants exits 1); None when it
    failed (a busy shared Elasticsearch answering 503: the caller polls again)."""
    from click.testing import CliRunner

    from ragsync.cli import main

    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=True)
    try:
        parsed: dict[str, Any] = json.loads(result.output)
    except ValueError:
        return None
    return parsed
