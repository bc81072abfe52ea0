"""`ragsync token`: session tokens for operators and tests."""

from __future__ import annotations

import re

import click

from ragsync.commands.common import settings_of
from schemas.principal import Principal

MAX_TTL_S = 366 * 24 * 3600
"""A session token longer-lived than a year is a credential nobody will remember to revoke."""

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_NAME = re.compile(r"^[^\s,:][^\s,]*$")
"""A user or group name: what an ACL entry `user:<name>` / `group:<name>` can match (no spaces, no commas)."""


def _tenant(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _TENANT.fullmatch(value):  # not .match: its '$' also matches before a final newline
        raise click.BadParameter(
            f"{value!r} is not a tenant name: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


def _user(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _NAME.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a user name: no spaces or commas, not starting with ':'")
    return value


def _groups(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    groups = tuple(g.strip() for g in value.split(",") if g.strip())
    bad = [g for g in groups if not _NAME.fullmatch(g)]
    if bad:
        raise click.BadParameter(f"{bad[0]!r} is not a group name: no spaces, not starting with ':'")
    return groups


def _ttl(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if not 0 < value <= MAX_TTL_S:
        raise click.BadParameter(f"{value} is not a lifetime: give seconds from 1 to {MAX_TTL_S} (366 days)")
    return value


@click.group()
def token() -> None:
    """Session tokens: JWTs (HS256) signed with the session secret under its key id."""


@token.command("issue")
@click.option("--tenant", required=True, callback=_tenant, help="The tenant whose documents the token may read.")
@click.option("--user", required=True, callback=_user, help="The user ID (ACL entries user:<id>).")
@click.option("--groups", default="", callback=_groups, help="Comma-separated group names (ACL entries group:<name>).")
@click.option(
    "--ttl", default=3600, show_default=True, type=int, callback=_ttl, help="Seconds until the token expires."
)
@click.pass_context
def token_issue(ctx: click.Context, tenant: str, user: str, groups: tuple[str, ...], ttl: int) -> None:
    """Print a session token (a JWT: sub, tenant, groups, iat, exp, aud) for a principal.

    Backends usually mint these themselves with any JWT library and the same secret (see README).

    \b
    Exit status: 0 printed; 2 an invalid tenant, user, group or --ttl, or bad settings.
    """
    settings = settings_of(ctx)
    principal = Principal(tenant=tenant, user=user, groups=groups)
    from ragsync.wiring import token_signer

    click.echo(token_signer(settings).issue(principal, ttl_s=ttl))
