"""`ragsync sync`: scan a source, publish its changes, and (embedded profile) apply them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ragsync.commands.common import EXIT_PARTIAL, EXIT_USAGE, fail, note, settings_of, warn
from ragsync.wiring import build


@click.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--git", "is_git", is_flag=True, help="PATH is a git repository: index the wiki committed at --ref.")
@click.option("--ref", default="HEAD", show_default=True, help="With --git: the branch, tag or commit to index.")
@click.option("--subdir", default="", help="With --git: only this folder of the repository (its root for doc IDs).")
@click.option(
    "--url-base",
    default=None,
    help="Where users open the files: source_url = URL_BASE/<path> (default: the root manifest's url_base, "
    "else the path relative to PATH).",
)
@click.option(
    "--source",
    "source_name",
    default=None,
    help="Source name: the namespace of this source's doc IDs (<source>:<path>). Default: from the folder's name.",
)
@click.option("--force", is_flag=True, help="Re-emit every document (e.g. after changing chunk settings).")
@click.option("--no-apply", is_flag=True, help="Only publish events (cluster: workers apply them).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def sync(
    ctx: click.Context,
    path: Path,
    is_git: bool,
    ref: str,
    subdir: str,
    url_base: str | None,
    source_name: str | None,
    force: bool,
    no_apply: bool,
    as_json: bool,
) -> None:
    """Scan PATH (a folder, or a git wiki with --git) for changes and apply them to every store and cache.

    Emits an upsert per new or changed document, an ACL event per permission change and a delete per
    removed file (only after a scan with no read errors). In the cluster profile the events go to
    Kafka and `ragsync worker` applies them. Documents are known as <source>:<path>; a source name
    stays bound to its folder or repository, so a second source must be given another --source.

    \b
    Exit status: 0 synced; 3 synced, but some documents could not be read (listed; nothing
    was deleted); 2 bad usage.
    """
    from connectors.base import SourceConnector
    from connectors.drive import DriveConnector
    from connectors.git_wiki import GitWikiConnector
    from connectors.state import HomeFormatError, SourceConflict
    from ragsync.pipeline import sync_source

    settings = settings_of(ctx)
    try:
        connector: SourceConnector = (
            GitWikiConnector(path, ref=ref, subdir=subdir, name=source_name)
            if is_git
            else DriveConnector(path, source_name, refuse=[settings.home], url_base=url_base)
        )
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    apply = not no_apply and settings.profile == "embedded"
    components = build(settings)
    console = Console(stderr=True)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=as_json or not console.is_terminal,
        ) as bar:
            scan_task = bar.add_task("scanning", total=None)
            apply_task = bar.add_task("indexing", total=None, visible=False)
            try:
                report = sync_source(
                    components,
                    connector,
                    force=force,
                    apply=apply,
                    on_scan=lambda n: bar.advance(scan_task, n),
                    on_apply=lambda n: bar.advance(apply_task, n),
                    on_backlog=lambda n: bar.update(apply_task, total=n, visible=True),
                )
            except (SourceConflict, HomeFormatError) as exc:
                bar.stop()
                fail(str(exc), EXIT_USAGE)
        dense = "embedder" in components.opened() and components.embedder is not None
    finally:
        components.close()
    summary: dict[str, Any] = {
        "upserts": report.scan.upserts,
        "acl_changes": report.scan.acl_changes,
        "deletes": report.scan.deletes,
        "unchanged": report.scan.unchanged,
        "errors": report.scan.errors,
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail} for s in report.scan.skipped],
        "locked": report.scan.locked,
        "decoded": report.scan.decoded,
        "deletes_skipped": report.scan.deletes_skipped,
        "reindexed": report.reindexed,
        "dense": dense,
    }
    if report.stats is not None:
        summary.update(
            applied=report.stats.applied,
            stale=report.stats.stale,
            dead_lettered=report.stats.dead_lettered,
            passages_written=report.stats.passages_written,
            passages_embedded=report.stats.passages_embedded,
            max_revocation_lag_s=round(report.stats.max_revocation_lag_s, 3),
        )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for problem in report.scan.errors:
            note(f"read error: {problem}")
        for skipped in report.scan.skipped:
            note(f"not indexed: {skipped}")
        for decoded in report.scan.decoded:
            note(f"not UTF-8: {decoded}")
        if report.scan.deletes_skipped:
            warn("deletions skipped: the scan had read errors, nothing was removed")
        counts = {k: len(v) if k in ("skipped", "decoded") else v for k, v in summary.items() if k != "errors"}
        click.echo(" ".join(f"{k}={v}" for k, v in counts.items()))
    if report.scan.errors:
        ctx.exit(EXIT_PARTIAL)
