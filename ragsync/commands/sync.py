"""`ragsync sync`: scan a source, publish its changes, and (embedded profile) see them applied.

The scan only publishes into the event log. Then, on the embedded profile: when the home has an
owner (`ragsync serve`), the owner applies the events and this command waits until it has (the
report comes from the journal the owner writes with its offset commits); when it has none, this
command owns the home from before its scan until it has applied them itself, and opens the stores
while the scan publishes (`_sync_pass`). `--watch` keeps doing that as files change.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ragsync.commands.common import EXIT_PARTIAL, EXIT_USAGE, declared_tenants, fail, note, settings_of, warn
from ragsync.home_lock import HomeLock, OwnerInfo, current_owner
from ragsync.pipeline import Published, apply_events, publish_and_apply, publish_source, wait_applied
from ragsync.settings import Settings
from ragsync.wiring import Components, build
from streams.dispatch import Stats

if TYPE_CHECKING:
    from connectors.base import SourceConnector


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
@click.option(
    "--tenant",
    "--tenants",
    "tenant",
    multiple=True,
    help="A tenant this source may hold (repeatable, or comma-separated; required): a manifest naming any other "
    "tenant locks its folder.",
)
@click.option(
    "--permissions",
    type=click.Choice(["manifests", "posix"]),
    default="manifests",
    show_default=True,
    help="Where a folder's readers come from: its .ragsync-acl.toml manifests, or the files' own POSIX "
    "permissions (mode bits, owners, groups, ACLs; one --tenant), which a manifest may only narrow.",
)
@click.option("--force", is_flag=True, help="Re-emit every document (e.g. after changing chunk settings).")
@click.option("--no-apply", is_flag=True, help="Only publish events (cluster: workers apply them).")
@click.option("--no-wait", is_flag=True, help="With a running `ragsync serve`: return once published.")
@click.option("--watch", is_flag=True, help="Keep running: publish changes as files change (a folder only).")
@click.option("--interval", default=300.0, show_default=True, help="With --watch: seconds between full passes.")
@click.option("--debounce", default=0.3, show_default=True, help="With --watch: seconds files must be quiet.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (with --watch: a line per pass).")
@click.pass_context
def sync(
    ctx: click.Context,
    path: Path,
    is_git: bool,
    ref: str,
    subdir: str,
    url_base: str | None,
    source_name: str | None,
    tenant: tuple[str, ...],
    permissions: str,
    force: bool,
    no_apply: bool,
    no_wait: bool,
    watch: bool,
    interval: float,
    debounce: float,
    as_json: bool,
) -> None:
    """Scan PATH (a folder, or a git wiki with --git) for changes and apply them to every store and cache.

    Emits an upsert per new or changed document, an ACL event per permission change and a delete per
    removed file (only after a listing with no read errors); ACL changes and deletes are published
    before any content is read. While `ragsync serve` owns the home, the serve applies them and
    sync waits until it has (progress shown; --no-wait returns at once). In
    the cluster profile the events go to Kafka and `ragsync worker` applies them. Documents are known
    as <source>:<path>; a source name stays bound to its folder or repository, so a second source
    must be given another --source. --tenant declares the tenants the source may hold: a manifest
    may name only those (and below a tenant only that tenant), so no folder's writer can move its
    files into another tenant.

    With --watch, sync keeps running: every change of the folder (debounced) is published as it
    happens, and a full pass, the only one that may delete, runs every --interval seconds and as
    soon as a file was removed.

    \b
    Exit status: 0 synced; 3 synced, but some documents could not be read (listed; they are kept,
    never deleted); 2 bad usage; 1 a store unreachable, e.g. Kafka down (kafka_connect_timeout_s) or
    events not acknowledged: those are not recorded as synced, and the next sync sends them again.
    """
    from connectors.drive import DriveConnector
    from connectors.git_wiki import GitWikiConnector
    from connectors.state import HomeFormatError, SourceConflict

    settings = settings_of(ctx)
    if watch and is_git:
        fail("--watch watches a folder; declare a git repository in [[sources]] with an interval_s", EXIT_USAGE)
    if is_git and permissions != "manifests":
        fail("--permissions posix reads a folder's own permissions; a git wiki has manifests only", EXIT_USAGE)
    tenants = declared_tenants(tenant, "sync")
    try:
        connector: SourceConnector = (
            GitWikiConnector(path, tenants=tenants, ref=ref, subdir=subdir, name=source_name)
            if is_git
            else DriveConnector(
                path,
                source_name,
                tenants=tenants,
                refuse=[settings.home],
                url_base=url_base,
                permissions=permissions,
            )
        )
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    apply = not no_apply and settings.profile == "embedded"
    components = build(settings)  # the publishing side: only the event log is opened
    console = Console(stderr=True)
    watcher = None
    if watch:  # watching before the first pass: a change made while it runs gets a pass of its own
        from ragsync.sources import ChangeWatcher

        watcher = ChangeWatcher(path, ignore=[settings.home])
        watcher.start()
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
            try:
                published, stats, dense = _sync_pass(
                    settings,
                    components,
                    connector,
                    apply=apply,
                    no_wait=no_wait,
                    bar=bar,
                    force=force,
                    on_scan=lambda n: bar.advance(scan_task, n),
                    on_wait=lambda: note("waiting for another scan of this source to finish"),
                )
            except (SourceConflict, HomeFormatError) as exc:
                bar.stop()
                fail(str(exc), EXIT_USAGE)
        summary = _summary(published, stats, dense)
        _report(summary, published, as_json)
        if watcher is not None:
            _watch(
                settings,
                components,
                connector,
                watcher,
                apply=apply,
                interval_s=interval,
                debounce_s=debounce,
                as_json=as_json,
            )
    finally:
        if watcher is not None:
            watcher.stop()
        components.close()
    if published.scan.errors and not watch:
        ctx.exit(EXIT_PARTIAL)


def _sync_pass(
    settings: Settings,
    components: Components,
    connector: SourceConnector,
    *,
    apply: bool,
    no_wait: bool,
    bar: Progress | None = None,
    force: bool = False,
    allow_deletes: bool = True,
    on_scan: Callable[[int], None] | None = None,
    on_wait: Callable[[], None] | None = None,
) -> tuple[Published, Stats | None, bool | None]:
    """One scan, and what became of its events (`_applied`'s stats and dense).

    Applying on the embedded profile with no owner: this process owns the home from before the scan
    to the end of the apply, and opens the worker and its stores while the scan publishes
    (pipeline.publish_and_apply, as sync_source does). Meanwhile a `ragsync serve` that starts finds
    the home busy and waits, saying so once ("waiting for `ragsync sync` (pid N) to finish with the
    stores"), as a command that needs the stores does (ask, eval); both get the home when this pass
    ends. With an owner (or one that took the home first), the scan only publishes and the owner
    applies."""
    if apply and current_owner(settings.home) is None:
        lock = HomeLock(settings.home)
        if lock.try_acquire("sync"):
            try:
                with _applier(settings, bar) as (applier, advance, backlog):
                    here, applied = publish_and_apply(
                        applier,
                        connector,
                        force=force,
                        allow_deletes=allow_deletes,
                        on_scan=on_scan,
                        on_wait=on_wait,
                        on_apply=advance,
                        on_backlog=backlog,
                    )
                    return here, applied, _dense(applier)
            finally:
                lock.release()
    published = publish_source(
        components, connector, force=force, allow_deletes=allow_deletes, on_scan=on_scan, on_wait=on_wait
    )
    stats, dense = _applied(settings, components, published, apply=apply, no_wait=no_wait, bar=bar)
    return published, stats, dense


def _applied(
    settings: Settings,
    components: Components,
    published: Published,
    *,
    apply: bool,
    no_wait: bool,
    bar: Progress | None = None,
) -> tuple[Stats | None, bool | None]:
    """Stats of applying what was published, and whether it was embedded (None: not known here)."""
    if not apply:
        return None, None
    home = settings.home
    while True:
        owner = current_owner(home)
        if owner is not None:
            if no_wait:
                note(f"published; {owner.describe()} applies them")
                return None, None
            stats = _wait_for(owner, components, published, bar)
            if stats is not None:
                return stats, _owner_dense(owner)
            note(f"{owner.describe()} stopped before applying everything; applying here")
        lock = HomeLock(home)
        if lock.try_acquire("sync"):
            try:
                return _apply_here(settings, bar)
            finally:
                lock.release()
        # another process became the owner in between: wait for it instead


def _wait_for(owner: OwnerInfo, components: Components, published: Published, bar: Progress | None) -> Stats | None:
    task = bar.add_task(f"applied by {owner.describe()}", total=None) if bar is not None else None

    def progress(done: int, total: int) -> None:
        if bar is not None and task is not None:
            bar.update(task, completed=done, total=total)

    home = components.settings.home
    return wait_applied(
        components, published, owner_alive=lambda: current_owner(home) is not None, on_progress=progress
    )


@contextlib.contextmanager
def _applier(
    settings: Settings, bar: Progress | None
) -> Iterator[tuple[Components, Callable[[int], None], Callable[[int], None]]]:
    """The home's stores for this process, which owns the home meanwhile, with the progress bar's
    callbacks (applied records, the backlog); closed again at the end."""
    applier = build(settings)
    task = bar.add_task("indexing", total=None, visible=False) if bar is not None else None

    def advance(n: int) -> None:
        if bar is not None and task is not None:
            bar.advance(task, n)

    def backlog(n: int) -> None:
        if bar is not None and task is not None:
            bar.update(task, total=n, visible=True)

    try:
        yield applier, advance, backlog
    finally:
        applier.close()


def _dense(applier: Components) -> bool:
    """Whether the stores were written with vectors (the model was loaded)."""
    return "embedder" in applier.opened() and applier.embedder is not None


def _apply_here(settings: Settings, bar: Progress | None) -> tuple[Stats, bool]:
    """This process owns the home meanwhile: open the stores, drain the log, close them again."""
    with _applier(settings, bar) as (applier, advance, backlog):
        stats = apply_events(applier, on_apply=advance, on_backlog=backlog)
        return stats, _dense(applier)


def _owner_dense(owner: OwnerInfo) -> bool | None:
    """Whether the owner embeds (its /readyz says whether its vector store is open)."""
    if not owner.api:
        return None
    import httpx

    try:
        body = httpx.get(f"{owner.api}/readyz", timeout=10).json()
        return bool(body["stores"]["vector"] == "open")
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def _summary(published: Published, stats: Stats | None, dense: bool | None) -> dict[str, Any]:
    report = published.scan
    summary: dict[str, Any] = {
        "upserts": report.upserts,
        "acl_changes": report.acl_changes,
        "deletes": report.deletes,
        "unchanged": report.unchanged,
        "errors": report.errors,
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail} for s in report.skipped],
        "locked": report.locked,
        "decoded": report.decoded,
        "narrowed": report.narrowed,
        "bounded": report.bounded,
        "deletes_skipped": report.deletes_skipped,
        "reindexed": published.reindexed,
        "dense": dense,
    }
    if stats is not None:
        summary.update(
            applied=stats.applied,
            stale=stats.stale,
            dead_lettered=stats.dead_lettered,
            passages_written=stats.passages_written,
            passages_embedded=stats.passages_embedded,
            max_revocation_lag_s=round(stats.max_revocation_lag_s, 3),
        )
    return summary


def _report(summary: dict[str, Any], published: Published, as_json: bool, prefix: str = "") -> None:
    if as_json:
        click.echo(json.dumps(summary, indent=None if prefix else 2))
        return
    for problem in published.scan.errors:
        note(f"read error: {problem}")
    for skipped in published.scan.skipped:
        note(f"not indexed: {skipped}")
    for decoded in published.scan.decoded:
        note(f"not UTF-8: {decoded}")
    for narrowed in published.scan.narrowed:
        note(f"permissions narrowed: {narrowed}")
    for bounded in published.scan.bounded:
        note(f"history bounded: {bounded}")
    if published.scan.deletes_skipped:
        warn("deletions skipped: the listing had read errors (it may be incomplete), nothing was removed")
    counts = {
        k: len(v) if k in ("skipped", "decoded", "narrowed", "bounded") else v
        for k, v in summary.items()
        if k != "errors"
    }
    click.echo(prefix + " ".join(f"{k}={v}" for k, v in counts.items()))


def _watch(
    settings: Settings,
    components: Components,
    connector: Any,
    watcher: Any,
    *,
    apply: bool,
    interval_s: float,
    debounce_s: float,
    as_json: bool,
) -> None:
    """Publish every change of the folder as it settles; a full pass every interval and after a removal."""
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    if not as_json:
        note(f"watching {connector.root} (full pass every {interval_s:g}s); Ctrl-C to stop")
    next_full = time.monotonic() + interval_s
    try:
        while not stopping:
            change = watcher.take(debounce_s)
            kind = "full" if time.monotonic() >= next_full or (change is not None and change.removed) else None
            if kind is None and change is not None:
                kind = "changes"
            if kind is None:
                time.sleep(0.05)
                continue
            started = time.perf_counter()
            published, stats, dense = _sync_pass(
                settings, components, connector, apply=apply, no_wait=False, allow_deletes=kind == "full"
            )
            if kind == "full":
                next_full = time.monotonic() + interval_s
            summary = {"pass": kind, **_summary(published, stats, dense)}
            summary["seconds"] = round(time.perf_counter() - started, 3)
            r = published.scan
            if as_json or kind == "full" or r.upserts or r.acl_changes or r.deletes or r.errors:
                _report(summary, published, as_json, prefix=f"{time.strftime('%H:%M:%S')} ")
    except KeyboardInterrupt:
        pass
