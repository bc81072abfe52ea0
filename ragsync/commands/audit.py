"""`ragsync audit`: evidence for compliance officers.

`deletions` lists what was deleted, `verify` checks the audit trail's hash chain (an edited,
reordered or removed record is reported with its sequence number).
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from ragsync.commands.common import output_console, settings_of
from ragsync.wiring import build
from schemas.events import doc_path, split_doc_id


def source_of(doc_id: str) -> str | None:
    try:
        return split_doc_id(doc_id)[0]
    except ValueError:
        return None


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
            "seq": r.seq,
            "event_id": r.event_id,
            "tenant": r.tenant,
            "doc_id": r.doc_id,
            "source": source_of(r.doc_id),
            "path": doc_path(r.doc_id),
            "version": r.version,
            "received_at": r.received_at.isoformat(),
            "removed_at": {k: v.isoformat() for k, v in r.removed_at.items()},
            "cache_invalidated_at": r.cache_invalidated_at.isoformat(),
            "passages_removed": r.passages_removed,
            "erase": r.erase,
        }
        for r in records
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("tenant", "source", "path", "v", "received", "stores", "cache invalidated", "passages")
    for r in records:
        stores = ", ".join(f"{k} +{(v - r.received_at).total_seconds() * 1000:.0f}ms" for k, v in r.removed_at.items())
        table.add_row(
            r.tenant,
            source_of(r.doc_id) or "",
            doc_path(r.doc_id),
            str(r.version),
            r.received_at.isoformat(timespec="milliseconds"),
            stores,
            f"+{(r.cache_invalidated_at - r.received_at).total_seconds() * 1000:.0f}ms",
            str(r.passages_removed),
        )
    output_console().print(table)


def _anchor(value: str) -> tuple[int, str]:
    seq, sep, digest = value.partition(":")
    if not sep or not seq.isdigit() or len(digest) != 64:
        raise click.BadParameter(f"expected SEQ:SHA256 (as `audit verify` prints it), got {value!r}")
    return int(seq), digest.lower()


@audit.command("verify")
@click.option(
    "--anchor",
    "anchors",
    multiple=True,
    metavar="SEQ:HASH",
    help="A record hash noted earlier (repeatable): proves the trail still contains it unchanged.",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_verify(ctx: click.Context, anchors: tuple[str, ...], as_json: bool) -> None:
    """Check the audit trail's hash chain: every record unchanged, none removed or reordered.

    Prints the chain head (SEQ:HASH); keep it outside ragsync and pass it later as --anchor to
    prove that no record up to it was changed, even by someone able to rewrite the trail's files.
    Exit status 1 when a problem is found.
    """
    from indexer.audit_chain import verify

    parsed = [_anchor(a) for a in anchors]
    components = build(settings_of(ctx), with_embedder=False)
    try:
        links, head = components.audit.chain()
    finally:
        components.close()
    problems = verify(links, head, parsed)
    tip = f"{links[-1].seq}:{links[-1].hash}" if links else None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": not problems,
                    "records": len(links),
                    "head": tip,
                    "anchors_checked": len(parsed),
                    "problems": [{"seq": p.seq, "problem": p.problem} for p in problems],
                },
                indent=2,
            )
        )
    else:
        for p in problems:
            click.echo(f"seq {p.seq}: {p.problem}")
        verdict = "intact" if not problems else f"{len(problems)} problem(s)"
        click.echo(f"audit trail {verdict}: {len(links)} records, head {tip or '(empty)'}")
    if problems:
        ctx.exit(1)
