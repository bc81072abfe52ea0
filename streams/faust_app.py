"""The cluster profile's indexer: a Faust worker, one agent per topic, applying events through the sink.

Why it is built this way:

* Priority. ACL, deletion and document events travel on three topics, each with its own agent,
  so a revocation never waits behind a document backlog: Faust feeds each agent from its own
  buffer, and a full buffer pauses only its own partitions (it does not block delivery to the
  other agents).
* Ordering. A document's events share a key (`tenant/doc_id`) hence a partition; the documents
  agent runs with `concurrency=1`, so one partition's upserts are applied one after the other, in
  order. The ACL and deletion agents run REVOCATION_CONCURRENCY actors: a revocation must not wait
  for the store round trips of the ones before it, and order within a key does not matter there
  (every write is versioned: an older event that loses the race is stale and changes nothing).
  All three topics have the same partition count and Faust's assignor co-partitions them, so the
  ACL, deletion and document partitions of a key belong to the same worker; a per-key lock in
  that worker keeps any two agents from interleaving the read-modify-write of one document's state.
* Threads by priority (streams.appliers, with what else the agents share to apply an event).
  Store round trips and embedding run in threads; ACL changes and deletions have a pool of their
  own (ACCESS_THREADS, enough for every actor of both topics), the documents agent a single thread
  whose OS priority is lowered (DOCUMENTS_NICE), and purges the loop's default pool. On a busy
  machine the shared default pool (6 threads on 2 cores) held revocations in its queue behind
  purges and the document being embedded, and the embedding took the CPU the appliers' round
  trips needed: 12 s p50 from publish to the stores with a load average of 3-5.
* Effective first. A second agent on the ACL and deletion topics writes each event's deny-set
  entry as soon as it is fetched (streams.tracking), so queries stop showing the document before
  any store changed, whatever the appliers and the document backlog are doing. Ahead of it, a Kafka
  reader of its own (streams.deny_reader: its own consumer and thread, the partitions Faust assigned
  here, committing nothing) writes the same entries without Faust's loop on the way: under load the
  agent got its records 0.75 s p99 after publish. A timer retries the entries' clears that failed
  (streams.deny_clears).
* Content leaves the log. After a deletion the worker appends an erase marker to the documents
  topic; the documents agent turns it into tombstones once it reaches it, and compaction removes
  the document's records from the broker's files (streams.erasure). A timer purges the stores'
  files physically (ragsync.purge).
* At-least-once. The agents iterate a `noack()` stream and ack an event explicitly, only after
  `IndexSink.apply` returned (every store confirmed) or, for an invalid event, after the dead
  letter was acknowledged by Kafka. A plain `async for` would ack in a `finally` block, i.e.
  also when the agent is cancelled in the middle of a write (shutdown, rebalance); Faust commits
  only contiguously acked offsets, so an unfinished event is redelivered. A store error is retried
  in place with exponential backoff, forever: this agent's topic waits, the other agents keep
  flowing, and nothing is acked before it is durable. Redelivery is harmless: the sink's writes
  are idempotent and versioned. No exactly-once mode: it has open duplicate/reprocessing bugs
  upstream and the sink does not need it.
* Scale-out. The app id is the consumer group: several workers with the same id share the
  partitions. By default it is derived from the topic prefix (`<prefix>indexer`), so one prefix
  is one deployment.

The worker always reads Kafka; its stores are whatever `ragsync.cluster_worker.run_worker` has
`ragsync.wiring.build(settings)` wire for the profile: Elasticsearch/Qdrant/Redis in the cluster
profile, or the embedded SQLite stores (multi-process safe in WAL mode; keep dense embeddings off
when several workers share one home). This module takes plain arguments (`Deployment`): it never
reads the settings, and imports nothing of ragsync/.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faust

from schemas.events import DeletePayload, Event
from schemas.retry import retry_async
from streams.appliers import ACCESS_THREADS as ACCESS_THREADS
from streams.appliers import DOCUMENTS_NICE as DOCUMENTS_NICE
from streams.appliers import REVOCATION_CONCURRENCY
from streams.appliers import Indexer as Indexer
from streams.appliers import KeyedLocks as KeyedLocks
from streams.appliers import lower_priority as lower_priority
from streams.deny_reader import DenyReader
from streams.erasure import ROLL_KEY, EraseMarker, marker_value, parse_marker
from streams.kafka_admin import MAX_MESSAGE_BYTES, ROLL_CHECK_S, topic_names
from streams.ports import (
    EVENT_TOPICS,
    TOPIC_ACL,
    TOPIC_DELETIONS,
    TOPIC_DLQ,
    TOPIC_DOCUMENTS,
    Record,
    dead_letter_value,
)

log = logging.getLogger(__name__)

POLL_RECORDS = 100
"""Records handed out per turn of Faust's fetch loop."""


