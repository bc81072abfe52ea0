"""A Kafka reader of its own for the deny path: ACL and deletion records fetched outside Faust's loop.

Why: the worker's Faust agents share one consumer and one event loop. Under load (2 cores, busy
loops, a document backlog) a revocation's record reached the deny agent 0.07 s p50 but 0.75 s p99
after publish (`deny_path_diag`, bench/README.md): Faust's fetch loop, its delivery to the agents'
queues and the loop itself are shared with the appliers, the document backlog and the timers. This
reader has a consumer and a thread of its own, fetching only the ACL and deletion partitions this
worker holds, and writes their deny entries (`Tracker.consumed_many`) the moment they arrive.

What it does not change (every guarantee stays with the Faust agents):

* It commits nothing and joins no group. It reads from the consumer group's committed offsets,
  with the group id only to look them up; the Faust agents still fetch, apply, dead-letter and ack
  every record, and offsets are committed only once they are applied. A record this reader wrote
  an entry for is tracked under its event id, so the Faust deny agent (kept as it was) and the
  applier find it pending and write nothing twice; one this reader reads after the event was
  confirmed adds nothing (`Tracker` remembers confirmed events).
* Malformed records are skipped here (`Tracker.consumed_many` ignores what does not decode); the
  applier sends them to the dead-letter topic as before.
* Fail closed, and only ever earlier: if this reader is slow, stopped or failing, the Faust deny
  agent writes the entries as before. It writes deny entries only, which narrow what queries see.
* It mirrors the partitions Faust assigns to this worker (`assign` / `revoke`, from the app's
  rebalance signals), so with several workers each denies what it applies and confirms.

Takes plain arguments (the broker, the group, the topics' names); reads no settings.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from streams.kafka_admin import MAX_MESSAGE_BYTES
from streams.ports import Record

log = logging.getLogger("streams.faust_app")

POLL_S = 0.1
"""How long one poll waits for records: the longest a new assignment waits to be taken up (a record
that arrives ends the wait at once)."""

FETCH_MAX_WAIT_MS = 100
"""How long the broker holds a fetch with nothing to return (data ends the wait at once)."""

RESTART_S = 1.0
"""After a failure, how long the reader waits before opening a new consumer."""


ConsumerFactory = Callable[[], Any]


class DenyReader:
    """Fetches the assigned ACL and deletion partitions on a thread of its own; hands each poll's
    records to `on_records` (see module)."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: Mapping[str, str],
        on_records: Callable[[list[Record]], None],
        *,
        max_records: int = 500,
        consumer_factory: ConsumerFactory | None = None,
    ) -> None:
        """`topics`: Kafka topic name -> logical topic (streams.ports) of the topics to read."""
        self._topics = dict(topics)
        self._on_records = on_records
        self._max_records = max_records
        self._factory = consumer_factory or (
            lambda: KafkaConsumer(
                bootstrap_servers=bootstrap.replace(";", ","),
                client_id=f"{group}-deny-reader",
                group_id=group,  # to read the group's committed offsets; never joins, never commits
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_partition_fetch_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
                fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            )
        )
        self._lock = threading.Lock()
        self._wanted: set[tuple[str, int]] = set()
        self._changed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.records_read = 0
        """Records handed to `on_records` (tests and diagnostics)."""

    # ---- the partitions this worker holds (called from Faust's rebalance signals) -----------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """This worker's whole assignment: its ACL and deletion partitions are read from now on."""
        mine = {(t, p) for t, p in partitions if t in self._topics}
        with self._lock:
            self._wanted = mine
            self._changed = True
        self._start()

    def revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions this worker no longer holds: no longer read."""
        gone = {(t, p) for t, p in partitions}
        with self._lock:
            self._wanted = self._wanted - gone
            self._changed = True

    def assigned(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._wanted)

    # ---- the thread -------------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="ragsync-deny-reader", daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        log.info("deny reader stopped: %d records read", self.records_read)

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer: Any = None
            try:
                consumer = self._factory()
                with self._lock:
                    self._changed = True  # a new consumer starts with no assignment
                while not self._stop.is_set():
                    self._follow_assignment(consumer)
                    self._read(consumer)
            except Exception:
                log.exception("deny reader failed; the Faust deny agent covers meanwhile, restarting")
                self._stop.wait(RESTART_S)
            finally:
                if consumer is not None:
                    try:
                        consumer.close(autocommit=False)
                    except Exception:
                        log.debug("closing the deny reader's consumer failed", exc_info=True)

    def _follow_assignment(self, consumer: Any) -> None:
        with self._lock:
            if not self._changed:
                return
            wanted, self._changed = set(self._wanted), False
        tps = sorted(TopicPartition(t, p) for t, p in wanted)
        held = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        consumer.assign(tps)
        for tp in tps:
            if (tp.topic, tp.partition) in held:
                continue  # kept: its position goes on
            committed = consumer.committed(tp)
            if committed is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)

    def _read(self, consumer: Any) -> None:
        if not consumer.assignment():
            self._stop.wait(POLL_S)
            return
        batch = consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=self._max_records)
        records = [
            _record(self._topics[tp.topic], tp.partition, message)
            for tp, messages in batch.items()
            for message in messages
        ]
        if records:
            self.records_read += len(records)
            self._on_records(records)


def _record(logical: str, partition: int, message: Any) -> Record:
    key = message.key.decode("utf-8", "replace") if message.key is not None else ""
    stamp = message.timestamp if isinstance(message.timestamp, int) and message.timestamp >= 0 else None
    return Record(logical, partition, message.offset, key, bytes(message.value or b""), stamp)
