"""Long-running commands and their status: `ragsync worker`, `ragsync serve`, `ragsync status`."""

from __future__ import annotations

import json

import click

from ragsync.commands.common import note, settings_of
from ragsync.wiring import build


@click.command()
@click.option("--poll-s", default=1.0, show_default=True, help="Embedded: seconds between polls of the log.")
@click.pass_context
def worker(ctx: click.Context, poll_s: float) -> None:
    """Apply events from the log to every store (cluster: a Faust worker; several share the partitions)."""
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
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int) -> None:
    """Serve POST /v1/ask (Bearer session token), /healthz, /metrics and, with RAGSYNC_WEBHOOK_SECRET set,
    POST /v1/webhooks/{source} for document pushes (HMAC-SHA256 signed)."""
    import uvicorn

    from ragsync.server import server_app

    settings = settings_of(ctx)
    components = build(settings)
    app = server_app(components)
    if settings.webhook_secret:
        note("webhook pushes accepted at POST /v1/webhooks/{source} (X-Ragsync-Signature)")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        components.close()


@click.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show the profile, where data lives, whether dense retrieval is on, and the event backlog."""
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
