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

The topics, their limits and their compaction are set up by streams/kafka_admin.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from indexer.ports import PurgeDetails, Removal, StoreUnavailable
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
from streams.kafka_remnants import key_partition, valued_records
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS, Record, topic_for

log = logging.getLogger(__name__)

_CATCH_UP_WAIT_S = 2.0
"""How long a `timeout_s=0` poll may wait when the broker still holds records past the position."""


CONNECT_TIMEOUT_S = 10.0
"""Default bound on reaching the broker (bootstrap, and a send's wait for metadata). kafka-python's own
default is 30 s with reconnect backoffs growing to 30 s, so a command started while the broker is
down answered after about 35 s; a user expects a one-line error within seconds."""
DELIVERY_TIMEOUT_S = 120.0
"""Default bound on one record's acknowledgement, retries included (the Java client's default): long
enough to ride out a broker restart, after which flush() reports the records that were not acked."""
FLUSH_MARGIN_S = 5.0
"""flush() stops waiting this long after the delivery bound. kafka-python's idempotent producer does
not expire its batches while it has no producer id (the broker went away mid-request and the epoch
must be bumped): measured here, a sync with a 3 s delivery bound still waited after 25 s with the
broker down. Past the bound the records count as unacknowledged, whatever the producer does later."""
RECONNECT_BACKOFF_MAX_MS = 1_000
"""Reconnect attempts back off to at most 1 s (kafka-python: 30 s), so a restarted broker is found
again within a second of its return rather than after a half-minute sleep."""


def _describe(exc: BaseException) -> str:
    """`Type: message` once (kafka-python's messages often start with their class name already)."""
    text = str(exc).strip()
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


