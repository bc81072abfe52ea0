"""`ragsync audit`: evidence for compliance officers.

`deletions` lists what was deleted, `deletion DOC_ID` certifies one deletion copy by copy,
`propagation` measures how long revocations and deletions took to reach every copy, and `verify`
checks the audit trail's hash chain (an edited, reordered or removed record is reported with its
sequence number).
"""

from __future__ import annotations

import json

import click
from rich.table import Table

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, fail, note, output_console, settings_of
from ragsync.wiring import build
from schemas._digits import ascii_uint
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
    text, sep, digest = value.partition(":")
    seq = ascii_uint(text)
    if not sep or seq is None or len(digest) != 64:
        raise click.BadParameter(f"expected SEQ:SHA256 (as `audit verify` prints it), got {value!r}")
    return seq, digest.lower()


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


@audit.command("deletion")
@click.argument("doc_id")
@click.option("--tenant", default=None, help="Needed when the same path was deleted in several tenants.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_deletion(ctx: click.Context, doc_id: str, tenant: str | None, as_json: bool) -> None:
    """A certificate for one deleted document: per copy, what was checked, when it was removed logically
    and physically, and the remnants found now, with their total.

    DOC_ID is the document as `ragsync audit deletions` lists it: its path within its source (for a
    drive, relative to the synced root) or the full doc ID. Every check runs now, against the live
    stores; nothing in the certificate holds the document's text.

    \b
    Exit status: 0 complete (no remnant, every copy purged physically, trail intact);
    1 not complete yet (remnants, a purge pending, a copy unchecked), the trail is not intact, or
    no deletion of DOC_ID is recorded (one line says so: it was never deleted, or is named otherwise);
    2 a name that matches several documents (pass --tenant), bad settings.
    """
    from ragsync.certificate import CertificateError, NoDeletionRecorded, certificate
    from ragsync.commands.owned import stores_or_owner
    from ragsync.owner_client import OwnerClient, OwnerRefused, OwnerUnreachable

    with stores_or_owner(settings_of(ctx), "audit deletion") as stores:
        try:
            if isinstance(stores, OwnerClient):  # `ragsync serve` holds the stores: it checks them
                cert = stores.deletion_certificate(doc_id, tenant)
            else:
                cert = certificate(stores, doc_id, tenant)
        except NoDeletionRecorded as exc:
            fail(str(exc), EXIT_FAILED)
        except CertificateError as exc:
            fail(str(exc), EXIT_USAGE)
        except OwnerRefused as exc:
            fail(str(exc), EXIT_USAGE if exc.status_code == 422 else EXIT_FAILED)
        except OwnerUnreachable as exc:
            fail(str(exc), EXIT_FAILED)
    if as_json:
        click.echo(json.dumps(cert, indent=2))
    else:
        deletion = cert["deletion"]
        click.echo(
            f"{cert['tenant']}/{cert['doc_id']}: deleted at version {deletion['version']}"
            f" ({deletion['passages_removed']} passages, versions {deletion['versions_removed']}),"
            f" received {deletion['received_at']}, audit seq {deletion['audit_seq']}"
            + (" (erasure)" if deletion["erase"] else "")
        )
        table = Table("copy", "removed (logical)", "removed (physical)", "remnants now", "checked")
        for c in cert["copies"]:
            remnants = "not checked" if c["remnants"] is None else str(c["remnants"])
            table.add_row(
                c["copy"],
                c["removed_logically_at"] or "",
                c["removed_physically_at"] or "pending",
                remnants,
                c["checked"],
            )
        output_console().print(table)
        trail = cert["audit_trail"]
        pending = ", ".join(cert["physical_pending"]) or "none"
        click.echo(
            f"remnants: {cert['remnants']}; physical purge pending: {pending};"
            f" audit trail {'intact' if trail['intact'] else 'NOT INTACT'}:"
            f" {trail['records']} records, head {trail.get('head') or '(empty)'}"
        )
    if not cert["complete"]:
        ctx.exit(1)


@audit.command("propagation")
@click.option("--since", default=None, help="Only events published at or after this instant (YYYY-MM-DD or ISO).")
@click.option("--bound", type=float, default=None, help="Seconds (default: the revocation_bound_s setting).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_propagation(ctx: click.Context, since: str | None, bound: float | None, as_json: bool) -> None:
    """How long revocations and deletions took to reach every copy: p50/p95/p99/max per copy and end
    to end (from publish to: effective for queries, each store, the cache, converged), and every event
    whose convergence exceeded the bound.

    \b
    Exit status: 0 every event within the bound; 1 some over it; 2 bad usage.
    """
    from indexer.propagation import summarize
    from schemas.instants import InvalidInstant, parse_instant

    settings = settings_of(ctx)
    try:
        start = parse_instant(since, field="--since") if since else None
    except InvalidInstant as exc:
        fail(str(exc), EXIT_USAGE)
    limit = settings.revocation_bound_s if bound is None else bound
    components = build(settings, with_embedder=False)
    try:
        summary = summarize(components.propagation.records(start), limit)
    finally:
        components.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "events": summary.events,
                    "bound_s": summary.bound_s,
                    "unconverged": summary.unconverged,
                    "by_copy": summary.by_copy,
                    "over_bound": summary.over_bound,
                },
                indent=2,
            )
        )
    else:
        table = Table("copy", "events", "p50 s", "p95 s", "p99 s", "max s")
        for copy, s in summary.by_copy.items():
            table.add_row(copy, str(int(s["count"])), *(f"{s[q]:.3f}" for q in ("p50", "p95", "p99", "max")))
        output_console().print(table)
        for event in summary.over_bound:
            note(
                f"over {limit:g}s: {event['kind']} {event['tenant']}/{event['doc_id']} v{event['version']}"
                f" converged {event['converged_s']}s, slowest {event['slowest_copy']}"
            )
        click.echo(f"{summary.events} events, {len(summary.over_bound)} over the {limit:g}s bound")
    if summary.over_bound:
        ctx.exit(1)
