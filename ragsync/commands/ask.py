"""`ragsync ask`: one question, answered from what the token's principal may read."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from query.tokens import InvalidToken
from ragsync.commands.common import EXIT_USAGE, fail, settings_of
from ragsync.wiring import build


def parse_as_of(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"not an ISO date or datetime: {value!r}", param_hint="--as-of") from exc


@click.command()
@click.argument("question")
@click.option("--token", envvar="RAGSYNC_TOKEN", required=True, help="Session token [env RAGSYNC_TOKEN].")
@click.option("--as-of", "as_of", default=None, help="Answer as of this date (ISO), e.g. 2026-01-15.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable answer.")
@click.option("--show-trace", is_flag=True, help="Add the run's trace (operators; passage IDs only).")
@click.pass_context
def ask(ctx: click.Context, question: str, token: str, as_of: str | None, as_json: bool, show_trace: bool) -> None:
    """Answer QUESTION from the documents the token's principal may read, with quoted sources.

    \b
    Exit status: 0 answered or abstained; 2 invalid token or bad usage.
    """
    settings = settings_of(ctx)
    instant = parse_as_of(as_of)
    components = build(settings)
    try:
        worker = components.query_worker()
        try:
            result = worker.ask_with_token(token, question, instant)
        except InvalidToken as exc:
            fail(f"invalid session token: {exc}", EXIT_USAGE)
    finally:
        components.close()
    payload: dict[str, Any] = result.public()
    if show_trace:
        payload["trace"] = result.trace.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(payload, indent=2))
        return
    if result.answered:
        click.echo(result.answer)
        click.echo("")
        click.echo("Sources:")
        for i, claim in enumerate(result.claims, 1):
            click.echo(f'  [{i}] "{claim.quote}"')
            click.echo(f"      {claim.passage_id}  {claim.source_url}")
    else:
        click.echo(result.message)
    if show_trace:
        click.echo(json.dumps(payload["trace"], indent=2))
