"""Publishing to Kafka with the acknowledgement the event-log port promises.

kafka-python's producer answers `flush()` even when sends failed, keeps one list of sends for every
thread, and can block far past its own timeouts while the broker is away. `AckedProducer` is the part
of streams/kafka_log.py that turns that into the port's promise: a thread's `flush` returns only
when every record *it* sent was acknowledged by all in-sync replicas, or raises KafkaUnavailable
within a bound, so a publisher never records as published what the broker does not hold.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from schemas.errors import StoreUnavailable
from streams.kafka_admin import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

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
_LINGER_MS = 5


class KafkaUnavailable(StoreUnavailable):
    """The broker cannot be reached, or did not acknowledge records: one line, exit 1 on the CLI."""


def describe(exc: BaseException) -> str:
    """`Type: message` once (kafka-python's messages often start with their class name already)."""
    text = str(exc).strip()
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


class _Sends(threading.local):
    """A thread's sends since its last flush: a fresh list in each thread (AckedProducer._pending)."""

    def __init__(self) -> None:
        self.pending: list[Any] = []


class AckedProducer:
    """An idempotent producer whose `flush` checks every send of the calling thread.

    Durability: the producer waits for every in-sync replica (`acks="all"`), retries transient
    errors and is idempotent, so a retry neither duplicates nor reorders a record within its
    partition. Raises KafkaError when the producer cannot be built (the caller words it).
    """

    def __init__(
        self, bootstrap: str, client_config: dict[str, Any], client_id: str, connect_ms: int, delivery_timeout_s: float
    ) -> None:
        self.bootstrap = bootstrap
        delivery_ms = max(1, int(delivery_timeout_s * 1000))
        self._flush_bound_s = delivery_timeout_s + FLUSH_MARGIN_S
        self._producer = KafkaProducer(
            client_id=f"{client_id}-producer",
            **client_config,
            max_block_ms=connect_ms,  # a send waits this long for metadata, then fails (not 60 s)
            acks="all",
            retries=2**31 - 1,  # bounded by delivery_timeout_ms, as in the Java client
            delivery_timeout_ms=delivery_ms,
            # kafka-python requires delivery >= linger + request timeout: a short delivery bound
            # shortens each request's timeout rather than being refused
            request_timeout_ms=max(1, min(30_000, delivery_ms - _LINGER_MS)),
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,  # idempotence keeps order with up to 5 in flight
            max_request_size=MAX_MESSAGE_BYTES,
            linger_ms=_LINGER_MS,
            compression_type=None,
        )
        self._sends = _Sends()
        self._gave_up = False  # a flush reported unacknowledged records: close() does not wait for them

    def _pending(self) -> list[Any]:
        """This thread's sends since its last flush.

        Per thread because flush() promises the caller that *its* records are durable: with one
        shared list, a concurrent publisher's flush could take (and check) another thread's
        futures, and that thread's own flush would then find nothing to wait for and report
        success for a record the broker never acknowledged (e.g. two webhook pushes at once).
        """
        return self._sends.pending

    def send(self, kafka_topic: str, key: str, value: bytes) -> None:
        """Enqueue one record; raises KafkaUnavailable when no metadata arrives within the connect bound."""
        try:
            future = self._producer.send(kafka_topic, key=key.encode(), value=value)
        except KafkaError as exc:
            raise KafkaUnavailable(
                f"Kafka at {self.bootstrap} did not accept a record for {kafka_topic} ({describe(exc)});"
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
                f" ({describe(first)}); they are not recorded as published: run the command"
                " again once the broker is back"
            ) from first

    def send_and_wait(self, records: Sequence[tuple[str, str, int | None]]) -> list[int]:
        """Null-value records (kafka_topic, key, partition or None), durable when this returns; the
        partition each landed in. Tombstones and roll markers: they bypass the per-thread sends, so a
        publisher's own flush neither waits for them nor reports them."""
        futures = [
            self._producer.send(topic, key=key.encode(), value=None, partition=partition)
            for topic, key, partition in records
        ]
        if not futures:
            return []
        deadline = self._flush_producer()
        return [int(future.get(timeout=max(0.0, deadline - time.monotonic())).partition) for future in futures]

    def _flush_producer(self) -> float:
        """Flush the producer within the bound (see FLUSH_MARGIN_S); returns the deadline to check futures by."""
        deadline = time.monotonic() + self._flush_bound_s
        with contextlib.suppress(KafkaError):  # a timeout: the futures say which records were acknowledged
            self._producer.flush(timeout=self._flush_bound_s)
        return deadline

    def close(self) -> None:
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
