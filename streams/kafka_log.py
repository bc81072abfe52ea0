"""The cluster event log: Kafka through kafka-python, behind the same port as the SQLite log.

Durability: the producer waits for every in-sync replica (`acks="all"`), retries transient
errors and is idempotent, so a retry neither duplicates nor reorders a record within its
partition. The record key is `tenant/doc_id`, so every event of one document lands in one
partition and is consumed in the order it was published.

Consumption mirrors the SQLite log exactly: one consumer per (topic, group) that owns *every*
partition of the topic (manual assignment, no group membership). A group rebalance would
silently reset an uncommitted position to the committed one, and joining costs seconds; the
port promises neither. Sharing partitions between processes is the Faust worker's job
(streams/faust_app.py), which uses its own consumer group. Offsets are committed explicitly,
only for records the caller applied; nothing is ever auto-committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from schemas.events import Event
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DLQ, TOPIC_DOCUMENTS, Record, topic_for

log = logging.getLogger(__name__)
T = TypeVar("T")

LOGICAL_TOPICS = (TOPIC_DOCUMENTS, TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DLQ)

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
"""Documents can be large: the producer, the topics and the fetchers all accept 10 MiB records."""

_TOPIC_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES + 64 * 1024
"""The topic limit applies to a whole (compressed) batch with its headers: leave room above one record."""

_TOPIC_ALREADY_EXISTS = 36
_CATCH_UP_WAIT_S = 2.0
"""How long a `timeout_s=0` poll may wait when the broker still holds records past the position."""


_RETRY_FOR_S = 30.0


def retrying(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)`, retrying retriable Kafka errors (e.g. no group coordinator yet on a
    fresh broker) for up to 30 s: these calls are idempotent, and such errors clear on their own."""
    deadline = time.monotonic() + _RETRY_FOR_S
    delay = 0.1
    while True:
        try:
            return call(*args, **kwargs)
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) or time.monotonic() + delay > deadline:
                raise
            log.debug("retriable Kafka error, retrying in %.1fs: %s", delay, exc)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def topic_names(prefix: str) -> dict[str, str]:
    """Logical topic name -> Kafka topic name, e.g. documents -> ragsync.documents."""
    return {logical: f"{prefix}{logical}" for logical in LOGICAL_TOPICS}


def ensure_topics(
    admin: Any, prefix: str, partitions: int, *, replication: int = 1, timeout_s: float = 30.0
) -> dict[str, list[int]]:
    """Create the four topics if missing and wait until every partition has a leader.

    Idempotent: a topic that already exists (created by another process, even concurrently) is
    accepted as it is, with its own partition count. Returns Kafka topic name -> partition ids.
    """
    names = list(topic_names(prefix).values())
    existing = set(retrying(admin.list_topics))
    missing = [name for name in names if name not in existing]
    if missing:
        spec = {
            name: {
                "num_partitions": partitions,
                "replication_factor": replication,
                "configs": {"max.message.bytes": str(_TOPIC_MAX_MESSAGE_BYTES)},
            }
            for name in missing
        }
        response = admin.create_topics(spec, raise_errors=False)
        for topic in response.get("topics", []):
            code = topic.get("error_code", 0)
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"cannot create topic {topic.get('name')}: {code} {topic.get('error_message')}")
    admin.wait_for_topics(names, timeout_ms=int(timeout_s * 1000))
    out: dict[str, list[int]] = {}
    for described in retrying(admin.describe_topics, names):
        out[described["name"]] = sorted(p["partition_index"] for p in described["partitions"])
    return out


