"""The main job as functions the CLI, the demo and the tests share: sync a folder, ask a question."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.base import SourceConnector
from connectors.drive import DriveConnector
from connectors.scan import ScanReport, scan
from connectors.state import ConnectorState
from indexer.chunker import CHUNKER_VERSION
from ragsync.wiring import Components
from streams.dispatch import Stats
from streams.embedded_worker import EmbeddedWorker
from streams.ports import publish_durably


@dataclass
class SyncReport:
    scan: ScanReport
    stats: Stats | None
    reindexed: bool


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
    """Scan a source into the event log, then (embedded profile) drain the log into the stores.

    Every event is durable before the connector records it as emitted. In the cluster profile
    `apply=False`: the Faust workers consume what the scan published.
    """
    state = ConnectorState(components.settings.home / "connectors.db")
    try:
        reindex = needs_reindex(state, connector.name)
        report = asyncio.run(
            scan(
                connector,
                state,
                publish_durably(components.events),
                progress=on_scan,
                force=force or reindex,
                publish_many=components.events.publish_many,
            )
        )
        if not report.errors:  # every document was emitted under this chunker (or was unchanged under it)
            state.set_meta(connector.name, "chunker_version", CHUNKER_VERSION)
    finally:
        state.close()
    stats = None
    if apply:
        worker = EmbeddedWorker(
            components.events, components.sink(), revocation_bound_s=components.settings.revocation_bound_s
        )
        if on_backlog:
            on_backlog(worker.pending())
        stats = worker.drain(on_apply)
        from ragsync.maintenance import Maintenance

        Maintenance(components).run()
    return SyncReport(report, stats, reindex)


def sync_folder(components: Components, root: Path, name: str | None = None, **options: Any) -> SyncReport:
    """`name` is the drive's source name, the namespace of its doc IDs (default: from the folder's name)."""
    return sync_source(components, DriveConnector(root, name, refuse=[components.settings.home]), **options)
