"""Long-running commands and their status: `ragsync serve`, `ragsync worker`, `ragsync status`.

On the embedded profile `serve` (or `worker`, without HTTP) owns the home: it holds the home's
owner lock, opens the stores once and runs the indexer and the scheduled syncs in-process while
it answers (ragsync.owner). Every other command cooperates with it (ragsync.commands.owned).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, declared_tenants, error, fail, note, settings_of
from ragsync.home_lock import HomeLock, HomeOwned, OwnerInfo
from ragsync.settings import Settings, SourceSettings
from ragsync.wiring import build
from schemas.events import source_name_from


def _sources(
    settings: Settings, watch: tuple[Path, ...], interval_s: float, tenants: tuple[str, ...]
) -> list[SourceSettings]:
    declared = list(settings.sources)
    names = {s.name for s in declared}
    for i, path in enumerate(watch):
        name = source_name_from(path.resolve().name, "drive")
        while name in names:
            name = f"{name[:28]}-{i}"
        names.add(name)
        declared.append(
            SourceSettings(name=name, kind="drive", path=path, tenants=tenants, watch=True, interval_s=interval_s)
        )
    return declared


def _check_sources(settings: Settings, sources: list[SourceSettings]) -> None:
    """A source that cannot be synced at all (a missing path, a file for a folder, an unknown git ref)
    stops the start, one line each, exit 2: serving would only log the same error every interval."""
    import logging
    import os

    from ragsync.settings import config_file
    from ragsync.sources import startup_problems

    declared = list(settings.sources)
    where = "environment variable RAGSYNC_SOURCES" if "RAGSYNC_SOURCES" in os.environ else str(config_file()[0])
    problems = startup_problems(declared, sources[len(declared) :], settings.home, where)
    if problems:
        for problem in problems:
            error(problem)
        sys.exit(EXIT_USAGE)
    # Each pass's line and its problems are what an operator reads in serve's log (INFO, not only with -v).
    logging.getLogger("ragsync.sources").setLevel(logging.INFO)


def _take_home(settings: Settings, command: str, api: str | None) -> HomeLock:
    """The home's owner lock: waits for a short-lived owner (a sync scanning and applying), saying so
    once; one line for a long-lived one."""
    told: list[bool] = []

    def wait(owner: OwnerInfo | None) -> bool:
        if owner is None or owner.long_lived:
            return False
        if not told:
            note(f"waiting for {owner.describe()} to finish with the stores")
            told.append(True)
        return True

    lock = HomeLock(settings.home)
    try:
        lock.acquire(command, api, wait=wait)
    except HomeOwned as exc:
        fail(f"{settings.home} is already owned by {exc.owner.describe() if exc.owner else 'another process'}")
    return lock


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the API listener.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--ssl-certfile", default=None, help="Serve HTTPS with this certificate (PEM).")
@click.option("--ssl-keyfile", default=None, help="The certificate's private key (PEM).")
@click.option(
    "--watch",
    "watch",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Keep this folder in sync as it changes (repeatable), besides the [[sources]] of the settings file.",
)
@click.option(
    "--tenant",
    "--tenants",
    "tenant",
    multiple=True,
    help="With --watch: a tenant the watched folders may hold (repeatable, or comma-separated; required).",
)
@click.option("--interval", default=300.0, show_default=True, help="With --watch: seconds between full passes.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Cluster profile: serving processes on one socket (answers use more than one core).",
)
@click.option("--listen-fds", default=None, hidden=True, help="A worker of --workers: the inherited sockets.")
@click.option("--ready-fd", default=None, type=int, hidden=True, help="A worker of --workers: where to say ready.")
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    watch: tuple[Path, ...],
    tenant: tuple[str, ...],
    interval: float,
    workers: int,
    listen_fds: str | None,
    ready_fd: int | None,
) -> None:
    """Answer questions over HTTP while keeping the indexes in sync.

    \b
    POST /v1/ask                 Authorization: Bearer <session token>, {"question": ..., "as_of": ...}
    GET  /healthz, /readyz       liveness; readiness, with the stores and the backlog per topic
                                 ("degraded", still 200, names a source whose last pass failed)
    GET  /openapi.json, /docs    the API's schema
    POST /v1/webhooks/{source}   document pushes, HMAC-SHA256 signed (each [webhooks.<source>] its secret)

    On the embedded profile serve owns the home: it applies every event published into the log
    (by `ragsync sync` in other processes, webhook pushes, --watch folders and the [[sources]] of
    the settings file, synced on their intervals), ACL changes and deletions first; every other
    command works meanwhile (`ask`, `status`, `verify` and `audit deletion` go through its API).
    Each pass of a source is logged (INFO), each problem it met (WARNING); a source that cannot
    be synced at all (missing path, unknown git ref, two sources with one name) stops the start.
    SIGTERM finishes the batch in hand, commits it and exits. On the cluster profile serve answers
    from the shared stores and, when sources are declared (or --watch given), also scans them on
    their schedules and publishes to Kafka, where the workers apply them; declare them on one serve
    only (its home keeps their connector state).

    Operator metrics (Prometheus) are served on their own listener, metrics_host:metrics_port
    (127.0.0.1:9464 by default), never on the API. Each request is logged (method, path, status,
    latency; never the question). On the cluster profile --workers N serves from N processes on
    one socket, the metrics every worker's (sources are declared on a serve of one worker); an
    embedded home has one owner process, so there --workers stays 1. For workers behind gunicorn,
    run the ASGI app ragsync.server:app.

    \b
    Exit status: 0 stopped; 1 the home is owned by another serve or worker, or its stores cannot
    be opened; 2 bad settings or an address that cannot be used.
    """
    import logging

    from connectors.state import HomeFormatError, SourceConflict
    from ragsync.owner import Owner
    from ragsync.owner_api import mount_owner
    from ragsync.server import bind, run_server
    from ragsync.settings import SettingsError
    from ragsync.sync_history import source_health

    if (ssl_certfile is None) != (ssl_keyfile is None):
        fail("--ssl-certfile and --ssl-keyfile go together", EXIT_USAGE)
    settings = settings_of(ctx)
    logging.getLogger("ragsync.http").setLevel(logging.INFO)
    if tenant and not watch:
        fail("--tenant declares the tenants of --watch folders ([[sources]] declare their own tenants)", EXIT_USAGE)
    sources = _sources(settings, watch, interval, declared_tenants(tenant, "serve --watch") if watch else ())
    if listen_fds is not None:
        _serve_worker(settings, listen_fds, ready_fd, ssl_certfile, ssl_keyfile)
        return
    if workers > 1:
        sys.exit(_serve_workers(ctx, settings, host, port, workers, bool(sources), ssl_certfile, ssl_keyfile))
    _check_sources(settings, sources)
    names = [s.name for s in sources]
    # Embedded: serve owns the home. Cluster: it owns nothing but, with sources, their connector
    # state in this home (a second serve with the same sources on the same home is refused).
    lock = _take_home(settings, "serve", None) if settings.profile == "embedded" or sources else None
    components = build(settings)
    owner = None
    scheduler = None
    if settings.profile == "embedded" and lock is not None:
        owner = Owner(components, info=lock.info, sources=sources)
    elif sources:
        from ragsync.sources import Scheduler

        scheduler = Scheduler(components, sources)  # publishes to Kafka; the workers apply
    try:
        listener = bind(host, port)
        if owner is not None and lock is not None:
            try:
                owner.start()  # here rather than in the lifespan, so a store that cannot open is one line
            except Exception as exc:
                fail(f"cannot open the stores of {settings.home}: {type(exc).__name__}: {exc}")
            # Where the owner answers, for the commands that go through it (localhost for 0.0.0.0).
            lock.set_api(listener.url.replace("://0.0.0.0:", "://127.0.0.1:").replace("://[::]:", "://[::1]:"))
            if sources:
                note(f"ragsync serve: syncing {', '.join(s.name for s in sources)}")
        if scheduler is not None:
            scheduler.start()
            note(f"ragsync serve: publishing {', '.join(s.name for s in sources)} to Kafka on their schedules")
        run_server(
            components,
            listener=listener,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            announce=note,
            checks=owner.checks() if owner is not None else None,
            readiness_details=owner.readiness_details if owner is not None else None,
            degraded=owner.degraded if owner is not None else (lambda: source_health(settings.home, names)),
            configure=(lambda app: mount_owner(app, owner)) if owner is not None else None,
        )
    except SettingsError as exc:
        for problem in exc.problems:
            error(problem)
        sys.exit(EXIT_USAGE)
    except (SourceConflict, HomeFormatError) as exc:  # a webhook source named like another source
        fail(str(exc), EXIT_USAGE)
    finally:
        if scheduler is not None:
            scheduler.stop()
        if owner is not None:
            owner.stop()
        components.close()
        if lock is not None:
            lock.release()


def _serve_workers(
    ctx: click.Context,
    settings: Settings,
    host: str,
    port: int,
    workers: int,
    has_sources: bool,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
) -> int:
    """`serve --workers N`: the supervisor of ragsync.serve_workers (cluster profile, no sources)."""
    from ragsync.serve_workers import WorkerCommand, run_workers
    from ragsync.server import bind
    from ragsync.settings import SettingsError

    if settings.profile != "cluster":
        fail(
            "--workers > 1 needs the cluster profile: an embedded home has one owner process, which alone "
            "holds its stores (run one serve; `ragsync ask` and the API go through it)",
            EXIT_USAGE,
        )
    if has_sources:
        fail("--workers > 1 serves answers only: declare sources (or --watch) on a serve of one worker", EXIT_USAGE)
    root = ctx.find_root()
    global_args: list[str] = ["-v"] * int(root.params.get("verbose") or 0)
    for name, value in (root.obj or {}).items():
        if value is not None:
            global_args += [f"--{name}", str(value)]
    serve_args: list[str] = []
    if ssl_certfile is not None and ssl_keyfile is not None:
        serve_args += ["--ssl-certfile", ssl_certfile, "--ssl-keyfile", ssl_keyfile]
    try:
        listener = bind(host, port)
        metrics = bind(settings.metrics_host, settings.metrics_port) if settings.metrics_port is not None else None
        command = WorkerCommand(tuple(global_args), tuple(serve_args))
        return run_workers(settings, listener, metrics, workers, command, announce=note)
    except SettingsError as exc:
        for problem in exc.problems:
            error(problem)
        return EXIT_USAGE


def _serve_worker(
    settings: Settings, listen_fds: str, ready_fd: int | None, ssl_certfile: str | None, ssl_keyfile: str | None
) -> None:
    """One worker of `serve --workers N`: answers on the inherited sockets; the supervisor announces them."""
    from ragsync.serve_workers import listener_of, signal_ready
    from ragsync.server import run_server

    if settings.profile != "cluster":  # never a way around the embedded home's owner lock
        fail("--listen-fds is for the workers of `serve --workers N` on the cluster profile", EXIT_USAGE)
    fds = [int(fd) for fd in listen_fds.split(",")]
    components = build(settings)
    try:
        signal_ready(ready_fd)
        run_server(
            components,
            listener=listener_of(fds[0]),
            metrics_listener=listener_of(fds[1]) if len(fds) > 1 else None,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            announce=lambda _: None,
        )
    finally:
        components.close()


@click.command()
@click.option("--poll-s", default=0.05, show_default=True, help="Embedded: seconds between looks at an empty log.")
@click.pass_context
def worker(ctx: click.Context, poll_s: float) -> None:
    """Apply events from the log to every store (cluster: a Faust worker; several share the partitions).

    On the embedded profile this owns the home like `ragsync serve`, without HTTP: prefer serve, which
    lets `ragsync ask` and `ragsync status` work meanwhile.

    \b
    Exit status: 0 stopped; 1 the home is owned by another process; 2 bad settings.
    """
    settings = settings_of(ctx)
    if settings.profile == "cluster":
        from ragsync.cluster_worker import run_worker

        run_worker(settings)
        return
    from ragsync.owner import Owner

    _check_sources(settings, list(settings.sources))
    lock = _take_home(settings, "worker", None)
    components = build(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    owner = Owner(components, info=lock.info, sources=settings.sources, poll_s=poll_s)
    try:
        owner.start()
        note(f"embedded worker owns {settings.home}; Ctrl-C or SIGTERM to stop")
        while not stop.wait(0.5):
            pass
    finally:
        owner.stop()
        components.close()
        lock.release()


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (what status prints in any case).")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the owner, backlog per topic, dead letters, documents and passages per tenant, the last
    pass of each source (with its problems, or why it failed), and whether dense retrieval is on
    and complete (JSON; --json is accepted like every other command's).

    \b
    Exit status: 0 shown; 1 the owner could not be reached; 2 bad settings.
    """
    from ragsync.commands.owned import owned_message
    from ragsync.home_lock import claim
    from ragsync.operator_key import operator_keys
    from ragsync.owner_client import OwnerClient, OwnerRefused, OwnerUnreachable
    from ragsync.status import home_status

    settings = settings_of(ctx)
    info: dict[str, Any]
    if settings.profile == "cluster":
        components = build(settings)
        try:
            info = home_status(components, None)
        finally:
            components.close()
        click.echo(json.dumps(info, indent=2))
        return
    try:
        claimed = claim(settings.home, "status")
    except HomeOwned as exc:  # a worker without API: what the SQLite files say, without the stores
        note(owned_message(exc, "the vector counts").replace("needs its stores", "need its stores"))
        components = build(settings, with_embedder=False)
        try:
            info = home_status(components, exc.owner, stores=False)
        finally:
            components.close()
        click.echo(json.dumps(info, indent=2))
        return
    if isinstance(claimed, OwnerInfo):
        client = OwnerClient(claimed, operator_keys(settings))
        try:
            info = client.status()
        except (OwnerUnreachable, OwnerRefused) as exc:
            fail(str(exc), EXIT_FAILED)
        finally:
            client.close()
    else:
        components = build(settings)
        try:
            info = home_status(components, None)
        finally:
            components.close()
            claimed.release()
    click.echo(json.dumps(info, indent=2))