DENY_BATCH = 500
"""Records whose deny entries one write takes at most."""

DENY_WINDOW_S = 0.005
"""How long the deny agent waits for more records before writing what it has: the latency it adds."""


def stream_buffer_size(partitions: int) -> int:
    """Events an agent may queue so that a full document queue never stalls the ACL and deletion agents.

    Faust's fetch loop delivers each turn's records to the agents' queues. When a queue passes
    1/1.25 of its size ("high pressure") Faust stops fetching the partition that delivered, but
    the records already handed out still go in; only a *completely* full queue blocks, and then
    it blocks the whole loop, every agent included. A turn holds at most POLL_RECORDS records and
    each turn past the mark pauses at least one more partition, so a queue overshoots the mark by
    less than partitions x POLL_RECORDS: size > 5 x that keeps it from ever filling up. The floor
    keeps enough queued work to cover the loop's one-second wait while a paused topic drains.
    """
    return max(1024, 5 * partitions * POLL_RECORDS + POLL_RECORDS)


DEAD_LETTER_KEEP_BYTES = 1024 * 1024
"""A dead letter larger than a record may be is cut to this much of the original value."""


def default_app_id(topic_prefix: str) -> str:
    """One topic prefix = one deployment = one consumer group."""
    return f"{topic_prefix}indexer"


@dataclass(frozen=True)
class Deployment:
    """Where the worker's app runs: the broker, the topics' prefix and partition count, Faust's data
    folder (ragsync.cluster_worker takes them from the settings)."""

    bootstrap: str
    topic_prefix: str
    partitions: int
    datadir: Path


def broker_url(bootstrap: str) -> str:
    """kafka-python takes `a:9092,b:9092`; Faust wants `kafka://a:9092;b:9092`."""
    hosts = [h.strip() for h in bootstrap.replace(";", ",").split(",") if h.strip()]
    return "kafka://" + ";".join(hosts)


def bounded_dead_letter(record: Record, reason: str) -> bytes:
    """The dead letter, cut down when the original value would make it larger than Kafka accepts."""
    value = dead_letter_value(record, reason)
    if len(value) <= MAX_MESSAGE_BYTES - 64 * 1024:
        return value
    cut = replace(record, value=record.value[:DEAD_LETTER_KEEP_BYTES])
    return dead_letter_value(cut, f"{reason} (value truncated from {len(record.value)} bytes)")


