"""The embedded event log: one SQLite file in WAL mode, topics as tables rows, offsets per group.

SQLite gives what the port needs on one machine: a publish is durable when its transaction
commits, and a consumer group's committed offset survives a crash, so delivery is at-least-once.
Positions between poll and commit are kept in memory only, exactly like a Kafka consumer's.

Content does not outlive its document: once a deletion is applied, `erase_document` empties the
value of every upsert of that document up to the deleted version, and of its dead letters (the
record keeps its topic, offset, key, version and publish time, and is skipped by consumers like a
Kafka tombstone); an erasure (`ragsync erase`) also empties every record of the document published
before it, whatever version it claims (a dead-lettered upsert above the erasure's version kept its
text otherwise), as a Kafka tombstone drops every earlier record of its key. Once a newer upsert
is applied, the older upserts' content goes the same way, as Kafka's compaction does to the
cluster's documents topic. The connection runs with
`secure_delete` on, so the old bytes are overwritten in the page rather than left in free space,
and `purge` checkpoints and truncates the write-ahead log, the last file that could hold them.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from indexer.ports import Removal
from schemas.events import Event
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS, AppliedEntry, Record, topic_for

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL,
    offset INTEGER NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (topic, offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS group_offsets (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (grp, topic)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS applied (
    grp TEXT NOT NULL,
    topic TEXT NOT NULL,
    offset INTEGER NOT NULL,
    event_id TEXT,
    outcome TEXT NOT NULL,
    passages_written INTEGER NOT NULL,
    passages_embedded INTEGER NOT NULL,
    lag_ms INTEGER NOT NULL,
    applied_ms INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, offset)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS applied_by_time ON applied(applied_ms);
"""

JOURNAL_RETENTION_S = 7 * 24 * 3600.0
"""How long what applying a record did stays readable (a waiting `sync` needs seconds of it)."""