class KafkaUnavailable(StoreUnavailable):
    """The broker cannot be reached, or did not acknowledge records: one line, exit 1 on the CLI."""


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
        delivery_ms = max(1, int(delivery_timeout_s * 1000))
        self._flush_bound_s = delivery_timeout_s + FLUSH_MARGIN_S
        linger_ms = 5
        try:
            self._admin = KafkaAdminClient(client_id=f"{client_id}-admin", **self._client_config)
        except KafkaError as exc:
            raise self._unreachable(exc, connect_timeout_s) from exc
        try:
            self._partitions = ensure_topics(self._admin, topic_prefix, partitions)
            self._producer = KafkaProducer(
                client_id=f"{client_id}-producer",
                **self._client_config,
                max_block_ms=connect_ms,  # a send waits this long for metadata, then fails (not 60 s)
                acks="all",
                retries=2**31 - 1,  # bounded by delivery_timeout_ms, as in the Java client
                delivery_timeout_ms=delivery_ms,
                # kafka-python requires delivery >= linger + request timeout: a short delivery bound
                # shortens each request's timeout rather than being refused
                request_timeout_ms=max(1, min(30_000, delivery_ms - linger_ms)),
                enable_idempotence=True,
                max_in_flight_requests_per_connection=5,  # idempotence keeps order with up to 5 in flight
                max_request_size=MAX_MESSAGE_BYTES,
                linger_ms=linger_ms,
                compression_type=None,
            )
        except KafkaError as exc:
            self._admin.close()
            raise self._unreachable(exc, connect_timeout_s) from exc
        except BaseException:
            self._admin.close()
            raise
        self.rolls = RollSchedule(COMPACTION_SEGMENT_MS)
        self._consumers: dict[tuple[str, str], Any] = {}
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self._sends = threading.local()
        self._gave_up = False  # a flush reported unacknowledged records: close() does not wait for them
        self._lock = threading.RLock()

    def _unreachable(self, exc: BaseException, timeout_s: float) -> KafkaUnavailable:
        """One line saying what failed, that nothing was published, and which setting bounds the wait."""
        return KafkaUnavailable(
            f"Kafka at {self.bootstrap} is unreachable ({_describe(exc)}; waited up to"
            f" {timeout_s:g}s, kafka_connect_timeout_s); nothing was published: start the broker or"
            " check kafka_bootstrap"
        )

    def _pending(self) -> list[Any]:
        """This thread's sends since its last flush.

        Per thread because flush() promises the caller that *its* records are durable: with one
        shared list, a concurrent publisher's flush could take (and check) another thread's
        futures, and that thread's own flush would then find nothing to wait for and report
        success for a record the broker never acknowledged (e.g. two webhook pushes at once).
        """
        pending: list[Any] | None = getattr(self._sends, "pending", None)
        if pending is None:
            pending = self._sends.pending = []
        return pending

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
        kafka_topic = self.kafka_topic(topic)
        try:
            future = self._producer.send(kafka_topic, key=key.encode(), value=value)
        except KafkaError as exc:
            raise KafkaUnavailable(
                f"Kafka at {self.bootstrap} did not accept a record for {kafka_topic} ({_describe(exc)});"
                " nothing unacknowledged was recorded as published: run the command again"
            ) from exc
        self._pending().append(future)

    def flush(self) -> None:
        """Wait for every send of this thread since its last flush to be acknowledged by all in-sync replicas.

        KafkaProducer.flush() alone returns even when a send failed; the futures carry the
        error, so every one is checked and a failure raises KafkaUnavailable to the publisher,
        who then records none of the batch as published and publishes it again later, under new
        versions (connectors.state.ConnectorState.next_version: a failed record may still have
        reached the log). The wait is bounded by the delivery timeout plus FLUSH_MARGIN_S.
        """
        sends = self._pending()
        pending = list(sends)
        sends.clear()
        if not pending:
            return
        deadline = self._flush_producer()
        failed: list[BaseException] = []
        for future in pending:
            try:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaError as exc:  # failed, expired, or still unacknowledged at the bound
                failed.append(exc)
        if failed:
            self._gave_up = True
            first = failed[0]
            raise KafkaUnavailable(
                f"Kafka at {self.bootstrap} did not acknowledge {len(failed)} of {len(pending)} records"
                f" ({_describe(first)}); they are not recorded as published: run the command"
                " again once the broker is back"
            ) from first

    def _flush_producer(self) -> float:
        """Flush the producer within the bound (see FLUSH_MARGIN_S); returns the deadline to check futures by."""
        deadline = time.monotonic() + self._flush_bound_s
        with contextlib.suppress(KafkaError):  # a timeout: the futures say which records were acknowledged
            self._producer.flush(timeout=self._flush_bound_s)
        return deadline

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
        futures = [(t, self._producer.send(self.kafka_topic(t), key=key.encode(), value=None)) for t in topics]
        deadline = self._flush_producer()
        for topic, future in futures:
            self.rolls.tombstoned(topic, future.get(timeout=max(0.0, deadline - time.monotonic())).partition)

    def roll_due(self) -> int:
        """Send the roll markers that are due, so the tombstones' segments can be compacted."""
        due = self.rolls.due()
        futures = [
            self._producer.send(self.kafka_topic(topic), key=ROLL_KEY.encode(), value=None, partition=partition)
            for topic, partition in due
        ]
        if futures:
            deadline = self._flush_producer()
            for future in futures:
                future.get(timeout=max(0.0, deadline - time.monotonic()))
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
            self._close_producer()
        finally:
            self._admin.close()

    def _close_producer(self) -> None:
        """Close within the flush bound; records still unacknowledged then were reported by flush()
        and recorded nowhere, so dropping them loses nothing the next publish does not send again.

        After a flush that gave up there is nothing to wait for. kafka-python's close() raises when
        its own flush times out, before it stops the sender thread (which then keeps the process
        alive and retries on garbage collection): so on that error the sender is force-closed here,
        which fails the remaining batches, and close() then completes at once.
        """
        timeout = 0.0 if self._gave_up else self._flush_bound_s
        try:
            self._producer.close(timeout=timeout)
        except KafkaError:
            sender = getattr(self._producer, "_sender", None)
            if sender is not None:
                sender.force_close()
                sender.join(self._flush_bound_s)
            try:
                self._producer.close(timeout=0)
            except KafkaError:
                log.warning("Kafka producer did not close cleanly", exc_info=True)
