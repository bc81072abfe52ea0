"""`ragsync operator`: the home's operator credential (ragsync.operator_key)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from ragsync.commands.common import settings_of


@click.group()
def operator() -> None:
    """The operator key: what commands show the home's `ragsync serve` to read its status and traces."""


@operator.command("rotate")
@click.pass_context
def rotate(ctx: click.Context) -> None:
    """Replace the home's operator key now: the previous key is refused from this moment.

    The key lives in <home>/operator.key (0600) and expires after operator_key_ttl_s (24 h by default);
    commands make a new one when it has expired, so rotating is for a key that may have been copied.
    A running serve needs no restart. The key itself is never printed.

    \b
    Exit status: 0 rotated; 2 bad settings.
    """
    from ragsync.home import secure_home
    from ragsync.operator_key import operator_keys

    settings = settings_of(ctx)
    secure_home(settings.home)
    key = operator_keys(settings).rotate()
    expires = datetime.fromtimestamp(key.expires_at, UTC).isoformat(timespec="seconds")
    click.echo(f"rotated the operator key of {settings.home}: the previous one is refused; this one expires {expires}")
