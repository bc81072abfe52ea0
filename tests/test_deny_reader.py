"""The worker's deny reader (streams.deny_reader): revocations and deletions denied without Faust's loop.

Under load the Faust deny agent got its records 0.75 s p99 after publish (bench/README.md,
`deny_path_diag`): the consumer and the event loop are shared with the appliers and the backlog. The
reader fetches the ACL and deletion partitions Faust assigned to this worker on a thread of its own.
What must hold: it denies what this worker holds, from the group's committed offsets on; it commits
nothing (the appliers' acks alone move the group); a malformed record does not stop it; a revoked
partition is no longer read. Real Kafka and Redis.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import require_service, unique
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from test_indexing import acl, delete

from indexer.redis_deny import RedisDenySet
from schemas.events import Event
from streams.kafka_admin import ensure_topics, topic_names
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DOCUMENTS
from streams.tracking import Tracker

BOOTSTRAP = "127.0.0.1:9092"
REDIS = "redis://127.0.0.1:6379/0"


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def topics() -> Iterator[dict[str, str]]:
    require_service("kafka")
    require_service("redis")
    prefix = unique("dr") + "."
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="deny-reader-test")
    ensure_topics(admin, prefix, 2)
    names = topic_names(prefix)
    try:
        yield names
    finally:
        admin.delete_topics(list(names.values()))
        admin.close()


def send(producer: Any, topic: str, partition: int, key: str, value: bytes) -> None:
    producer.send(topic, key=key.encode(), value=value, partition=partition).get(timeout=30)


def event_value(event: Event) -> bytes:
    return event.model_dump_json().encode()


def committed(group: str, tp: TopicPartition) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(tp)  # type: ignore[no-any-return]
    finally:
        consumer.close(autocommit=False)


def test_the_deny_reader_denies_what_this_worker_holds_from_the_groups_commit_and_commits_nothing(
    topics: dict[str, str],
) -> None:
    group = unique("g")
    acl_topic, deletions_topic = topics[TOPIC_ACL], topics[TOPIC_DELETIONS]
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
    # Partition 0 of the ACL topic: one event the group already applied and committed, then two it has
    # not, with a malformed record between them; partition 1 belongs to another worker.
    applied = acl(2, ("group:hr",), doc="t:applied.md")
    send(producer, acl_topic, 0, applied.key, event_value(applied))
    pending = acl(2, ("group:hr",), doc="t:pending.md")
    send(producer, acl_topic, 0, pending.key, event_value(pending))
    send(producer, acl_topic, 0, "acme/t:odd.md", b"{not an event")
    gone = delete(3, doc="t:gone.md")
    send(producer, deletions_topic, 0, gone.key, event_value(gone))
    elsewhere = acl(2, ("group:hr",), doc="t:elsewhere.md")
    send(producer, acl_topic, 1, elsewhere.key, event_value(elsewhere))
    # The group committed past the first record (its appliers applied it).
    committer = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=group, enable_auto_commit=False)
    from kafka.structs import OffsetAndMetadata

    committer.commit({TopicPartition(acl_topic, 0): OffsetAndMetadata(1, "", -1)})
    committer.close(autocommit=False)

    from streams.deny_reader import DenyReader

    deny = RedisDenySet(REDIS, namespace=unique("t"))
    tracker = Tracker(deny, None)
    names = {acl_topic: TOPIC_ACL, deletions_topic: TOPIC_DELETIONS}
    reader = DenyReader(BOOTSTRAP, group, names, tracker.consumed_many)

    def denied(doc: str) -> bool:
        return bool(deny.lookup("acme", [doc]))

    try:
        # Faust's assignment for this worker: partition 0 of every topic (the documents one is not read).
        reader.assign([(acl_topic, 0), (deletions_topic, 0), (topics[TOPIC_DOCUMENTS], 0)])
        assert reader.assigned() == {(acl_topic, 0), (deletions_topic, 0)}
        assert wait_until(lambda: denied("t:pending.md") and denied("t:gone.md"), 30), "not denied by the reader"
        # Past the malformed record it goes on reading.
        later = acl(4, ("group:hr",), doc="t:later.md")
        send(producer, acl_topic, 0, later.key, event_value(later))
        assert wait_until(lambda: denied("t:later.md"), 30), "the reader stopped at the malformed record"
        assert not denied("t:applied.md"), "read from before the group's commit"
        assert not denied("t:elsewhere.md"), "read a partition another worker holds"
        # A revoked partition is no longer read.
        reader.revoke([(acl_topic, 0)])
        time.sleep(0.5)
        after = acl(5, ("group:hr",), doc="t:after-revoke.md")
        send(producer, acl_topic, 0, after.key, event_value(after))
        assert wait_until(lambda: denied("t:after-revoke.md"), 3) is False, "read a revoked partition"
        assert reader.records_read == 4
    finally:
        reader.close()
        producer.close()
    # It committed nothing: the group's offsets are what its appliers committed.
    assert committed(group, TopicPartition(acl_topic, 0)) == 1
    assert committed(group, TopicPartition(deletions_topic, 0)) is None


def test_the_worker_app_denies_its_acl_and_deletion_partitions_without_faust_delivering_them(
    topics: dict[str, str], tmp_path: Any
) -> None:
    """The app built for the worker hands Faust's assignment to its reader: a revocation is denied
    while Faust itself never runs (its loop, fetches and agents are not on the way)."""
    from faust.types import TP

    from streams.faust_app import Deployment, Indexer, build_app

    prefix = topics[TOPIC_ACL][: -len(TOPIC_ACL)]
    deny = RedisDenySet(REDIS, namespace=unique("t"))
    indexer = Indexer(sink=None, tracker=Tracker(deny, None))  # type: ignore[arg-type]
    app = build_app(Deployment(BOOTSTRAP, prefix, 2, tmp_path / "faust"), indexer, app_id=unique("g"))
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all")
    revocation = acl(2, ("group:hr",), doc="t:vault.md")
    try:
        assigned = {TP(topics[TOPIC_ACL], 1), TP(topics[TOPIC_DELETIONS], 1), TP(topics[TOPIC_DOCUMENTS], 1)}
        asyncio.run(app.on_partitions_assigned.send(assigned))
        send(producer, topics[TOPIC_ACL], 1, revocation.key, event_value(revocation))
        assert wait_until(lambda: bool(deny.lookup("acme", ["t:vault.md"])), 30), "the revocation was not denied"
        assert app.deny_reader.assigned() == {(topics[TOPIC_ACL], 1), (topics[TOPIC_DELETIONS], 1)}
        asyncio.run(app.on_partitions_revoked.send({TP(topics[TOPIC_ACL], 1)}))
        assert app.deny_reader.assigned() == {(topics[TOPIC_DELETIONS], 1)}
    finally:
        reader = vars(app).get("deny_reader")  # main's app has none
        if reader is not None:
            reader.close()
        producer.close()
