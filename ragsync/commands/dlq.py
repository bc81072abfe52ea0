"""`ragsync dlq list|show|replay`: inspect and replay dead-lettered events (see ragsync.dead_letters)."""

from __future__ import annotations

import json

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, error, fail, note, output_console, settings_of
from ragsync.dead_letters import pending, replay
from ragsync.wiring import build


@click.group()
def dlq() -> None:
    """Inspect and replay dead-lettered events (events the indexer could not apply).

    \b
    Exit status: 0 done; 1 a dead letter could not be replayed (list, show and the others are
    still fine); 2 an unknown dead letter ID or bad settings.
    """


@dlq.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead letter.")
@click.pass_context
def dlq_list(ctx: click.Context, as_json: bool) -> None:
    """List pending dead letters: ID, reason, where the event came from, its size."""
    components = build(settings_of(ctx), with_embedder=False)
    try:
        letters = pending(components.events)
    finally:
        components.close()
    if as_json:
        click.echo(json.dumps([d.summary() for d in letters], indent=2))
        return
    if not letters:
        note("no pending dead letters")
        return
    from rich.table import Table

    table = Table("id", "from", "key", "bytes", "reason")
    for d in letters:
        size = str(len(d.value)) if d.value is not None else "?"
        table.add_row(d.id, d.origin, d.key, size, d.reason + ("" if d.replayable else " [not replayable]"))
    output_console().print(table)
    note(f"{len(letters)} pending; `ragsync dlq show ID` for one, `ragsync dlq replay` to send them again")


@dlq.command("show")
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dlq_show(ctx: click.Context, ident: str, as_json: bool) -> None:
    """Show one pending dead letter (ID from `ragsync dlq list`), with the original event's bytes."""
    components = build(settings_of(ctx), with_embedder=False)
    try:
        found = next((d for d in pending(components.events) if d.id == ident), None)
    finally:
        components.close()
    if found is None:
        fail(f"no pending dead letter {ident!r} (see `ragsync dlq list`)", EXIT_USAGE)
    value = found.value.decode("utf-8", "replace") if found.value is not None else None
    if as_json:
        click.echo(json.dumps({**found.summary(), "value": value}, indent=2))
        return
    for name, text in found.summary().items():
        click.echo(f"{name}: {text}")
    click.echo("value:")
    click.echo(value if value is not None else found.record.value.decode("utf-8", "replace"))


@dlq.command("replay")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the oldest N pending dead letters.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dlq_replay(ctx: click.Context, limit: int | None, as_json: bool) -> None:
    """Send pending dead letters back to their topics, oldest first, and mark them replayed.

    Stops at the first one that cannot be replayed (unreadable, or truncated to fit the log), so
    nothing after it is marked replayed; inspect it with `ragsync dlq show`.
    """
    settings = settings_of(ctx)
    components = build(settings, with_embedder=False)
    try:
        done = replay(components.events, limit)
    finally:
        components.close()
    replayed, stuck = done.replayed, done.stuck
    if as_json:
        click.echo(json.dumps({"replayed": replayed, "stuck": stuck.summary() if stuck else None}, indent=2))
    else:
        note(f"replayed {len(replayed)} dead letter(s)" + (f": {', '.join(replayed)}" if replayed else ""))
        if settings.profile == "embedded" and replayed:
            from ragsync.home_lock import current_owner

            owner = current_owner(settings.home)
            if owner is not None and owner.long_lived:
                note(f"{owner.describe()} applies them now")
            else:
                note("applied by the home's next owner: `ragsync serve`, `ragsync worker` or the next `ragsync sync`")
    if stuck is not None:
        error(f"dead letter {stuck.id} cannot be replayed ({stuck.reason}); stopped before it")
        ctx.exit(EXIT_FAILED)
