"""`ragsync ask`: one question, answered from what the token's principal may read."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

import click

from query.as_of import parse_as_of
from query.tokens import InvalidToken
from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, fail, settings_of
from ragsync.settings import Settings
from schemas.passages import location_of


def parse_as_of_option(value: str | None) -> datetime | None:
    """The API's as_of rules (query.as_of): a date or datetime, never the future; exit 2 otherwise."""
    if value is None:
        return None
    try:
        return parse_as_of(value, field="--as-of")
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


def nothing_indexed(settings: Settings) -> bool:
    """An embedded home that no sync has applied to yet (the cluster stores are not ours to probe)."""
    return settings.profile == "embedded" and not (settings.home / "lexical.db").exists()


@click.command()
@click.argument("question")
@click.option("--token", envvar="RAGSYNC_TOKEN", required=True, help="Session token [env RAGSYNC_TOKEN].")
@click.option(
    "--as-of",
    "as_of",
    default=None,
    help="Answer as of this date or ISO datetime (not the future), e.g. 2026-01-15 or 2026-01-15T09:00:00+01:00.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable answer.")
@click.option("--show-trace", is_flag=True, help="Add the run's trace (operators; passage IDs only).")
@click.pass_context
def ask(ctx: click.Context, question: str, token: str, as_of: str | None, as_json: bool, show_trace: bool) -> None:
    """Answer QUESTION from the documents the token's principal may read, with quoted sources.

    \b
    Exit status: 0 answered or abstained; 1 nothing indexed yet; 2 invalid token, settings or
    --as-of, or bad usage.
    """
    from ragsync.commands.owned import stores_or_owner
    from ragsync.owner_client import OwnerClient, OwnerRefused, OwnerUnreachable

    settings = settings_of(ctx)
    instant = parse_as_of_option(as_of)
    if nothing_indexed(settings):
        fail(
            f"nothing is indexed in {settings.home} yet: run `ragsync sync <folder>` first, "
            "or point --home / RAGSYNC_HOME at an existing home",
            EXIT_FAILED,
        )
    payload: dict[str, Any]
    with stores_or_owner(settings, "ask") as stores:
        if isinstance(stores, OwnerClient):  # `ragsync serve` owns the home: ask it, as a backend would
            try:
                payload = stores.ask(token, question, instant, trace=show_trace)
            except OwnerRefused as exc:
                if exc.status_code == 401:
                    fail("invalid session token", EXIT_USAGE)
                fail(f"{stores.owner.describe()} answered {exc.status_code}: {exc}")
            except OwnerUnreachable as exc:
                fail(str(exc))
        else:
            worker = stores.query_worker()
            try:
                result = worker.ask_with_token(token, question, instant)
            except InvalidToken as exc:
                fail(f"invalid session token: {exc}", EXIT_USAGE)
            payload = cast(dict[str, Any], result.public())
            if show_trace:
                payload["trace"] = result.trace.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(payload, indent=2))
        return
    if payload["answered"]:
        click.echo(payload["answer"])
        click.echo("")
        click.echo("Sources:")
        for i, claim in enumerate(payload["claims"], 1):
            click.echo(f'  [{i}] "{claim["quote"]}"')
            location = location_of(claim["source_url"])
            click.echo(f"      {claim['passage_id']}  {claim['source_url']}" + (f"  ({location})" if location else ""))
    else:
        click.echo(payload["message"])
    if show_trace:
        click.echo(json.dumps(payload["trace"], indent=2))
