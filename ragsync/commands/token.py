"""`ragsync token`: session tokens for operators and tests."""

from __future__ import annotations

import click

from query.tokens import issue_token
from ragsync.commands.common import settings_of
from schemas.principal import Principal


@click.group()
def token() -> None:
    """Session tokens (HMAC-SHA256 signed with the server secret)."""


@token.command("issue")
@click.option("--tenant", required=True)
@click.option("--user", required=True)
@click.option("--groups", default="", help="Comma-separated group names.")
@click.option("--ttl", default=3600, show_default=True, help="Seconds until the token expires.")
@click.pass_context
def token_issue(ctx: click.Context, tenant: str, user: str, groups: str, ttl: int) -> None:
    """Print a signed session token for a principal (operators and tests)."""
    settings = settings_of(ctx)
    principal = Principal(tenant=tenant, user=user, groups=tuple(g.strip() for g in groups.split(",") if g.strip()))
    click.echo(issue_token(settings.secret(), principal, ttl_s=ttl))
