"""`ragsync verify`: does every store hold exactly what doc state and the connectors say it should."""

from __future__ import annotations

import json
from typing import Any

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_PARTIAL, fail, note, settings_of, warn


@click.command()
@click.option("--tenant", default=None, help="Only this tenant's documents.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def verify(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """Reconcile each store (passages per document, versions, ACLs, tombstones) against doc state, and
    doc state against what each connector published. While `ragsync serve` owns the home, serve
    runs the check on the stores it holds and this command prints its report.

    \b
    Exit status: 0 every store agrees; 1 drift (listed), or the owner could not be reached; 3 no
    drift yet, but events are still waiting to be applied (run again once the workers caught up);
    2 bad usage.
    """
    from ragsync.commands.owned import stores_or_owner
    from ragsync.owner_client import OwnerClient, OwnerRefused, OwnerUnreachable
    from ragsync.verify import verify as run_verify

    with stores_or_owner(settings_of(ctx), "verify") as stores:
        if isinstance(stores, OwnerClient):  # `ragsync serve` holds the stores: it reads them
            try:
                report = stores.verify(tenant)
            except (OwnerRefused, OwnerUnreachable) as exc:
                fail(str(exc), EXIT_FAILED)
        else:
            report = run_verify(stores, tenant=tenant).as_dict()
    _print(report, as_json)
    if report["drift"]:
        ctx.exit(EXIT_FAILED)
    if report["pending"]:
        ctx.exit(EXIT_PARTIAL)


def _print(report: dict[str, Any], as_json: bool) -> None:
    """The same lines whoever ran the check (this process, or the owner over its API)."""
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    passages = ", ".join(f"{k}={v}" for k, v in report["passages"].items()) or "none"
    click.echo(
        f"documents={report['documents']} tombstones={report['tombstones']} passages: {passages}"
        f" sources={len(report['sources'])} backlog={sum(report['backlog'].values())}"
        f" drift={len(report['drift'])} pending={len(report['pending'])}"
    )
    for f in report["drift"]:
        where = f" in {f['store']}" if f["store"] else ""
        warn(f"drift: {f['tenant']}/{f['doc_id']} {f['kind']}{where}: {f['detail']}")
    for f in report["pending"]:
        note(f"pending: {f['tenant']}/{f['doc_id']} {f['kind']}: {f['detail']}")
