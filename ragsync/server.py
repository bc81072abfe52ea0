"""The HTTP surface of ragsync, composed from settings: the ask API, webhook pushes, request logs and
operator metrics.

Two ways to run it:
- `ragsync serve` (run_server): the API on --host/--port, with a startup line naming each address,
  and the operator metrics on a listener of their own (`metrics_host`:`metrics_port`, 127.0.0.1
  by default).
- `ragsync.server:app`, an ASGI app configured from settings (RAGSYNC_* / ragsync.toml) when the
  server starts it, for uvicorn or gunicorn with workers and TLS:
      uvicorn ragsync.server:app --host 0.0.0.0 --port 8443 --ssl-keyfile k.pem --ssl-certfile c.pem
      gunicorn ragsync.server:app -k uvicorn.workers.UvicornWorker -w 4
  A second listener per worker process is not possible there, so /metrics is served on the same
  app only when `metrics_token` is set, and only to `Authorization: Bearer <metrics_token>`; with
  several workers set PROMETHEUS_MULTIPROC_DIR so the counts of every worker are added up.

Why metrics are kept from askers: they hold per-reason abstention counts, so a caller that diffs
them around its own ask learns whether a document it may not read exists (issue 8, item 9).

Request logs (logger `ragsync.http`, INFO): method, path, status and latency. Never the query
string or the body, so a question's text is never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from query.api import Check, create_app, http_error
from ragsync.dead_letters import DLQ_GROUP
from ragsync.quiet_server import QuietServer
from ragsync.settings import Settings, SettingsError
from ragsync.wiring import Components
from streams.ports import EVENT_TOPICS, TOPIC_DLQ, EventLog

log = logging.getLogger("ragsync.server")
http_log = logging.getLogger("ragsync.http")

INDEXER_GROUP = "ragsync-indexer"
"""The consumer group of the indexer (embedded worker and Faust agents)."""

_COUNTING_GROUP = "ragsync-metrics"
"""Never commits, so its lag is every record the log still holds (published since the start)."""

HTTP_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_registry() -> CollectorRegistry:
    """A registry with process, platform and GC metrics; one per app, so test apps never share counts."""
    from ragsync.propagation_metrics import ProcessMetrics

    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(ProcessMetrics())  # revocation and deletion propagation, observed by this process's worker
    return registry


class EventLogCollector(Collector):
    """Ingest figures read from the event log at scrape time, so they hold across processes: a worker
    in another process (or on another machine, with Kafka) is counted the same as one in-process."""

    def __init__(self, events: Callable[[], EventLog]) -> None:
        self._events = events

    def collect(self) -> Iterator[Metric]:
        published = CounterMetricFamily(
            "ragsync_events_published", "Events in the log per topic (what the connectors published).", labels=["topic"]
        )
        applied = CounterMetricFamily(
            "ragsync_events_applied", "Events the indexer applied and committed, per topic.", labels=["topic"]
        )
        backlog = GaugeMetricFamily(
            "ragsync_events_backlog", "Events published but not yet applied, per topic.", labels=["topic"]
        )
        dead = GaugeMetricFamily("ragsync_dead_letters", "Dead-lettered events not yet replayed (`ragsync dlq list`).")
        dead_total = CounterMetricFamily("ragsync_dead_letters", "Events ever dead-lettered (still in the log).")
        try:
            events = self._events()
            for topic in EVENT_TOPICS:
                total = events.lag(topic, _COUNTING_GROUP)
                pending = events.lag(topic, INDEXER_GROUP)
                published.add_metric([topic], total)
                applied.add_metric([topic], max(0, total - pending))
                backlog.add_metric([topic], pending)
            dead.add_metric([], events.lag(TOPIC_DLQ, DLQ_GROUP))
            dead_total.add_metric([], events.lag(TOPIC_DLQ, _COUNTING_GROUP))
        except Exception as exc:  # a scrape must answer even when the log is down; the gap shows it
            log.warning("event log metrics unavailable: %s", type(exc).__name__)
            return
        yield from (published, applied, backlog, dead, dead_total)


class RequestLog:
    """ASGI middleware: one log line and one latency observation per request, by route template."""

    def __init__(self, app: ASGIApp, latency: Histogram) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"  # raw paths would make labels unbounded
            self.latency.labels(scope["method"], template, str(status)).observe(elapsed)
            http_log.info("%s %s %d %.1fms", scope["method"], scope["path"], status, elapsed * 1000)


def metrics_endpoint(registry: CollectorRegistry, token: str = "") -> Callable[[Request], Awaitable[Response]]:
    """GET /metrics in Prometheus text format; with a token, only to `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def metrics(request: Request) -> Response:
        if token and not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            return JSONResponse({"error": "operator credential required"}, 401, {"WWW-Authenticate": "Bearer"})
        return Response(render_metrics(registry), media_type=CONTENT_TYPE_LATEST)

    return metrics


def metrics_app(registry: CollectorRegistry, token: str = "") -> Starlette:
    """The operator listener's whole app."""
    return Starlette(routes=[Route("/metrics", metrics_endpoint(registry, token), methods=["GET"])])


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The registry's text; under gunicorn workers (PROMETHEUS_MULTIPROC_DIR) every worker's counts
    summed from their files, plus the figures read live from the event log."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return generate_latest(registry)
    from prometheus_client import multiprocess

    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined)  # type: ignore[no-untyped-call]
    live = CollectorRegistry()
    for collector in _LIVE.get(registry, []):
        live.register(collector)
    return generate_latest(combined) + generate_latest(live)


_LIVE: weakref.WeakKeyDictionary[CollectorRegistry, list[Collector]] = weakref.WeakKeyDictionary()
"""Collectors read at scrape time, per registry (multiprocess mode renders them beside the files)."""


def server_app(
    components: Components,
    *,
    registry: CollectorRegistry | None = None,
    checks: Mapping[str, Check] | None = None,
    metrics_on_app: bool = False,
    readiness_details: Callable[[], Mapping[str, Any]] | None = None,
    degraded: Callable[[], Mapping[str, str]] | None = None,
) -> FastAPI:
    """The public app: /v1/ask, /healthz, /readyz, /openapi.json, /docs and, for each configured webhook
    source (`[webhooks.<source>]`), POST /v1/webhooks/{source}. `registry` collects its metrics for the
    operator listener; with `metrics_on_app` (the ASGI-app mode) and a `metrics_token`, /metrics is
    served here too. Raises SourceConflict (a ValueError) when a webhook source's name already
    belongs to another source (a drive, a wiki).
    """
    settings = components.settings
    registry = registry if registry is not None else new_registry()
    event_metrics = EventLogCollector(lambda: components.events)
    registry.register(event_metrics)
    _LIVE.setdefault(registry, []).append(event_metrics)
    worker = components.query_worker
    app = create_app(worker, registry=registry, checks=checks, readiness_details=readiness_details, degraded=degraded)
    latency = Histogram(
        "ragsync_http_request_duration_seconds",
        "HTTP requests by method, route template and status.",
        ["method", "route", "status"],
        buckets=HTTP_LATENCY_BUCKETS,
        registry=registry,
    )
    app.add_middleware(RequestLog, latency=latency)
    from ragsync.console import mount_console, mount_docs

    mount_docs(app)  # /docs from bundled Swagger UI assets: no CDN
    mount_console(app, components, readiness_details=readiness_details)  # /console, operator key only
    if metrics_on_app and settings.metrics_token:
        app.add_route("/metrics", metrics_endpoint(registry, settings.metrics_token), ["GET"], include_in_schema=False)
    if settings.webhooks:
        from connectors.state import ConnectorState
        from connectors.webhook import WebhookSource, create_webhook_app
        from streams.ports import publish_durably

        state = ConnectorState(settings.home / "connectors.db")
        components.closers.append(state)
        sources = {name: WebhookSource(h.secret, frozenset(h.tenants)) for name, h in settings.webhooks.items()}
        publish = publish_durably(components.events)
        webhooks = create_webhook_app(publish, sources, state, max_skew_s=settings.webhook_max_skew_s)
        # Mounted at the root, it answers every path no route above matched: in the API's error shape too.
        webhooks.add_exception_handler(StarletteHTTPException, http_error)
        app.mount("", webhooks)
        _document_webhooks(app)
    return app


def _document_webhooks(app: FastAPI) -> None:
    """Add POST /v1/webhooks/{source} to the OpenAPI document, from the models that validate pushes.

    The webhook app is mounted (FastAPI documents only its own routes), so its path is added here.
    """
    from pydantic import TypeAdapter

    from connectors.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, Push

    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        push = TypeAdapter(Push).json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(push.pop("$defs", {}))
        schema["paths"]["/v1/webhooks/{source}"] = {
            "post": {
                "summary": "Push one document change (upsert, ACL change or delete)",
                "description": "Signed: the header carries sha256=<hex HMAC-SHA256 of the raw body> "
                "(see connectors/webhook.py for the contract, including ordering and replays).",
                "parameters": [
                    {"name": "source", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": TIMESTAMP_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
                    {"name": SIGNATURE_HEADER, "in": "header", "required": True, "schema": {"type": "string"}},
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": push}}},
                "responses": {
                    "202": {"description": "Published: the event is durably in the log."},
                    "200": {"description": "Unchanged: equal to what is already published."},
                    "401": {"description": "Missing or invalid signature."},
                    "409": {"description": "Stale or out of order."},
                    "422": {"description": "Invalid push."},
                    "503": {"description": "The event log is unavailable; retry."},
                },
            }
        }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


# ---- ragsync serve ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    sock: socket.socket

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def bind(host: str, port: int) -> Listener:
    """Bind before serving, so the startup line can name the real port (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SettingsError([f"cannot listen on {host}:{port}: {exc.strerror or exc}"]) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return Listener(host, int(sock.getsockname()[1]), sock)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def metrics_guard(settings: Settings) -> str:
    """What guards a metrics listener, for its startup line: with no token, every account of the machine
    can read them on loopback too, so the line says so rather than looking safe."""
    if settings.metrics_token:
        return "(Bearer metrics_token)"
    return "(no credential: any local account can read them; set metrics_token to require one)"


def check_metrics_exposure(settings: Settings) -> None:
    """Operator metrics leave the machine only behind a credential (fail closed on a misconfiguration)."""
    if settings.metrics_port is not None and not _is_loopback(settings.metrics_host) and not settings.metrics_token:
        raise SettingsError(
            [
                f"metrics_host {settings.metrics_host!r} is not a loopback address: set metrics_token "
                "(scrapers then send Authorization: Bearer <metrics_token>) or keep metrics_host = 127.0.0.1"
            ]
        )


def serve_in_thread(app: ASGIApp, listener: Listener) -> tuple[threading.Thread, Any]:
    import uvicorn

    server = QuietServer(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[listener.sock])), name="ragsync-metrics", daemon=True
    )
    thread.start()
    return thread, server


def run_server(
    components: Components,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    listener: Listener | None = None,
    checks: Mapping[str, Check] | None = None,
    readiness_details: Callable[[], Mapping[str, Any]] | None = None,
    degraded: Callable[[], Mapping[str, str]] | None = None,
    configure: Callable[[FastAPI], None] | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve until Ctrl-C or SIGTERM (both shut down gracefully, running the app's lifespan shutdown):
    the API on host:port (or an already bound `listener`) and operator metrics on their own listener.

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
    metrics = bind(settings.metrics_host, settings.metrics_port) if settings.metrics_port is not None else None
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


# ---- ragsync.server:app -------------------------------------------------------------------------


class SettingsApp:
    """`ragsync.server:app`: built from settings when the server starts it (its lifespan), so an import
    never reads settings or opens a store, and a settings error is one line per problem in the log
    and a failed startup, not a traceback."""

    def __init__(self) -> None:
        self._app: FastAPI | None = None
        self._components: Components | None = None
        self._lock = threading.Lock()

    def _build(self) -> FastAPI:
        with self._lock:
            if self._app is None:
                from ragsync.settings import load_settings
                from ragsync.wiring import build

                settings = load_settings()
                components = build(settings)
                self._app = server_app(components, metrics_on_app=True)
                self._components = components
                where = "on this app (Bearer metrics_token)" if settings.metrics_token else "off (set metrics_token)"
                log.warning("ragsync app ready for profile %s; operator metrics %s", settings.profile, where)
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            inner: FastAPI = self._app if self._app is not None else await asyncio.to_thread(self._build)
        except SettingsError as exc:
            for problem in exc.problems:
                log.error("%s", problem)
            if scope["type"] != "lifespan":
                raise
            await receive()
            await send({"type": "lifespan.startup.failed", "message": "invalid settings: " + "; ".join(exc.problems)})
            return
        if scope["type"] != "lifespan":
            await inner(scope, receive, send)
            return

        async def close_after_shutdown(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete" and self._components is not None:
                await asyncio.to_thread(self._components.close)
            await send(message)

        await inner(scope, receive, close_after_shutdown)


app = SettingsApp()
