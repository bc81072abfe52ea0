"""Long-running commands and their status: `ragsync worker`, `ragsync serve`, `ragsync status`."""

from __future__ import annotations

import json
import sys

import click

from ragsync.commands.common import EXIT_USAGE, error, fail, note, settings_of
from ragsync.wiring import build


@click.command()
@click.option("--poll-s", default=1.0, show_default=True, help="Embedded: seconds between polls of the log.")
@click.pass_context
def worker(ctx: click.Context, poll_s: float) -> None:
    """Apply events from the log to every store (cluster: a Faust worker; several share the partitions).

    \b
    Exit status: 0 stopped; 2 bad settings.
    """
    settings = settings_of(ctx)
    if settings.profile == "cluster":
        from streams.faust_app import run_worker

        run_worker(settings)
        return
    import time

    from streams.embedded_worker import EmbeddedWorker

    components = build(settings)
    try:
        w = EmbeddedWorker(components.events, components.sink(), revocation_bound_s=settings.revocation_bound_s)
        note(f"embedded worker on {settings.home}; Ctrl-C to stop")
        while True:
            w.drain()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        pass
    finally:
        components.close()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the API listener.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option("--ssl-certfile", default=None, help="Serve HTTPS with this certificate (PEM).")
@click.option("--ssl-keyfile", default=None, help="The certificate's private key (PEM).")
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, ssl_certfile: str | None, ssl_keyfile: str | None) -> None:
    """Serve POST /v1/ask (Bearer session token), /healthz, /readyz, /openapi.json and /docs and, for each
    source in `[webhooks.<source>]` (its own secret and tenants), POST /v1/webhooks/{source} for document
    pushes (HMAC-SHA256 signed).

    Operator metrics (Prometheus) are served on their own listener, metrics_host:metrics_port
    (127.0.0.1:9464 by default), never on the API. Each request is logged (method, path, status,
    latency; never the question). For workers behind gunicorn, run the ASGI app ragsync.server:app.

    \b
    Exit status: 0 stopped; 2 bad settings or an address that cannot be used.
    """
    import logging

    from connectors.state import HomeFormatError, SourceConflict
    from ragsync.server import run_server
    from ragsync.settings import SettingsError

    if (ssl_certfile is None) != (ssl_keyfile is None):
        fail("--ssl-certfile and --ssl-keyfile go together", EXIT_USAGE)
    settings = settings_of(ctx)
    logging.getLogger("ragsync.http").setLevel(logging.INFO)
    components = build(settings)
    try:
        run_server(components, host, port, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile, announce=note)
    except SettingsError as exc:
        for problem in exc.problems:
            error(problem)
        sys.exit(EXIT_USAGE)
    except (SourceConflict, HomeFormatError) as exc:  # a webhook source named like another source
        fail(str(exc), EXIT_USAGE)
    finally:
        components.close()


@click.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show the profile, where data lives, whether dense retrieval is on, and the event backlog.

    \b
    Exit status: 0 shown; 2 bad settings.
    """
    from streams.ports import EVENT_TOPICS

    settings = settings_of(ctx)
    components = build(settings)
    try:
        info = {
            "profile": settings.profile,
            "home": str(settings.home.resolve()),
            "lexical": components.lexical.name,
            "vector": components.vector.name if components.vector else None,
            "embedding_model": components.embedder.model_name if components.embedder else None,
            "backlog": {t: components.events.lag(t, "ragsync-indexer") for t in EVENT_TOPICS},
        }
    finally:
        components.close()
    click.echo(json.dumps(info, indent=2))
