"""The `ragsync` command line. Every command works on the profile chosen by --profile or RAGSYNC_PROFILE.

Each command lives in its own module under ragsync/commands; this module only assembles them.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click

from ragsync.commands.ask import ask
from ragsync.commands.audit import audit
from ragsync.commands.dlq import dlq
from ragsync.commands.erase import erase
from ragsync.commands.evaluate import eval_
from ragsync.commands.model import model
from ragsync.commands.operator import operator
from ragsync.commands.service import serve, status, worker
from ragsync.commands.sync import sync
from ragsync.commands.token import token
from ragsync.commands.verify import verify


class Commands(click.Group):
    """Turns a store that cannot be used into its one-line message and exit status 1, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from indexer.ports import StoreUnavailable
        from ragsync.commands.common import EXIT_FAILED, fail

        try:
            return super().invoke(ctx)
        except StoreUnavailable as exc:
            fail(str(exc), EXIT_FAILED)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--profile",
    type=click.Choice(["embedded", "cluster"]),
    default=None,
    help="embedded (default): no servers. cluster: Kafka, Elasticsearch, Qdrant, Redis.",
)
@click.option(
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    help="Data folder of the embedded profile [env RAGSYNC_HOME, default ./.ragsync].",
)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="ragsync")
@click.pass_context
def main(ctx: click.Context, profile: str | None, home: Path | None, verbose: int) -> None:
    """Keep retrieval indexes in sync with document sources, and answer only from what the asker may see.

    \b
    Quick start:
      ragsync demo                         # the whole job on a sample drive, no servers
      ragsync sync ./docs --tenant acme    # index a folder (.ragsync-acl.toml manifests give tenant and ACL)
      ragsync token issue --tenant acme --user ann --groups staff
      ragsync ask "What is the refund window?" --token <token>
      ragsync serve                        # the HTTP API (docs at /docs) and operator metrics

    \b
    Exit status: 0 success; 1 failure (e.g. a failed eval gate); 2 bad usage or input
    (invalid token, settings, dates); 3 sync finished with per-document read errors.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        logging.getLogger("ragsync.trace").setLevel(logging.WARNING)
    if verbose == 0:
        # kafka-python logs an ERROR per failed connection attempt while it retries; the event log
        # turns the outcome into one line of its own (KafkaUnavailable), so the attempts show with -v
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    ctx.obj = {"profile": profile, "home": home}


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to build the sample drive and its index (default: a temporary folder).",
)
@click.pass_context
def demo(ctx: click.Context, directory: Path | None) -> None:
    """Build a sample drive with two tenants and walk through the whole job, narrating each step.

    \b
    Exit status: 0 every step behaved as narrated; 1 a step did not; 2 bad settings.
    """
    from ragsync.commands.common import settings_of
    from ragsync.demo import run_demo

    sys.exit(run_demo(directory, settings_of(ctx)))


for command in (sync, ask, token, audit, erase, dlq, eval_, model, operator, worker, serve, status, verify):
    main.add_command(command)


if __name__ == "__main__":
    main()
