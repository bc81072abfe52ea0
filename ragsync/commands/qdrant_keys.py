"""`ragsync qdrant-acl-keys`: give a Qdrant collection written before the tenant-qualified ACL keys its keys,
then mark it (indexer.qdrant_acl_key), so searches use one indexed condition for tenant and entries."""

from __future__ import annotations

import json
import time

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, fail, note, settings_of


@click.command("qdrant-acl-keys")
@click.option("--collection", default=None, help="The collection (default: the settings' qdrant_collection).")
@click.option("--page", default=1000, show_default=True, help="Points read per request.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def qdrant_acl_keys(ctx: click.Context, collection: str | None, page: int, as_json: bool) -> None:
    """Migrate the cluster profile's Qdrant collection to the tenant-qualified ACL keys, with progress.

    Run it once every worker and server runs this version: they write the keys with every upsert and ACL
    change, an older one would change an ACL without them. Until the collection is marked, searches use
    the tenant + ACL filter (correct, slower); processes opened before the mark switch at their next start.
    Running it again on a marked collection checks every point again and marks it again.

    Qdrant moves every point it changes out of its optimized segment, so the server indexes the whole
    collection again afterwards (about an hour of CPU at a million passages on 2 cores).

    \b
    Exit status: 0 migrated and marked; 1 a scan kept finding points to fix (writers still changing
    ACLs without keys: run it again once they are upgraded); 2 bad settings (not the cluster profile).
    """
    from pathlib import Path

    from indexer.qdrant_acl_key import migrate
    from indexer.qdrant_server import connect, open_local
    from ragsync.cluster import qdrant_target

    settings = settings_of(ctx)
    if settings.profile != "cluster":
        fail(
            "qdrant-acl-keys is for the cluster profile's Qdrant (the embedded store filters by tenant + ACL)",
            EXIT_USAGE,
        )
    target = qdrant_target(settings)
    client = open_local(target) if isinstance(target, Path) else connect(target)
    name = collection or settings.qdrant_collection
    started = time.monotonic()

    def progress(phase: str, done: int, total: int) -> None:
        note(f"{phase}: {done}/{total} ({time.monotonic() - started:.0f} s)")

    try:
        report = migrate(client, name, page=page, progress=progress)
    finally:
        client.close()
    summary = report.as_dict() | {"collection": name, "seconds": round(time.monotonic() - started, 1)}
    click.echo(json.dumps(summary) if as_json else " ".join(f"{k}={v}" for k, v in summary.items()))
    if not report.marked:
        ctx.exit(EXIT_FAILED)
