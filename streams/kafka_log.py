"""The cluster event log: Kafka through kafka-python, behind the same port as the SQLite log.

Durability is the producer's (streams/kafka_producer.py: every in-sync replica acknowledges, a
thread's flush checks its own sends). The record key is `tenant/doc_id`, so every event of one document lands in one
partition and is consumed in the order it was published.

Consumption mirrors the SQLite log exactly: one consumer per (topic, group) that owns *every*
partition of the topic (manual assignment, no group membership). A group rebalance would
silently reset an uncommitted position to the committed one, and joining costs seconds; the
port promises neither. Sharing partitions between processes is the Faust worker's job
(streams/faust_app.py), which uses its own consumer group. Offsets are committed explicitly,
only for records the caller applied; nothing is ever auto-committed.

The topics, their limits and their compaction are set up by streams/kafka_admin.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from indexer.ports import PurgeDetails, Removal
from schemas.events import Event
from streams.erasure import ROLL_KEY, RollSchedule, marker_value
from streams.kafka_admin import (
    COMPACTION_SEGMENT_MS,
    ERASE_BOUND_S,
    LOGICAL_TOPICS,
    MAX_MESSAGE_BYTES,
    ensure_topics,
    retrying,
    topic_names,
)
from streams.kafka_producer import (
    CONNECT_TIMEOUT_S,
    DELIVERY_TIMEOUT_S,
    RECONNECT_BACKOFF_MAX_MS,
    AckedProducer,
    describe,
)
from streams.kafka_producer import KafkaUnavailable as KafkaUnavailable  # re-export
from streams.kafka_remnants import key_partition, valued_records
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS, Record, topic_for

log = logging.getLogger(__name__)

_CATCH_UP_WAIT_S = 2.0
"""How long a `timeout_s=0` poll may wait when the broker still holds records past the position."""


class KafkaEventLog:
    """EventLog over Kafka. Thread-safe for publishing; poll/commit/rewind are serialised by a lock."""

    name = "kafka"
    removal: Removal = "compaction"

    def __init__(
        self,
        bootstrap: str,
        *,
        topic_prefix: str = "ragsync.",
        partitions: int = 3,
        client_id: str = "ragsync",
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        delivery_timeout_s: float = DELIVERY_TIMEOUT_S,
    ) -> None:
        """Connects at once: a broker that cannot be reached within `connect_timeout_s` raises
        KafkaUnavailable here, before any source is scanned, so nothing is published or recorded."""
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.client_id = client_id
        self._topics = topic_names(topic_prefix)
        self._logical = {kafka_name: logical for logical, kafka_name in self._topics.items()}
        connect_ms = max(1, int(connect_timeout_s * 1000))
        self._client_config: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "bootstrap_timeout_ms": connect_ms,
            "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
        }
        try:
            self._admin = KafkaAdminClient(client_id=f"{client_id}-admin", **self._client_config)
        except KafkaError as exc:
            raise self._unreachable(exc, connect_timeout_s) from exc
        try:
            self._partitions = ensure_topics(self._admin, topic_prefix, partitions)
            self._producer = AckedProducer(bootstrap, self._client_config, client_id, connect_ms, delivery_timeout_s)
        except KafkaError as exc:
            self._admin.close()
            raise self._unreachable(exc, connect_timeout_s) from exc
        except BaseException:
            self._admin.close()
            raise
        self.rolls = RollSchedule(COMPACTION_SEGMENT_MS)
        self._consumers: dict[tuple[str, str], Any] = {}
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self._lock = threading.RLock()

    def _unreachable(self, exc: BaseException, timeout_s: float) -> KafkaUnavailable:
        """One line saying what failed, that nothing was published, and which setting bounds the wait."""
        return KafkaUnavailable(
            f"Kafka at {self.bootstrap} is unreachable ({describe(exc)}; waited up to"
            f" {timeout_s:g}s, kafka_connect_timeout_s); nothing was published: start the broker or"
            " check kafka_bootstrap"
        )

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
        """Enqueue one record; raises KafkaUnavailable when no metadata arrives within the connect bound."""
        self._producer.send(self.kafka_topic(topic), key, value)

    def flush(self) -> None:
        """Every record this thread published since its last flush is acknowledged, or KafkaUnavailable
        (AckedProducer.flush): a publisher records as published only what the broker holds."""
        self._producer.flush()

    # ---- erasure (see streams.erasure) ---------------------------------------------------------

    def erase_document(
        self,
        tenant: str,
        doc_id: str,
        up_to_version: int | None,
        *,
        dead_letters: bool = True,
        published_by_ms: int | None = None,
    ) -> int:
        """Append an erase marker to the documents topic; its consumer appends the tombstones.

        Every record of the key before the tombstone goes at compaction, whatever its version, so
        `published_by_ms` (the SQLite log's bound for an erasure) is what the marker's place already
        does here. Returns 0: nothing is erased yet when this returns (records cannot be rewritten).
        """
        self.publish_raw(TOPIC_DOCUMENTS, f"{tenant}/{doc_id}", marker_value(up_to_version, dead_letters))
        self.flush()
        return 0

    def compact_document(self, tenant: str, doc_id: str, below_version: int) -> int:
        """Nothing to do: the broker compacts the documents topic by key on its own (TOPIC_CONFIGS)."""
        return 0

    @property
    def journal(self) -> None:
        """No journal: the Faust worker's consumer group commits offsets in the broker, nothing beside them."""
        return None

    def tombstone(self, key: str, *, dead_letters: bool = True) -> None:
        """Null-value records of the key on the compacted topics; durable when this returns."""
        topics = [TOPIC_DOCUMENTS, TOPIC_DLQ] if dead_letters else [TOPIC_DOCUMENTS]
        landed = self._producer.send_and_wait([(self.kafka_topic(t), key, None) for t in topics])
        for topic, partition in zip(topics, landed, strict=True):
            self.rolls.tombstoned(topic, partition)

    def roll_due(self) -> int:
        """Send the roll markers that are due, so the tombstones' segments can be compacted."""
        due = self.rolls.due()
        self._producer.send_and_wait([(self.kafka_topic(topic), ROLL_KEY, partition) for topic, partition in due])
        return len(due)

    def remnants(self, tenant: str, doc_id: str, up_to_version: int | None = None) -> dict[str, Any]:
        """Records of the key still carrying a value in the documents and dlq topics, read now from the
        broker (the key's partition, start to end): what a deletion certificate reports.

        Records after the document's tombstone (a later re-creation) are not counted, nor are erase
        markers. Before compaction ran (see ERASE_BOUND_S) the earlier records are still there.
        """
        key = f"{tenant}/{doc_id}"
        out: dict[str, Any] = {"compaction_bound_s": ERASE_BOUND_S}
        for logical in (TOPIC_DOCUMENTS, TOPIC_DLQ):
            kafka_topic = self.kafka_topic(logical)
            out[logical] = valued_records(
                {**self._client_config, "client_id": f"{self.client_id}-audit"},
                key_partition(kafka_topic, self._partitions[kafka_topic], key),
                key,
                up_to_version,
                versioned=logical == TOPIC_DOCUMENTS,
            )
        return out

    # ---- consuming ---------------------------------------------------------------------------

    def _consumer(self, topic: str, group: str) -> Any:
        key = (topic, group)
        consumer = self._consumers.get(key)
        if consumer is None:
            kafka_topic = self.kafka_topic(topic)
            consumer = KafkaConsumer(
                **self._client_config,
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
                    stamp = m.timestamp if isinstance(m.timestamp, int) and m.timestamp >= 0 else None
                    records.append(Record(logical, tp.partition, m.offset, key, bytes(m.value or b""), stamp))
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

    def dead_letters(self) -> int:
        """Dead letters ever written: the dlq topic's end offsets, summed over its partitions."""
        kafka_topic = self.kafka_topic(TOPIC_DLQ)
        tps = [TopicPartition(kafka_topic, p) for p in self._partitions[kafka_topic]]
        with self._lock:
            ends = retrying(self._admin.list_partition_offsets, {tp: OffsetSpec.LATEST for tp in tps})
        return sum(int(ends[tp].offset) for tp in tps)

    def one_transaction(self) -> AbstractContextManager[None]:
        """Nothing to group: every record is the broker's once acknowledged (see EventLog.one_transaction)."""
        return contextlib.nullcontext()

    def purge(self) -> PurgeDetails:
        """Nothing of ours to run: the broker's cleaner compacts erased records out (see `removal`)."""
        return {}

    def close(self) -> None:
        with self._lock:
            for consumer in self._consumers.values():
                try:
                    consumer.close(autocommit=False)
                except Exception:  # best effort: closing must not mask the caller's error
                    log.debug("consumer close failed", exc_info=True)
            self._consumers.clear()
        try:
            self._producer.close()
        finally:
            self._admin.close()