class KafkaEventLog:
    """EventLog over Kafka. Thread-safe for publishing; poll/commit/rewind are serialised by a lock."""

    name = "kafka"

    def __init__(
        self,
        bootstrap: str,
        *,
        topic_prefix: str = "ragsync.",
        partitions: int = 3,
        client_id: str = "ragsync",
    ) -> None:
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.client_id = client_id
        self._topics = topic_names(topic_prefix)
        self._logical = {kafka_name: logical for logical, kafka_name in self._topics.items()}
        self._admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"{client_id}-admin")
        try:
            self._partitions = ensure_topics(self._admin, topic_prefix, partitions)
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap,
                client_id=f"{client_id}-producer",
                acks="all",
                retries=2**31 - 1,  # bounded by delivery_timeout_ms, as in the Java client
                delivery_timeout_ms=120_000,
                enable_idempotence=True,
                max_in_flight_requests_per_connection=5,  # idempotence keeps order with up to 5 in flight
                max_request_size=MAX_MESSAGE_BYTES,
                linger_ms=5,
                compression_type=None,
            )
        except BaseException:
            self._admin.close()
            raise
        self._consumers: dict[tuple[str, str], Any] = {}
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self._pending: list[Any] = []
        self._pending_lock = threading.Lock()
        self._lock = threading.RLock()

    # ---- producing ---------------------------------------------------------------------------

    def kafka_topic(self, logical: str) -> str:
        """The Kafka name of a logical topic (documents, acl, deletions, dlq)."""
        try:
            return self._topics[logical]
        except KeyError:
            raise ValueError(f"unknown topic {logical!r}; expected one of {', '.join(LOGICAL_TOPICS)}") from None

    def publish(self, event: Event) -> None:
        """Send asynchronously, keyed by tenant/doc_id; `flush` makes it durable (or raises)."""
        self.publish_raw(topic_for(event), event.key, event.model_dump_json().encode())

    def publish_many(self, events: Iterable[Event]) -> None:
        """Batch publish then flush: one wait for the whole batch instead of one per event."""
        for event in events:
            self.publish(event)
        self.flush()

    def publish_raw(self, topic: str, key: str, value: bytes) -> None:
        future = self._producer.send(self.kafka_topic(topic), key=key.encode(), value=value)
        with self._pending_lock:
            self._pending.append(future)

    def flush(self) -> None:
        """Wait for every send since the last flush to be acknowledged by all in-sync replicas.

        KafkaProducer.flush() alone returns even when a send failed; the futures carry the
        error, so each one is checked and the first failure is raised to the publisher, who
        must then publish again (redelivery is harmless: the sink is idempotent).
        """
        with self._pending_lock:
            pending, self._pending = self._pending, []
        self._producer.flush()  # every send above is now acknowledged or failed
        for future in pending:
            future.get(timeout=0)

    # ---- consuming ---------------------------------------------------------------------------

    def _consumer(self, topic: str, group: str) -> Any:
        key = (topic, group)
        consumer = self._consumers.get(key)
        if consumer is None:
            kafka_topic = self.kafka_topic(topic)
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id=f"{self.client_id}-{group}-{topic}",
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_partition_fetch_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
                fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
                fetch_max_wait_ms=100,
            )
            consumer.assign([TopicPartition(kafka_topic, p) for p in self._partitions[kafka_topic]])
            self._consumers[key] = consumer
        return consumer

    def _behind(self, consumer: Any) -> bool:
        """Whether the broker holds records past this consumer's position (a fetch is in flight)."""
        assigned = list(consumer.assignment())
        ends = consumer.end_offsets(assigned)
        return any(consumer.position(tp) < ends[tp] for tp in assigned)

    def poll(self, topic: str, group: str, max_records: int = 100, timeout_s: float = 0.0) -> list[Record]:
        """Records past the position; `timeout_s=0` still waits briefly if the broker has more.

        A Kafka consumer fetches in the background, so an immediate poll often returns nothing
        although records are waiting. Callers such as the embedded worker treat an empty poll
        as "caught up"; so when the broker reports records past the position, this waits up to
        a couple of seconds for them instead of answering empty.
        """
        with self._lock:
            consumer = self._consumer(topic, group)
            batch = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
            if not batch and timeout_s <= 0 and self._behind(consumer):
                deadline = time.monotonic() + _CATCH_UP_WAIT_S
                while not batch and time.monotonic() < deadline:
                    batch = consumer.poll(timeout_ms=100, max_records=max_records)
            records: list[Record] = []
            for tp, messages in batch.items():
                logical = self._logical[tp.topic]
                for m in messages:
                    key = m.key.decode("utf-8", "replace") if m.key is not None else ""
                    records.append(Record(logical, tp.partition, m.offset, key, bytes(m.value or b"")))
            return records

    def commit(self, group: str, records: list[Record]) -> None:
        """Commit offset+1 of the last record per partition; never moves a committed offset back."""
        if not records:
            return
        by_topic: dict[str, dict[TopicPartition, int]] = {}
        for record in records:
            tp = TopicPartition(self.kafka_topic(record.topic), record.partition)
            offsets = by_topic.setdefault(record.topic, {})
            offsets[tp] = max(offsets.get(tp, -1), record.offset + 1)
        with self._lock:
            for topic, offsets in by_topic.items():
                consumer = self._consumer(topic, group)
                ahead = {
                    tp: OffsetAndMetadata(nxt, "", -1)
                    for tp, nxt in offsets.items()
                    if nxt > self._committed.get((group, tp), -1)
                }
                if not ahead:
                    continue
                retrying(consumer.commit, offsets=ahead)
                for tp, om in ahead.items():
                    self._committed[(group, tp)] = om.offset

    def rewind(self, topic: str, group: str) -> None:
        """Seek every partition back to the group's committed offset (or the beginning)."""
        with self._lock:
            consumer = self._consumers.get((topic, group))
            if consumer is None:
                return  # a new consumer starts at the committed offsets anyway
            for tp in consumer.assignment():
                committed = retrying(consumer.committed, tp)
                if committed is None or committed < 0:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, committed)

    def lag(self, topic: str, group: str) -> int:
        """End offsets minus committed offsets; a partition never committed counts from its start."""
        kafka_topic = self.kafka_topic(topic)
        tps = [TopicPartition(kafka_topic, p) for p in self._partitions[kafka_topic]]
        with self._lock:
            committed = retrying(self._admin.list_group_offsets, {group: tps}).get(group, {})
            ends = retrying(self._admin.list_partition_offsets, {tp: OffsetSpec.LATEST for tp in tps})
            missing = [tp for tp in tps if committed.get(tp) is None or committed[tp].offset < 0]
            starts = (
                retrying(self._admin.list_partition_offsets, {tp: OffsetSpec.EARLIEST for tp in missing})
                if missing
                else {}
            )
        total = 0
        for tp in tps:
            start = starts[tp].offset if tp in starts else committed[tp].offset
            total += max(0, ends[tp].offset - start)
        return total

    def close(self) -> None:
        with self._lock:
            for consumer in self._consumers.values():
                try:
                    consumer.close(autocommit=False)
                except Exception:  # best effort: closing must not mask the caller's error
                    log.debug("consumer close failed", exc_info=True)
            self._consumers.clear()
        try:
            self._producer.flush()
        finally:
            self._producer.close()
            self._admin.close()
