"""The public app, composed from a profile's Components: the ask API, /docs, the console, webhook
pushes, request logs and, in the ASGI-app mode, /metrics behind the operator credential."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException

from query.api import Check, create_app, http_error
from ragsync.components import Components
from ragsync.console import mount_console, mount_docs
from ragsync.metrics import EventLogCollector, metrics_endpoint, new_registry, register_live
from ragsync.request_log import HTTP_LATENCY_BUCKETS, RequestLog


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
    register_live(registry, EventLogCollector(lambda: components.events))
    worker = components.query_worker
    app = create_app(
        worker,
        registry=registry,
        checks=checks,
        readiness_details=readiness_details,
        degraded=degraded,
        ask_threads=settings.ask_threads,
    )
    latency = Histogram(
        "ragsync_http_request_duration_seconds",
        "HTTP requests by method, route template and status.",
        ["method", "route", "status"],
        buckets=HTTP_LATENCY_BUCKETS,
        registry=registry,
    )
    app.add_middleware(RequestLog, latency=latency)
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
