"""The HTTP surface of ragsync, composed from settings: the ask API, webhook pushes, request logs and
operator metrics.

Two ways to run it:
- `ragsync serve` (run_server): the API on --host/--port, with a startup line naming each address,
  and the operator metrics on a listener of their own (`metrics_host`:`metrics_port`, 127.0.0.1
  by default); on the cluster profile `--workers N` runs N such processes on one socket
  (ragsync.serve_workers).
- `ragsync.server:app`, an ASGI app configured from settings (RAGSYNC_* / ragsync.toml) when the
  server starts it, for uvicorn or gunicorn with workers and TLS:
      uvicorn ragsync.server:app --host 0.0.0.0 --port 8443 --ssl-keyfile k.pem --ssl-certfile c.pem
      gunicorn ragsync.server:app -k uvicorn.workers.UvicornWorker -w 4
  A second listener per worker process is not possible there, so /metrics is served on the same
  app only when `metrics_token` is set, and only to `Authorization: Bearer <metrics_token>`; with
  several workers set PROMETHEUS_MULTIPROC_DIR so the counts of every worker are added up.

Its parts, one idea each: ragsync.metrics (registry, collectors, /metrics, exposure rule),
ragsync.request_log (request logs and latency), ragsync.listeners (bound sockets, the metrics
thread), ragsync.http_app (the public app), ragsync.settings_app (the lazy ASGI app); this module
runs `ragsync serve` and holds `app`. Their names are re-exported here as before the split.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI

from query.api import Check
from ragsync.components import Components
from ragsync.http_app import server_app as server_app
from ragsync.listeners import Listener as Listener
from ragsync.listeners import bind as bind
from ragsync.listeners import serve_in_thread as serve_in_thread
from ragsync.metrics import INDEXER_GROUP as INDEXER_GROUP
from ragsync.metrics import EventLogCollector as EventLogCollector
from ragsync.metrics import check_metrics_exposure as check_metrics_exposure
from ragsync.metrics import metrics_app as metrics_app
from ragsync.metrics import metrics_endpoint as metrics_endpoint
from ragsync.metrics import metrics_guard as metrics_guard
from ragsync.metrics import new_registry as new_registry
from ragsync.metrics import render_metrics as render_metrics
from ragsync.quiet_server import QuietServer
from ragsync.request_log import RequestLog as RequestLog
from ragsync.settings_app import SettingsApp


def run_server(
    components: Components,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    listener: Listener | None = None,
    metrics_listener: Listener | None = None,
    checks: Mapping[str, Check] | None = None,
    readiness_details: Callable[[], Mapping[str, Any]] | None = None,
    degraded: Callable[[], Mapping[str, str]] | None = None,
    configure: Callable[[FastAPI], None] | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve until Ctrl-C or SIGTERM (both shut down gracefully, running the app's lifespan shutdown):
    the API on host:port (or an already bound `listener`) and operator metrics on their own listener
    (`metrics_listener` when already bound: a worker of `serve --workers`, ragsync.serve_workers).

    `checks` are added to /readyz (`readiness_details` to its body; `degraded` makes it say "degraded",
    still 200); `configure` may add routes or wrap the lifespan (the home's owner does) before serving.
    Raises SettingsError, before anything is served, for an unusable address or a metrics exposure
    without credential.
    """
    import uvicorn

    settings = components.settings
    check_metrics_exposure(settings)
    registry = new_registry()
    app = server_app(
        components, registry=registry, checks=checks, readiness_details=readiness_details, degraded=degraded
    )
    if configure is not None:
        configure(app)
    api = listener if listener is not None else bind(host, port)
    metrics = metrics_listener
    if metrics is None and settings.metrics_port is not None:
        metrics = bind(settings.metrics_host, settings.metrics_port)
    scheme = "https" if ssl_certfile else "http"
    api_url = api.url.replace("http://", f"{scheme}://", 1)
    announce(f"ragsync serve: API on {api_url}  (POST /v1/ask; docs {api_url}/docs, OpenAPI {api_url}/openapi.json)")
    if metrics is not None:
        announce(f"ragsync serve: operator metrics on {metrics.url}/metrics {metrics_guard(settings)}")
    else:
        announce("ragsync serve: operator metrics off (metrics_port unset)")
    for name in settings.webhooks:
        announce(f"ragsync serve: webhook pushes at POST {api_url}/v1/webhooks/{name} (signed, timestamped)")
    metrics_server: Any = None
    if metrics is not None:
        _, metrics_server = serve_in_thread(metrics_app(registry, settings.metrics_token), metrics)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # RequestLog logs each request without its query string
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: end through the
    # `finally` blocks of the callers (stores closed) instead of dying on the default SIGTERM action.
    previous = signal.signal(signal.SIGTERM, _exit_cleanly) if _main_thread() else None
    try:
        QuietServer(config).run(sockets=[api.sock])
    except KeyboardInterrupt:
        pass
    finally:
        if metrics_server is not None:
            metrics_server.should_exit = True
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


app = SettingsApp()
