"""What every command shares: settings from the global options, and plain messages.

Messages are printed as plain text, never parsed as markup and never wrapped, so a manifest
entry such as "[/]" prints as itself and a CI log keeps one message per line for grep.
Rich is used only for progress bars and tables on a terminal.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

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


def _color() -> bool:
    return sys.stderr.isatty()


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
