"""`ragsync verify`: does every store hold exactly what doc state and the connectors say it should."""

from __future__ import annotations

import json

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_PARTIAL, note, settings_of, warn


@click.command()
@click.option("--tenant", default=None, help="Only this tenant's documents.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def verify(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Reconcile each store (passages per document, versions, ACLs, tombstones) against doc state, and
    doc state against what each connector published.

    \b
    Exit status: 0 every store agrees; 1 drift (listed); 3 no drift yet, but events are still
    waiting to be applied (run again once the workers caught up); 2 bad usage.
    """
    from ragsync.commands.owned import own_stores
    from ragsync.verify import verify as run_verify

    with own_stores(settings_of(ctx), "verify") as components:  # one line when `ragsync serve` has them
        report = run_verify(components, tenant=tenant)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        passages = ", ".join(f"{k}={v}" for k, v in report.passages.items()) or "none"
        click.echo(
            f"documents={report.documents} tombstones={report.tombstones} passages: {passages}"
            f" sources={len(report.sources)} backlog={sum(report.backlog.values())}"
            f" drift={len(report.drift)} pending={len(report.pending)}"
        )
        for f in report.drift:
            warn(f"drift: {f.tenant}/{f.doc_id} {f.kind}{f' in {f.store}' if f.store else ''}: {f.detail}")
        for f in report.pending:
            note(f"pending: {f.tenant}/{f.doc_id} {f.kind}: {f.detail}")
    if report.drift:
        ctx.exit(EXIT_FAILED)
    if report.pending:
        ctx.exit(EXIT_PARTIAL)
