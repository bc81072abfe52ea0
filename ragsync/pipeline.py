"""The main job as functions the CLI, the owner, the demo and the tests share.

A sync is two halves that may run in different processes:

- `publish_source` scans a source and publishes its changes into the event log. It opens the log
  and the connector state, nothing else, so it runs beside a `ragsync serve` that owns the stores.
- applying: whoever owns the home drains the log into the stores, the owner's worker while one
  runs (`wait_applied` follows its progress through the log's journal), else the syncing process
  itself, which then owns the home for as long as it applies (`apply_events`); `ragsync sync` takes
  it before its scan and opens the stores while the scan publishes (`publish_and_apply`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectors.base import SourceConnector
from connectors.drive import DriveConnector
from connectors.scan import ScanReport, scan
from connectors.state import ConnectorState, HomeFormatError, SourceConflict
from indexer.chunker import CHUNKER_VERSION
from ragsync.home_lock import scan_lock
from ragsync.sync_history import SyncHistory, SyncRun, now_ms
from ragsync.wiring import Components
from schemas.events import Event
from streams.dispatch import Stats
from streams.embedded_worker import GROUP, EmbeddedWorker
from streams.ports import EVENT_TOPICS, publish_durably, topic_for
from streams.tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class SyncReport:
    scan: ScanReport
    stats: Stats | None
    reindexed: bool


@dataclass
class Published:
    """What one scan put into the log: its events by topic, inside these offset ranges."""

    scan: ScanReport
    reindexed: bool
    start: dict[str, int] = field(default_factory=dict)
    end: dict[str, int] = field(default_factory=dict)
    event_ids: dict[str, set[str]] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(len(ids) for ids in self.event_ids.values())


def needs_reindex(state: ConnectorState, source: str) -> bool:
    """A changed chunker version re-chunks everything: passages must come from one chunker.

    Decided from the connector's own state (the chunker its last complete sync emitted for), not
    from the stores, so a publishing sync opens nothing but the event log. A source with documents
    but no recorded version (a home from before the record existed) is re-emitted once.
    """
    recorded = state.meta(source, "chunker_version")
    if recorded is None:
        return bool(state.live(source))
    return recorded != CHUNKER_VERSION


def publish_source(
    components: Components,
    connector: SourceConnector,
    *,
    force: bool = False,
    allow_deletes: bool = True,
    name: str | None = None,
    on_scan: Callable[[int], None] | None = None,
    on_wait: Callable[[], None] | None = None,
) -> Published:
    """Scan a source into the event log; every event is durable before the connector records it."""
    home = components.settings.home
    events = components.events
    journal = events.journal
    with scan_lock(home, connector.name, on_wait=on_wait):
        start = journal.end_offsets(EVENT_TOPICS) if journal else {}
        ids: dict[str, set[str]] = {}

        def note(batch: list[Event]) -> None:
            for event in batch:
                ids.setdefault(topic_for(event), set()).add(event.event_id)

        def publish_one(event: Event) -> None:
            publish_durably(events)(event)
            note([event])

        def publish_many(batch: Any) -> None:
            events.publish_many(batch)
            note(list(batch))

        started = now_ms()
        try:
            state = ConnectorState(home / "connectors.db")
            try:
                reindex = needs_reindex(state, connector.name)
                report = asyncio.run(
                    scan(
                        connector,
                        state,
                        publish_one,
                        progress=on_scan,
                        force=force or reindex,
                        publish_many=publish_many,
                        allow_deletes=allow_deletes,
                        extract=components.extractor.read,
                    )
                )
                if report.complete:
                    # The listing was complete and every file was read: each document was emitted under
                    # this chunker, was unchanged under it, or has content that cannot be indexed (an
                    # encrypted PDF, a bad date). Those are re-read by every scan until fixed, and emitted
                    # under this chunker then, so they must not make every later sync a full re-index.
                    state.set_meta(connector.name, "chunker_version", CHUNKER_VERSION)
            finally:
                state.close()
        except (SourceConflict, HomeFormatError):
            raise  # not a pass of this source: its name belongs to another one, or the home is unusable
        except Exception as exc:  # the source's last pass failed: status and /readyz say so
            failed = SyncRun(
                connector.name, name or connector.name, started, now_ms(), allow_deletes, ScanReport(), _failure(exc)
            )
            try:
                _record(home, failed)
            except Exception:  # the history is best effort here: the scan's own error is the one to raise
                log.warning("could not record the failed pass of %s", connector.name, exc_info=True)
            raise
        _record(home, SyncRun(connector.name, name or connector.name, started, now_ms(), allow_deletes, report))
        end = journal.end_offsets(EVENT_TOPICS) if journal else {}
    return Published(report, reindex, start, end, ids)


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _record(home: Path, run: SyncRun) -> None:
    history = SyncHistory(home / "connectors.db")
    try:
        history.record(run)
    finally:
        history.close()


def apply_events(
    components: Components,
    *,
    on_apply: Callable[[int], None] | None = None,
    on_backlog: Callable[[int], None] | None = None,
    worker: EmbeddedWorker | None = None,
) -> Stats:
    """Drain the log into the stores, then do the idle maintenance; the caller owns the home.

    `worker`: one `embedded_worker(components)` opened already (publish_and_apply opens it during the
    scan); closed here once drained, like the one opened here."""
    from ragsync.maintenance import Maintenance

    worker = worker or embedded_worker(components)
    try:
        if on_backlog:
            on_backlog(worker.pending())
        stats = worker.drain(on_apply)
    finally:
        worker.close()
    Maintenance(components).run()
    return stats


def embedded_worker(components: Components, tracker: Tracker | None = None) -> EmbeddedWorker:
    """The embedded worker with the deny set and propagation tracking; an erasure is purged at once."""
    from ragsync.purge import Purger

    purger = Purger(components)

    def purge_now(_: list[Event]) -> None:
        purger.run()

    return EmbeddedWorker(
        components.events,
        components.sink(),
        revocation_bound_s=components.settings.revocation_bound_s,
        documents_batch_size=components.settings.index_batch_size,
        tracker=tracker or components.tracker(),
        on_erase=purge_now,
    )


def wait_applied(
    components: Components,
    published: Published,
    *,
    owner_alive: Callable[[], bool],
    on_progress: Callable[[int, int], None] | None = None,
    poll_s: float = 0.1,
) -> Stats | None:
    """Wait until the owner applied every event of `published`; its stats, or None if the owner went away.

    Progress is (applied, total) in records of the ranges this scan published into.
    """
    events = components.events.journal
    if events is None:
        raise TypeError("waiting for an owner needs a log that journals what it applied")
    topics = [t for t in EVENT_TOPICS if published.event_ids.get(t)]
    total = sum(published.end[t] - published.start[t] for t in topics)
    last_alive_check = time.monotonic()
    while True:
        committed = events.committed_offsets(GROUP)
        done = sum(min(committed.get(t, 0), published.end[t]) - published.start[t] for t in topics)
        if on_progress:
            on_progress(max(0, done), total)
        if all(committed.get(t, 0) >= published.end[t] for t in topics):
            return applied_stats(components, published)
        if time.monotonic() - last_alive_check > 1.0:
            if not owner_alive():
                return None
            last_alive_check = time.monotonic()
        time.sleep(poll_s)


def applied_stats(components: Components, published: Published) -> Stats:
    """What became of this scan's events, from the journal the owner wrote with each offset commit."""
    events = components.events.journal
    assert events is not None, "applied_stats needs a log that journals what it applied"
    stats = Stats()
    for topic, ids in published.event_ids.items():
        seen: set[str] = set()
        for entry in events.applied(GROUP, topic, published.start[topic], published.end[topic]):
            if entry.event_id not in ids or entry.event_id in seen:
                continue
            seen.add(entry.event_id)
            stats.by_topic[topic] = stats.by_topic.get(topic, 0) + 1
            if entry.outcome == "stale":
                stats.stale += 1
            elif entry.outcome == "dead_letter":
                stats.dead_lettered += 1
            else:
                stats.applied += 1
                stats.passages_written += entry.passages_written
                stats.passages_embedded += entry.passages_embedded
                if topic != "documents":
                    stats.max_revocation_lag_s = max(stats.max_revocation_lag_s, entry.lag_s)
    return stats


