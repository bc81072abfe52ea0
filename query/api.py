"""The HTTP API behind `ragsync serve`: backends forward a user's question with that user's session token.

POST /v1/ask   Authorization: Bearer <session token>, JSON {"question": str, "as_of": date or datetime?}
               -> AskResponse: claims with quotes and source URLs, or the generic abstention.
GET  /healthz  liveness.            GET /readyz  readiness (the checks the composition root passes).
GET  /openapi.json, /docs           the OpenAPI document and interactive docs, generated from the
                                    same pydantic models that validate each request (AskRequest).

Who is asking comes only from the signed token: the body schema forbids every field but question
and as_of, so a caller cannot name a tenant, user or group (422). The token is checked before the
body is read, and every token failure gets the same 401 body, so the response never says whether
a token was forged, expired or malformed. Abstentions keep the worker's generic message; their
reason codes reach only the trace log and the operator metrics (ragsync.server serves those on a
separate listener: per-reason counts would let a caller learn, by diffing them around its own
ask, whether a denied document exists).

Logging: the worker logs the trace (IDs only). A refused token's reason (expired, bad signature,
groups not a list, ...) is logged at WARNING, never the token. This module logs no question, passage or answer
text; for unexpected errors it logs the exception type and code locations, not the message, since
a message (e.g. a validation error) can carry input values.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Mapping
from http import HTTPStatus
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from indexer.ports import StoreUnavailable
from query.api_models import AskRequest as AskRequest  # re-export (the request and response bodies)
from query.api_models import AskResponse as AskResponse  # re-export
from query.api_models import ErrorResponse, InvalidRequestResponse, Problem
from query.ports import ModelUnavailable
from query.tokens import InvalidToken
from query.worker import AskResult, QueryWorker
from schemas._digits import ascii_uint
from schemas.decisions import ReasonCode

log = logging.getLogger("ragsync.api")

MAX_BODY_BYTES = 64 * 1024
"""A question is a sentence or a paragraph; anything larger is refused before it is parsed."""

ASK_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_UNAUTHORIZED = {"error": "invalid token"}


class AskMetrics:
    """The ask counters and latency histogram, registered in one prometheus-client registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.asks = Counter("ragsync_asks", "Questions that reached the query worker.", registry=registry)
        self.answered = Counter(
            "ragsync_asks_answered", "Questions answered with checked citations.", registry=registry
        )
        self.abstained = Counter(
            "ragsync_asks_abstained", "Questions abstained on, by reason code.", ["reason"], registry=registry
        )
        self.errors = Counter(
            "ragsync_ask_errors", "Questions that failed without an answer or abstention.", ["kind"], registry=registry
        )
        self.rejected = Counter(
            "ragsync_ask_rejected", "Requests refused before the worker ran.", ["reason"], registry=registry
        )
        self.latency = Histogram(
            "ragsync_ask_latency_seconds",
            "Time the query worker took per question.",
            buckets=ASK_LATENCY_BUCKETS,
            registry=registry,
        )
        for code in ReasonCode:
            self.abstained.labels(code.value)
        for kind in ("model_unavailable", "internal"):
            self.errors.labels(kind)
        for reason in ("unauthorized", "invalid_request", "too_large"):
            self.rejected.labels(reason)

    def observe(self, result: AskResult, seconds: float) -> None:
        self._finish(seconds)
        if result.answered:
            self.answered.inc()
        else:
            self.abstained.labels(result.trace.reason.value if result.trace.reason is not None else "unknown").inc()

    def error(self, kind: str, seconds: float) -> None:
        self._finish(seconds)
        self.errors.labels(kind).inc()

    def reject(self, reason: str) -> None:
        """Requests refused before the worker ran: not asks, so they stay out of asks and latency."""
        self.rejected.labels(reason).inc()

    def _finish(self, seconds: float) -> None:
        self.asks.inc()
        self.latency.observe(seconds)


