"""What every command shares: settings from the global options, and plain messages.

Messages are printed as plain text, never parsed as markup and never wrapped, so a manifest
entry such as "[/]" prints as itself and a CI log keeps one message per line for grep.
Rich is used only for progress bars on a terminal and for tables (`output_console`: no markup,
and off a terminal no wrapping and no colour). Colour and bold only reach a terminal.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console

from ragsync.settings import Settings, SettingsError, load_settings

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3


def settings_of(ctx: click.Context) -> Settings:
    obj: dict[str, Any] = ctx.find_root().obj or {}
    overrides: dict[str, Any] = {k: v for k, v in obj.items() if v is not None}
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        for problem in exc.problems:
            error(problem)
        sys.exit(EXIT_USAGE)


UNWRAPPED_WIDTH = 100_000
"""Width of a console that is not a terminal: wide enough that rich never breaks a line."""


def _color(err: bool = True) -> bool:
    return (sys.stderr if err else sys.stdout).isatty()


def say(message: str, *, fg: str | None = None, bold: bool = False) -> None:
    """A line of output on stdout, styled only on a terminal."""
    styled = fg is not None or bold
    click.echo(click.style(message, fg=fg, bold=bold) if styled and _color(err=False) else message)


def output_console(stderr: bool = False) -> Console:
    """A rich console for tables: never parses markup or emoji codes; off a terminal never wraps or colours."""
    from rich.console import Console

    console = Console(stderr=stderr, markup=False, highlight=False, emoji=False)
    if console.is_terminal:
        return console
    return Console(
        stderr=stderr,
        markup=False,
        highlight=False,
        emoji=False,
        width=UNWRAPPED_WIDTH,
        soft_wrap=True,
        no_color=True,
    )


def note(message: str) -> None:
    """A line of information on stderr (stdout stays for results)."""
    click.echo(message, err=True)


def warn(message: str) -> None:
    click.echo(click.style("warning: ", fg="yellow") + message if _color() else f"warning: {message}", err=True)


def error(message: str) -> None:
    click.echo(click.style("error: ", fg="red") + message if _color() else f"error: {message}", err=True)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    error(message)
    sys.exit(code)


def declared_tenants(values: tuple[str, ...], what: str) -> tuple[str, ...]:
    """The tenants named with `--tenant` (repeatable, or comma-separated), checked; none is a usage error.

    A source's tenants are declared by whoever runs the command, never taken from a manifest in
    the source: a folder's writer must not be able to move documents into another tenant.
    """
    from connectors.access import check_tenants

    tenants = tuple(sorted({t.strip() for value in values for t in value.split(",") if t.strip()}))
    if not tenants:
        fail(
            f"{what}: name the tenants the source may hold with --tenant (e.g. --tenant acme --tenant globex); "
            "a manifest may name only a declared tenant",
            EXIT_USAGE,
        )
    try:
        check_tenants(tenants)
    except ValueError as exc:
        fail(f"--tenant: {exc}", EXIT_USAGE)
    return tenants