def sync_source(
    components: Components,
    connector: SourceConnector,
    *,
    force: bool = False,
    apply: bool = True,
    on_scan: Callable[[int], None] | None = None,
    on_apply: Callable[[int], None] | None = None,
    on_backlog: Callable[[int], None] | None = None,
) -> SyncReport:
    """Publish, then (embedded, `apply`) drain the log in this process, which must own the home
    (`publish_and_apply`). In the cluster profile `apply=False`: the Faust workers consume what the
    scan published."""
    if not apply:
        published = publish_source(components, connector, force=force, on_scan=on_scan)
        return SyncReport(published.scan, None, published.reindexed)
    published, stats = publish_and_apply(
        components, connector, force=force, on_scan=on_scan, on_apply=on_apply, on_backlog=on_backlog
    )
    return SyncReport(published.scan, stats, published.reindexed)


def publish_and_apply(
    components: Components,
    connector: SourceConnector,
    *,
    force: bool = False,
    allow_deletes: bool = True,
    on_scan: Callable[[int], None] | None = None,
    on_wait: Callable[[], None] | None = None,
    on_apply: Callable[[int], None] | None = None,
    on_backlog: Callable[[int], None] | None = None,
) -> tuple[Published, Stats]:
    """Publish, then drain the log in this process, which must own the home already (`ragsync sync`
    takes it before its scan).

    The worker and its stores are opened on a thread while the scan publishes (`_open_worker_beside`):
    creating a fresh home's vector shard and its field indexes is mostly waiting on the disk (0.3-1.0 s
    on the shared machine), time the scan can use. Nothing is applied before the scan has published,
    as before; when the scan fails, its error is the one raised, once the opening has settled (and a
    worker it opened closed)."""
    opening = _open_worker_beside(components)
    try:
        published = publish_source(
            components, connector, force=force, allow_deletes=allow_deletes, on_scan=on_scan, on_wait=on_wait
        )
    except BaseException:
        if opening.exception() is None:  # waits for the opening: nothing is left half-open for close()
            opening.result().close()
        raise
    stats = apply_events(components, on_apply=on_apply, on_backlog=on_backlog, worker=opening.result())
    return published, stats


def _open_worker_beside(components: Components) -> Future[EmbeddedWorker]:
    """`embedded_worker(components)` on a thread of its own, its error raised by `result()`.

    The ports the scan uses (the log, the extractor's child pool) are opened here first, on the
    caller's thread, so that no port is opened by both threads; the thread opens the others."""
    components.events  # noqa: B018 (opened now: the scan and the worker share it)
    components.extractor  # noqa: B018
    opener = ThreadPoolExecutor(1, thread_name_prefix="ragsync-open-stores")
    try:
        return opener.submit(embedded_worker, components)
    finally:
        opener.shutdown(wait=False)


def sync_folder(
    components: Components, root: Path, name: str | None = None, *, tenants: Collection[str], **options: Any
) -> SyncReport:
    """`name` is the drive's source name, the namespace of its doc IDs (default: from the folder's name);
    `tenants` the only tenants its manifests may name."""
    drive = DriveConnector(root, name, tenants=tenants, refuse=[components.settings.home])
    return sync_source(components, drive, **options)