def build_app(
    deployment: Deployment,
    indexer: Indexer,
    *,
    app_id: str | None = None,
    partitions: int | None = None,
    deny_reader: bool = True,
) -> Any:
    """The Faust app with one agent per event topic; agents process and ack through `indexer`.

    `partitions` is the largest partition count of the event topics (they may predate the setting).
    `deny_reader`: the deny entries are also written by a Kafka reader of their own
    (streams.deny_reader), ahead of Faust's loop; the app's `deny_reader` attribute holds it (or
    None), and `close_deny_reader(app)` stops it once the worker stopped.
    """
    buffer = stream_buffer_size(max(partitions or 0, deployment.partitions))
    kafka_topics = topic_names(deployment.topic_prefix)
    group = app_id or default_app_id(deployment.topic_prefix)
    app: Any = faust.App(  # Any: it also carries `deny_reader`
        group,
        broker=broker_url(deployment.bootstrap),
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=deployment.partitions,
        topic_replication_factor=1,
        processing_guarantee="at_least_once",
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        # A crashed worker's partitions move to the others once its session expires: Faust's default
        # of 60 s would stall them that long. Sink calls run in threads, so heartbeats stay on time.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=3.0,
        producer_acks=-1,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES + 1024 * 1024,
        stream_buffer_maxsize=buffer,
        broker_max_poll_records=POLL_RECORDS,
        web_enabled=False,
        datadir=str(deployment.datadir),
    )

    def topic(logical: str) -> Any:
        return app.topic(
            kafka_topics[logical],
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=deployment.partitions,
        )

    topics = {logical: topic(logical) for logical in (*EVENT_TOPICS, TOPIC_DLQ)}
    dlq = topics[TOPIC_DLQ]

    async def dead_letter(record: Record, reason: str) -> None:
        """Send and wait for the broker's ack (force=True: not deferred to the commit)."""

        async def send() -> None:
            pending = await dlq.send(key=record.key.encode(), value=bounded_dead_letter(record, reason), force=True)
            await pending

        await retry_async(
            send,
            indexer.backoff(),
            on_retry=lambda _, delay, __: log.exception(
                "dead-lettering %s@%d failed, retrying in %.1fs", record.topic, record.offset, delay
            ),
        )

    documents = topics[TOPIC_DOCUMENTS]

    async def send_durably(target: Any, key: bytes, value: bytes | None, partition: int | None = None) -> int:
        """Send one record and wait for the broker's ack; returns its partition."""

        async def send() -> int:
            pending = await target.send(key=key, value=value, partition=partition, force=True)
            metadata = await pending
            return int(metadata.partition)

        return await retry_async(
            send,
            indexer.backoff(),
            on_retry=lambda _, delay, __: log.exception(
                "send to %s failed, retrying in %.1fs", target.get_topic_name(), delay
            ),
        )

    async def erase(marker: EraseMarker) -> None:
        """The documents consumer reached an erase marker: everything of the key before it is applied,
        so the tombstones can go (streams.erasure); compaction then drops the earlier records."""
        key = f"{marker.tenant}/{marker.doc_id}".encode()
        targets = [(TOPIC_DOCUMENTS, documents)] + ([(TOPIC_DLQ, dlq)] if marker.dead_letters else [])
        for logical, target in targets:
            partition = await send_durably(target, key, None)
            indexer.rolls.tombstoned(logical, partition)

    background: set[asyncio.Future[None]] = set()

    def make_agent(logical: str) -> Callable[[Any], Any]:
        async def agent(stream: Any) -> None:
            manual = stream.noack()
            async for event in manual.events():
                record = _record(logical, event.message)
                marker = parse_marker(record.key, record.value) if logical == TOPIC_DOCUMENTS else None
                if marker is not None:
                    await erase(marker)
                    await manual.ack(event)
                    continue
                async with indexer.locks.hold(record.key):
                    reason, _, decoded = await indexer.apply_tracked(record)
                if reason is not None:
                    await dead_letter(record, reason)
                if logical == TOPIC_DELETIONS and isinstance(decoded, Event):
                    # The content leaves the log once the documents consumer passes this marker.
                    await send_durably(documents, record.key.encode(), marker_value(decoded.version))
                    if isinstance(decoded.payload, DeletePayload) and decoded.payload.erase:
                        background.add(asyncio.ensure_future(indexer.maintenance(now=True)))
                        background_done = {t for t in background if t.done()}
                        background.difference_update(background_done)
                await manual.ack(event)

        agent.__name__ = agent.__qualname__ = f"apply_{logical}"
        return agent

    def make_deny_agent(logical: str) -> Callable[[Any], Any]:
        """A second subscriber of the ACL or deletion topic that only writes the deny entry.

        Faust hands every message to each agent of its topic and commits it once all acked, so
        this agent runs ahead of the one applying the events: a revocation is effective as soon as
        it is fetched, whatever the appliers (and a document backlog) are doing.
        """

        async def agent(stream: Any) -> None:
            # What arrived within DENY_WINDOW_S goes in one write: one event at a time, each with its
            # thread hop and round trip, the deny path of a loaded worker queued (1.9 s p99 at a
            # load of 25, against 0.05 s p50). `take_events` acks each batch once this body is done.
            async for events in stream.take_events(DENY_BATCH, within=DENY_WINDOW_S):
                await indexer.deny_many([_record(logical, e.message) for e in events])

        agent.__name__ = agent.__qualname__ = f"deny_{logical}"
        return agent

    for logical in EVENT_TOPICS:
        actors = 1 if logical == TOPIC_DOCUMENTS else REVOCATION_CONCURRENCY
        app.agent(topics[logical], name=f"ragsync.apply_{logical}", concurrency=actors)(make_agent(logical))
    for logical in (TOPIC_ACL, TOPIC_DELETIONS):
        app.agent(topics[logical], name=f"ragsync.deny_{logical}", concurrency=1)(make_deny_agent(logical))
    app.deny_reader = None
    tracker = indexer.tracker
    if deny_reader and tracker is not None:
        reader = DenyReader(
            deployment.bootstrap,
            group,
            {kafka_topics[logical]: logical for logical in (TOPIC_ACL, TOPIC_DELETIONS)},
            tracker.consumed_many,
            max_records=DENY_BATCH,
        )
        app.deny_reader = reader

        # Faust's rebalance signals carry this worker's assignment (the whole of it) and what it lost.
        def follow_assigned(_sender: Any, *args: Any, signal: Any, **_: Any) -> None:
            reader.assign((tp.topic, tp.partition) for tp in args[0])

        def follow_revoked(_sender: Any, *args: Any, signal: Any, **_: Any) -> None:
            reader.revoke((tp.topic, tp.partition) for tp in args[0])

        app.on_partitions_assigned.connect(follow_assigned)
        app.on_partitions_revoked.connect(follow_revoked)

    async def report() -> None:
        log.info("indexer: %s", indexer.summary())

    async def roll() -> None:
        """Roll markers for partitions that got tombstones a segment.ms ago (streams.erasure)."""
        for logical, partition in indexer.rolls.due():
            target = documents if logical == TOPIC_DOCUMENTS else dlq
            await send_durably(target, ROLL_KEY.encode(), None, partition)

    async def maintain() -> None:
        await indexer.maintenance()

    async def clears() -> None:
        await indexer.retry_clears()

    app.timer(30.0)(report)
    app.timer(ROLL_CHECK_S)(roll)
    app.timer(MAINTENANCE_INTERVAL_S)(maintain)
    app.timer(CLEAR_RETRY_S)(clears)
    return app


def close_deny_reader(app: Any) -> None:
    """Stop the app's deny reader, if it has one (the worker stopped)."""
    reader: DenyReader | None = app.deny_reader
    if reader is not None:
        reader.close()


MAINTENANCE_INTERVAL_S = 10.0
"""How often the worker looks for deletions to purge physically (the hook purges only when a deletion
is newer than the stores' last purges, ragsync.purge)."""

CLEAR_RETRY_S = 1.0
"""How often the worker looks for deny-set clears to retry (streams.deny_clears; confirmations retry
them too, so this is for the quiet after the last event); while none waits, a tick costs no call. Not
the maintenance timer: a purge can hold that one for a lease interval."""


def _record(logical: str, message: Any) -> Record:
    key = message.key.decode("utf-8", "replace") if message.key is not None else ""
    stamp = int(message.timestamp * 1000) if message.timestamp else None
    return Record(logical, message.partition, message.offset, key, bytes(message.value or b""), stamp)
