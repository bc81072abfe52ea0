"""What a deleted document left in the log, read from the broker now: the remnant probe behind a
deletion certificate (ragsync.certificate) and `audit`.

A key's records all sit in one partition (the producer's murmur2 partitioner), so the probe reads
that partition from start to end with its own short-lived consumer, outside every consumer group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2

from streams.erasure import parse_marker
from streams.kafka_admin import MAX_MESSAGE_BYTES


def _version_of(value: bytes) -> int | None:
    try:
        version = json.loads(value).get("version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, int) else None


def key_partition(topic: str, partitions: Sequence[int], key: str) -> TopicPartition:
    """The partition the default partitioner sends the key to."""
    return TopicPartition(topic, partitions[(murmur2(key.encode()) & 0x7FFFFFFF) % len(partitions)])


def valued_records(
    client_config: Mapping[str, Any], tp: TopicPartition, key: str, up_to_version: int | None, *, versioned: bool
) -> int:
    """Records of the key still carrying a value in the partition (erase markers not counted).

    Records after the key's last tombstone (a later re-creation) count only up to `up_to_version`
    (`versioned`: the values carry the document's version); before it, every valued record is the
    deleted document's, on disk until compaction runs.
    """
    consumer = KafkaConsumer(
        **client_config,
        enable_auto_commit=False,
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
        fetch_max_bytes=4 * MAX_MESSAGE_BYTES,
    )
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        valued: list[int | None] = []  # per record of the key with a value: its version when known
        last_tombstone = -1
        while consumer.position(tp) < end:
            for messages in consumer.poll(timeout_ms=1000).values():
                for m in messages:
                    if m.offset >= end or m.key is None or m.key.decode("utf-8", "replace") != key:
                        continue
                    if m.value is None:
                        last_tombstone = len(valued)
                    elif parse_marker(key, m.value) is None:
                        valued.append(_version_of(m.value) if versioned else None)
        return max(last_tombstone, 0) + sum(
            1 for v in valued[max(last_tombstone, 0) :] if up_to_version is None or v is None or v <= up_to_version
        )
    finally:
        consumer.close(autocommit=False)
