"""Kafka topic administration: the four topics, their limits and the compaction that makes an erased
document leave the broker's files, and retrying the admin calls that fail while a broker settles.

The log (streams/kafka_log.py) and the Faust worker (streams/faust_app.py) both create the topics
here before they use them, so either may start first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kafka.errors import KafkaError

from schemas.retry import Backoff, retry
from streams.ports import TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DLQ, TOPIC_DOCUMENTS

log = logging.getLogger(__name__)
T = TypeVar("T")

LOGICAL_TOPICS = (TOPIC_DOCUMENTS, TOPIC_ACL, TOPIC_DELETIONS, TOPIC_DLQ)

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
"""Documents can be large: the producer, the topics and the fetchers all accept 10 MiB records."""

_TOPIC_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES + 64 * 1024
"""The topic limit applies to a whole (compressed) batch with its headers: leave room above one record."""

_TOPIC_ALREADY_EXISTS = 36

_RETRY_FOR_S = 30.0
_RETRY_BACKOFF = Backoff(0.1, 2.0)


def retrying(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)`, retrying retriable Kafka errors (e.g. no group coordinator yet on a
    fresh broker) for up to 30 s: these calls are idempotent, and such errors clear on their own."""
    return retry(
        lambda: call(*args, **kwargs),
        _RETRY_BACKOFF,
        for_s=_RETRY_FOR_S,
        retriable=lambda exc: isinstance(exc, KafkaError) and bool(exc.retriable),
        on_retry=lambda _, delay, exc: log.debug("retriable Kafka error, retrying in %.1fs: %s", delay, exc),
    )


COMPACTION_SEGMENT_MS = 10_000
"""A documents or dlq segment rolls at most this long after its first record (when a record arrives)."""
COMPACTION_MIN_LAG_MS = 5_000
"""A record stays uncompacted at least this long: covers a re-created document published in the
instant between the consumer passing an erase marker and the tombstone it then appends."""
COMPACTION_MAX_LAG_MS = 15_000
"""The cleaner compacts a rolled segment by this age whatever the dirty ratio."""
FILE_DELETE_DELAY_MS = 1_000
"""Compacted-away segment files are removed from disk this long after the cleaner swapped them."""
BROKER_CLEANER_BACKOFF_MS = 15_000
"""The broker's log.cleaner.backoff.ms default: how often an idle cleaner looks for work."""

ROLL_CHECK_S = 2.0
"""How often a worker sends the roll markers that are due (streams.erasure.RollSchedule)."""

ERASE_BOUND_S = (COMPACTION_SEGMENT_MS + BROKER_CLEANER_BACKOFF_MS + FILE_DELETE_DELAY_MS) / 1000 + ROLL_CHECK_S + 0.5
"""Seconds from a tombstone until no broker file holds the earlier records of its key: the roll
marker a segment.ms later, one cleaner pass, the delayed file deletion (tests/test_kafka_erasure.py
measures it on the real broker). The tombstone itself follows the consumer's passing the erase
marker (streams.erasure), i.e. the documents backlog ahead of it."""

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": str(COMPACTION_SEGMENT_MS),
    "min.compaction.lag.ms": str(COMPACTION_MIN_LAG_MS),
    "max.compaction.lag.ms": str(COMPACTION_MAX_LAG_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "file.delete.delay.ms": str(FILE_DELETE_DELAY_MS),
}
"""The documents topic is compacted by key (tenant/doc_id): a tombstone after an applied deletion,
and every older upsert of a document once a newer one exists, leave the broker's files within
ERASE_BOUND_S. Dead letters carry documents too: the dlq topic is compacted the same way and still
expires after the broker's retention (`compact,delete`)."""

TOPIC_CONFIGS = {
    TOPIC_DOCUMENTS: COMPACTED,
    TOPIC_DLQ: {**COMPACTED, "cleanup.policy": "compact,delete"},
}


def topic_names(prefix: str) -> dict[str, str]:
    """Logical topic name -> Kafka topic name, e.g. documents -> ragsync.documents."""
    return {logical: f"{prefix}{logical}" for logical in LOGICAL_TOPICS}


def ensure_topics(
    admin: Any, prefix: str, partitions: int, *, replication: int = 1, timeout_s: float = 30.0
) -> dict[str, list[int]]:
    """Create the four topics if missing and wait until every partition has a leader.

    Idempotent: a topic that already exists (created by another process, even concurrently) is
    accepted as it is, with its own partition count, except that the documents and dlq topics are
    given their compaction settings (TOPIC_CONFIGS) if they lack them, e.g. topics created by an
    older version. Returns Kafka topic name -> partition ids.
    """
    names_by_logical = topic_names(prefix)
    names = list(names_by_logical.values())
    existing = set(retrying(admin.list_topics))
    missing = [name for name in names if name not in existing]
    configs = {
        name: {"max.message.bytes": str(_TOPIC_MAX_MESSAGE_BYTES), **TOPIC_CONFIGS.get(logical, {})}
        for logical, name in names_by_logical.items()
    }
    if missing:
        spec = {
            name: {"num_partitions": partitions, "replication_factor": replication, "configs": configs[name]}
            for name in missing
        }
        response = admin.create_topics(spec, raise_errors=False)
        for topic in response.get("topics", []):
            code = topic.get("error_code", 0)
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"cannot create topic {topic.get('name')}: {code} {topic.get('error_message')}")
    admin.wait_for_topics(names, timeout_ms=int(timeout_s * 1000))
    older = [names_by_logical[t] for t in TOPIC_CONFIGS if names_by_logical[t] in existing]
    if older:
        _ensure_compaction(admin, older, configs)
    out: dict[str, list[int]] = {}
    for described in retrying(admin.describe_topics, names):
        out[described["name"]] = sorted(p["partition_index"] for p in described["partitions"])
    return out


def _ensure_compaction(admin: Any, names: list[str], configs: dict[str, dict[str, str]]) -> None:
    """Set the compaction settings on existing topics that lack them (one incremental alter)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    resources = [ConfigResource(ConfigResourceType.TOPIC, n, configs=None) for n in names]
    described = retrying(admin.describe_configs, resources, config_filter="all")
    current: dict[str, dict[str, str]] = {
        name: {key: str(entry.get("value")) for key, entry in entries.items()}
        for name, entries in dict(described.get("topic", {})).items()
    }
    changes = [
        ConfigResource(
            ConfigResourceType.TOPIC,
            name,
            configs={k: v for k, v in configs[name].items() if current.get(name, {}).get(k) != v},
        )
        for name in names
    ]
    changes = [c for c in changes if c.configs]
    if changes:
        log.warning("setting compaction on existing topics %s", ", ".join(c.name for c in changes))
        retrying(admin.alter_configs, changes)
