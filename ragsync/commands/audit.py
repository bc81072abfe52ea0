"""`ragsync audit`: evidence for compliance officers."""

from __future__ import annotations

import json

import click
from rich.table import Table

from ragsync.commands.common import output_console, settings_of
from ragsync.wiring import build


@click.group()
def audit() -> None:
    """Audit evidence."""


@audit.command("deletions")
@click.option("--tenant", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_deletions(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """List deletion records: received, removed from each store, cache invalidated.

    \b
    Exit status: 0 listed (possibly none); 2 bad settings.
    """
    components = build(settings_of(ctx), with_embedder=False)
    try:
        records = components.audit.records(tenant)
    finally:
        components.close()
    rows = [
        {
            "event_id": r.event_id,
            "tenant": r.tenant,
            "doc_id": r.doc_id,
            "version": r.version,
            "received_at": r.received_at.isoformat(),
            "removed_at": {k: v.isoformat() for k, v in r.removed_at.items()},
            "cache_invalidated_at": r.cache_invalidated_at.isoformat(),
            "passages_removed": r.passages_removed,
        }
        for r in records
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("tenant", "doc", "v", "received", "stores", "cache invalidated", "passages")
    for r in records:
        stores = ", ".join(f"{k} +{(v - r.received_at).total_seconds() * 1000:.0f}ms" for k, v in r.removed_at.items())
        table.add_row(
            r.tenant,
            r.doc_id,
            str(r.version),
            r.received_at.isoformat(timespec="milliseconds"),
            stores,
            f"+{(r.cache_invalidated_at - r.received_at).total_seconds() * 1000:.0f}ms",
            str(r.passages_removed),
        )
    output_console().print(table)