class SqliteEventLog:
    """Single-partition topics: ordering per document holds because ordering per topic does."""

    name = "sqlite"
    removal: Removal = "purge"

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.executescript(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(records)")}
        for column in ("version", "published_ms"):  # logs written before propagation tracking and erasure
            if column not in columns:
                self._conn.execute(f"ALTER TABLE records ADD COLUMN {column} INTEGER")
        self._conn.execute("CREATE INDEX IF NOT EXISTS records_by_key ON records(topic, key)")
        self._lock = threading.RLock()  # re-entrant: `one_transaction` holds it around the writes it groups
        self._positions: dict[tuple[str, str], int] = {}

    def publish(self, event: Event) -> None:
        self._insert(topic_for(event), event.key, event.model_dump_json().encode(), event.version)

    def publish_raw(self, topic: str, key: str, value: bytes) -> None:
        self._insert(topic, key, value, None)

    def _insert(self, topic: str, key: str, value: bytes, version: int | None) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                (nxt,) = self._conn.execute(
                    "SELECT COALESCE(MAX(offset) + 1, 0) FROM records WHERE topic = ?", (topic,)
                ).fetchone()
                self._conn.execute(
                    "INSERT INTO records(topic, offset, key, value, version, published_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    (topic, nxt, key, value, version, _now_ms()),
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def publish_many(self, events: Sequence[Event]) -> None:
        """One transaction for a batch: a connector's full scan costs one fsync, not thousands."""
        now = _now_ms()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                next_by_topic: dict[str, int] = {}
                for event in events:
                    topic = topic_for(event)
                    if topic not in next_by_topic:
                        (next_by_topic[topic],) = self._conn.execute(
                            "SELECT COALESCE(MAX(offset) + 1, 0) FROM records WHERE topic = ?", (topic,)
                        ).fetchone()
                    self._conn.execute(
                        "INSERT INTO records(topic, offset, key, value, version, published_ms)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (topic, next_by_topic[topic], event.key, event.model_dump_json().encode(), event.version, now),
                    )
                    next_by_topic[topic] += 1
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def flush(self) -> None:
        """Every publish already committed its transaction."""

    @contextmanager
    def one_transaction(self) -> Iterator[None]:
        """`erase_document`, `compact_document` and `commit_applied` inside the block commit together:
        the embedded worker's round erases each deletion's content and acknowledges the round with one
        fsync (one per deletion before: on a busy disk a round of 30 deletions took seconds), and a
        crash leaves either all of it or none (redelivery redoes it). Other threads wait meanwhile."""
        with self._lock:
            if self._conn.in_transaction:
                yield
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _committed(self, topic: str, group: str) -> int:
        row = self._conn.execute(
            "SELECT next_offset FROM group_offsets WHERE grp = ? AND topic = ?", (group, topic)
        ).fetchone()
        return int(row[0]) if row else 0

    def poll(self, topic: str, group: str, max_records: int = 100, timeout_s: float = 0.0) -> list[Record]:
        with self._lock:
            position = self._positions.get((topic, group))
            if position is None:
                position = self._committed(topic, group)
            rows = self._conn.execute(
                "SELECT offset, key, value, published_ms FROM records WHERE topic = ? AND offset >= ?"
                " ORDER BY offset LIMIT ?",
                (topic, position, max_records),
            ).fetchall()
            if rows:
                self._positions[(topic, group)] = rows[-1][0] + 1
            return [Record(topic, 0, offset, key, bytes(value), published) for offset, key, value, published in rows]

    def commit(self, group: str, records: list[Record]) -> None:
        if not records:
            return
        by_topic: dict[str, int] = {}
        for record in records:
            by_topic[record.topic] = max(by_topic.get(record.topic, -1), record.offset)
        with self._lock:
            for topic, last in by_topic.items():
                self._conn.execute(
                    "INSERT INTO group_offsets(grp, topic, next_offset) VALUES (?, ?, ?) "
                    "ON CONFLICT(grp, topic) DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)",
                    (group, topic, last + 1),
                )

    def commit_applied(self, group: str, records: Sequence[Record], entries: Sequence[AppliedEntry]) -> None:
        """The offset commit and the journal of what was applied, in one transaction (one fsync per batch)."""
        if not records:
            return
        by_topic: dict[str, int] = {}
        for record in records:
            by_topic[record.topic] = max(by_topic.get(record.topic, -1), record.offset)
        now_ms = int(time.time() * 1000)
        with self.one_transaction():
            for topic, last in by_topic.items():
                self._conn.execute(
                    "INSERT INTO group_offsets(grp, topic, next_offset) VALUES (?, ?, ?) ON CONFLICT(grp, topic)"
                    " DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)",
                    (group, topic, last + 1),
                )
            self._conn.executemany(
                "INSERT OR REPLACE INTO applied(grp, topic, offset, event_id, outcome, passages_written,"
                " passages_embedded, lag_ms, applied_ms) VALUES (?,?,?,?,?,?,?,?,?)",
                [
                    (
                        group,
                        e.topic,
                        e.offset,
                        e.event_id,
                        e.outcome,
                        e.passages_written,
                        e.passages_embedded,
                        int(e.lag_s * 1000),
                        now_ms,
                    )
                    for e in entries
                ],
            )
            self._conn.execute("DELETE FROM applied WHERE applied_ms < ?", (now_ms - int(JOURNAL_RETENTION_S * 1000),))

    def applied(self, group: str, topic: str, start: int, end: int) -> list[AppliedEntry]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT offset, event_id, outcome, passages_written, passages_embedded, lag_ms FROM applied"
                " WHERE grp = ? AND topic = ? AND offset >= ? AND offset < ? ORDER BY offset",
                (group, topic, start, end),
            ).fetchall()
        return [AppliedEntry(topic, r[0], r[1], r[2], r[3], r[4], r[5] / 1000) for r in rows]

    def end_offsets(self, topics: Sequence[str]) -> dict[str, int]:
        with self._lock:
            return {
                topic: int(
                    self._conn.execute(
                        "SELECT COALESCE(MAX(offset) + 1, 0) FROM records WHERE topic = ?", (topic,)
                    ).fetchone()[0]
                )
                for topic in topics
            }

    def committed_offsets(self, group: str) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute("SELECT topic, next_offset FROM group_offsets WHERE grp = ?", (group,)).fetchall()
        return {str(topic): int(offset) for topic, offset in rows}

    def rewind(self, topic: str, group: str) -> None:
        with self._lock:
            self._positions.pop((topic, group), None)

    def lag(self, topic: str, group: str) -> int:
        with self._lock:
            (end,) = self._conn.execute(
                "SELECT COALESCE(MAX(offset) + 1, 0) FROM records WHERE topic = ?", (topic,)
            ).fetchone()
            return max(0, int(end) - self._committed(topic, group))

    def erase_document(
        self,
        tenant: str,
        doc_id: str,
        up_to_version: int | None,
        *,
        dead_letters: bool = True,
        published_by_ms: int | None = None,
    ) -> int:
        """Empties the matching records' values at once, in one transaction (the port says which records).

        Records from before the version column are matched by parsing their value once; records from
        before the publish-time column count as published before any erasure.
        """
        key = f"{tenant}/{doc_id}"
        erased = 0
        with self.one_transaction():
            rows = self._conn.execute(
                "SELECT topic, offset, version, value, published_ms FROM records WHERE topic IN (?, ?)"
                " AND key = ? AND length(value) > 0",
                (TOPIC_DOCUMENTS, TOPIC_DLQ, key),
            ).fetchall()
            for topic, offset, version, value, published in rows:
                if topic == TOPIC_DLQ:
                    if not dead_letters:
                        continue
                elif published_by_ms is not None and (published is None or published <= published_by_ms):
                    pass  # published before the erasure: gone, whatever version it claims
                elif up_to_version is not None:
                    known = version if version is not None else _version_of(bytes(value))
                    if known is not None and known > up_to_version:
                        continue  # a later version: the document was re-created, its content lives
                self._conn.execute("UPDATE records SET value = X'' WHERE topic = ? AND offset = ?", (topic, offset))
                erased += 1
        return erased

    def compact_document(self, tenant: str, doc_id: str, below_version: int) -> int:
        """A newer upsert was applied: older upserts' content goes, as Kafka's compaction does."""
        return self.erase_document(tenant, doc_id, below_version - 1, dead_letters=False) if below_version > 1 else 0

    @property
    def journal(self) -> SqliteEventLog:
        """This log: it journals what applying each record did with the offset commit (`commit_applied`)."""
        return self

    def tombstone(self, key: str, *, dead_letters: bool = True) -> None:
        """Nothing to append: `erase_document` rewrites the records in place and writes no markers."""

    def remnants(self, tenant: str, doc_id: str, up_to_version: int | None = None) -> dict[str, int]:
        """Records of the document that still carry a value, per topic (for deletion certificates)."""
        key = f"{tenant}/{doc_id}"
        out = {TOPIC_DOCUMENTS: 0, TOPIC_DLQ: 0}
        with self._lock:
            rows = self._conn.execute(
                "SELECT topic, version, value FROM records WHERE topic IN (?, ?) AND key = ? AND length(value) > 0",
                (TOPIC_DOCUMENTS, TOPIC_DLQ, key),
            ).fetchall()
        for topic, version, value in rows:
            known = version if version is not None else _version_of(bytes(value))
            if topic == TOPIC_DLQ or up_to_version is None or known is None or known <= up_to_version:
                out[topic] += 1
        return out

    def dead_letters(self) -> int:
        return self.end_offsets([TOPIC_DLQ])[TOPIC_DLQ]

    def purge(self) -> dict[str, Any]:
        """Checkpoint and truncate the write-ahead log: erased values leave the last file that held them."""
        with self._lock:
            busy, wal_pages, moved = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return {"checkpoint_complete": busy == 0, "wal_pages": wal_pages, "pages_checkpointed": moved}

    def close(self) -> None:
        self._conn.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _version_of(value: bytes) -> int | None:
    try:
        version = json.loads(value).get("version")
    except (ValueError, AttributeError):
        return None
    return int(version) if isinstance(version, int) else None