class _LazyWorker:
    """Builds the worker once. Startup builds it so configuration errors fail fast; the lazy path
    covers servers (and test clients) that skip the lifespan."""

    def __init__(self, factory: Callable[[], QueryWorker]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._worker: QueryWorker | None = None

    def get(self) -> QueryWorker:
        with self._lock:
            if self._worker is None:
                self._worker = self._factory()
            return self._worker

    @property
    def built(self) -> bool:
        return self._worker is not None

    @property
    def ready(self) -> QueryWorker | None:
        """The worker once built (no lock: one reference read), so a request need not hop to a pool
        thread just to fetch it."""
        return self._worker


def answer_response(result: AskResult) -> Response:
    """The validated AskResponse serialised by pydantic in one step: the bytes JSONResponse gave for
    model_dump() (compact, UTF-8, the same escapes; tests/test_api.py checks it) without the detour
    through a dict and the json module on the event loop."""
    body = AskResponse.model_validate(result.public()).model_dump_json()
    return Response(body, media_type="application/json")


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it is larger than limit; stops reading as soon as it is too large."""
    declared = ascii_uint(request.headers.get("content-length", ""), max_digits=32)
    if declared is not None and declared > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method, ...) in the API's error shape,
    {"error", "message"}, instead of FastAPI's {"detail"}: a client parses one shape for every error."""
    assert isinstance(exc, StarletteHTTPException)
    code = exc.status_code
    where = f"{request.method} {request.url.path}"
    if code == 404:
        body = {"error": "not found", "message": f"{where}: no such endpoint (the API is described at /openapi.json)"}
    elif code == 405:
        allowed = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        body = {
            "error": "method not allowed",
            "message": f"{where}: not allowed" + (f"; use {allowed}" if allowed else ""),
        }
    else:
        try:
            phrase = HTTPStatus(code).phrase.lower()
        except ValueError:
            phrase = "error"
        body = {"error": phrase, "message": str(exc.detail)}
    return JSONResponse(body, status_code=code, headers=exc.headers)


def _log_unexpected(exc: BaseException) -> None:
    frames = "; ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__))
    log.error("ask failed with %s at %s", type(exc).__name__, frames)


def _problems(exc: ValidationError) -> list[Problem]:
    """Field, kind and pydantic's message (which names the expected form, never the question text)."""
    out: list[Problem] = []
    for e in exc.errors(include_url=False, include_input=False):
        message = str(e["msg"]).removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown field: the body holds only question and as_of (who asks comes from the token)"
        out.append(Problem(field=".".join(str(p) for p in e["loc"]) or "body", error=e["type"], message=message))
    return out


def _version() -> str:
    try:
        return version("ragsync")
    except PackageNotFoundError:
        return "0"


_BEARER = HTTPBearer(
    auto_error=False,  # every token failure gets the same 401 from the endpoint, not FastAPI's 403
    scheme_name="session token",
    description="A JWT for the asking user: HS256 with the shared secret, or RS256/ES256 from the configured "
    "identity provider (`ragsync token issue` mints one).",
)
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]

Check = Callable[[], str | None]
"""A readiness check: None when ready, else a short reason (no secrets, no document text)."""


def create_app(
    worker_factory: Callable[[], QueryWorker],
    *,
    registry: CollectorRegistry | None = None,
    checks: Mapping[str, Check] | None = None,
    readiness_details: Callable[[], Mapping[str, Any]] | None = None,
    degraded: Callable[[], Mapping[str, str]] | None = None,
    ask_threads: int | None = None,
) -> FastAPI:
    """The API over one QueryWorker made by worker_factory; the caller owns and closes its stores.

    `ask_threads` bounds the questions answered at once (each in a pool thread); the others wait their
    turn on the event loop. None: the pool's own bound (anyio's, 40, shared with the rest of the app).

    `registry` receives the ask metrics (the caller serves it to operators); `checks` are the
    readiness checks /readyz runs besides "the query worker is built"; `readiness_details` adds
    figures to its body (the embedded owner: which stores are open, the backlog per topic);
    `degraded` names what works but not fully (a source whose last pass failed) with a reason that
    names no document: /readyz then says "degraded" and stays 200, since restarting the server
    would not fix a source, and answers are still right for everything that was synced.
    """
    holder = _LazyWorker(worker_factory)
    limiter = anyio.CapacityLimiter(ask_threads) if ask_threads is not None else None
    registry = registry if registry is not None else CollectorRegistry()
    metrics = AskMetrics(registry)
    readiness: dict[str, Check] = {"query_worker": lambda: None if holder.built else "starting", **(checks or {})}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(holder.get)
        yield

    app = FastAPI(
        title="ragsync",
        version=_version(),
        description=(
            "Answers questions from the documents the asking user may read, quoting its sources, or abstains "
            "with one generic message. Who is asking comes only from the session token."
        ),
        lifespan=lifespan,
        redoc_url=None,
    )

    def unauthorized(reason: str) -> JSONResponse:
        # The caller gets one body for every failure; the operator gets why (never the token itself):
        # a backend that sends `groups` as a string must be told so somewhere.
        log.warning("401 for POST /v1/ask: %s", reason)
        metrics.reject("unauthorized")
        return JSONResponse(_UNAUTHORIZED, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    @app.post(
        "/v1/ask",
        summary="Answer a question for the token's user",
        response_model=AskResponse,
        responses={
            401: {"model": ErrorResponse, "description": "Missing, malformed, forged or expired token (one answer)."},
            413: {"model": ErrorResponse, "description": f"Body larger than {MAX_BODY_BYTES} bytes."},
            422: {"model": InvalidRequestResponse, "description": "The body does not match AskRequest."},
            503: {"model": ErrorResponse, "description": "The answering model is unavailable; retry later."},
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AskRequest"}}},
            }
        },
    )
    async def ask(request: Request, credentials: BearerCredentials) -> Response:
        # The body is read here, by hand, only after the token: a refused caller's body is never parsed.
        if credentials is None or not credentials.credentials.strip():
            return unauthorized("no bearer token in the Authorization header")
        worker = holder.ready
        if worker is None:
            worker = await run_in_threadpool(holder.get)
        try:
            principal = worker.tokens.verify(credentials.credentials)
        except InvalidToken as exc:
            return unauthorized(str(exc))

        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            metrics.reject("too_large")
            return JSONResponse({"error": "request too large"}, status_code=413)
        try:
            ask_request = AskRequest.model_validate_json(body)
        except ValidationError as exc:
            metrics.reject("invalid_request")
            problems = _problems(exc)
            payload = InvalidRequestResponse(
                error="invalid request",
                message="; ".join(f"{p.field}: {p.message}" for p in problems),
                problems=problems,
            )
            return JSONResponse(payload.model_dump(), status_code=422)

        started = time.perf_counter()
        try:
            ask = functools.partial(worker.ask, principal, ask_request.question, ask_request.as_of)
            result = await anyio.to_thread.run_sync(ask, limiter=limiter)
        except ModelUnavailable as exc:
            metrics.error("model_unavailable", time.perf_counter() - started)
            log.warning("model unavailable: %s", exc)  # the message is built to carry no prompt text
            headers = {"Retry-After": "5"} if exc.retryable else {}
            return JSONResponse({"error": "model unavailable"}, status_code=503, headers=headers)
        except StoreUnavailable as exc:
            # A store that cannot answer fails the question: never an answer from fewer filters or rankers.
            metrics.error("store_unavailable", time.perf_counter() - started)
            log.warning("store unavailable: %s", exc)  # adapters' messages carry no query text
            return JSONResponse({"error": "store unavailable"}, status_code=503, headers={"Retry-After": "5"})
        except Exception as exc:
            metrics.error("internal", time.perf_counter() - started)
            _log_unexpected(exc)
            return JSONResponse({"error": "internal error"}, status_code=500)
        metrics.observe(result, time.perf_counter() - started)
        return answer_response(result)

    @app.get("/healthz", summary="Liveness: the process serves requests")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="Readiness: every check passes",
        description='200 with status "ready", or "degraded" when the server answers but something it keeps in '
        'sync does not fully (`degraded` names it, e.g. a source whose last pass failed); 503 "not ready".',
        responses={503: {"description": "Not ready; the failing checks say why."}},
    )
    async def readyz() -> Response:
        results: dict[str, str] = {}
        for name, check in readiness.items():
            try:
                problem = await run_in_threadpool(check)
            except Exception as exc:
                problem = f"check failed: {type(exc).__name__}"
            results[name] = "ok" if problem is None else problem
        ready = all(v == "ok" for v in results.values())
        body: dict[str, Any] = {"status": "ready" if ready else "not ready", "checks": results}
        if degraded is not None:
            try:
                partial = dict(await run_in_threadpool(degraded))
            except Exception as exc:
                partial = {"degraded": f"check failed: {type(exc).__name__}"}
            body["degraded"] = partial
            if ready and partial:
                body["status"] = "degraded"
        if readiness_details is not None:
            body.update(await run_in_threadpool(readiness_details))
        return JSONResponse(body, 200 if ready else 503)

    # The request schema appears under components once; the route refers to it (see openapi_extra above).
    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {})["AskRequest"] = AskRequest.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.state.metrics = metrics
    app.state.registry = registry
    return app
