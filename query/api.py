"""The HTTP API behind `ragsync serve`: backends forward a user's question with that user's session token.

POST /v1/ask   Authorization: Bearer <session token>, JSON {"question": str, "as_of": ISO datetime?}
               -> AskResult.public(): claims with quotes and source URLs, or the generic abstention.
GET  /healthz  liveness.
GET  /metrics  Prometheus text format.

Who is asking comes only from the signed token: the body schema forbids every field but question
and as_of, so a caller cannot name a tenant, user or group (422). The token is checked before the
body is read, and every token failure gets the same 401 body, so the response never says whether
a token was forged, expired or malformed. Abstentions keep the worker's generic message; their
reason codes reach only the trace log and the metrics.

Logging: the worker logs the trace (IDs only). This module logs no question, passage or answer
text; for unexpected errors it logs the exception type and code locations, not the message, since
a message (e.g. a validation error) can carry input values.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from query.ports import ModelUnavailable
from query.tokens import InvalidToken, verify_token
from query.worker import AskResult, QueryWorker
from schemas._time import to_utc, utcnow
from schemas.decisions import ReasonCode

log = logging.getLogger("ragsync.api")

MAX_BODY_BYTES = 64 * 1024
"""A question is a sentence or a paragraph; anything larger is refused before it is parsed."""

MAX_QUESTION_CHARS = 4000

AS_OF_SKEW = timedelta(seconds=60)
"""as_of may not be later than now (plus clock skew): a future instant would show passages whose
effective date has not arrived yet, which the effective-dating rules exist to hide."""

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

_UNAUTHORIZED = {"error": "invalid token"}


class AskRequest(BaseModel):
    """The whole request body. extra="forbid": scope comes from the token, never from the body."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, str_strip_whitespace=True)

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    as_of: datetime | None = None

    @field_validator("as_of")
    @classmethod
    def _not_in_future(cls, value: datetime | None) -> datetime | None:
        if value is not None and to_utc(value) > utcnow() + AS_OF_SKEW:
            raise ValueError("as_of must not be in the future")
        return value


class AskMetrics:
    """Counters for /metrics. A lock, not a client library: a handful of integers needs no dependency."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asks = 0
        self.answered = 0
        self.abstained: dict[str, int] = {code.value: 0 for code in ReasonCode}
        self.errors: dict[str, int] = {"model_unavailable": 0, "internal": 0}
        self.rejected: dict[str, int] = {"unauthorized": 0, "invalid_request": 0, "too_large": 0}
        self.latency_sum = 0.0
        self.latency_count = 0

    def observe(self, result: AskResult, seconds: float) -> None:
        with self._lock:
            self._finish(seconds)
            if result.answered:
                self.answered += 1
            else:
                reason = result.trace.reason.value if result.trace.reason is not None else "unknown"
                self.abstained[reason] = self.abstained.get(reason, 0) + 1

    def error(self, kind: str, seconds: float) -> None:
        with self._lock:
            self._finish(seconds)
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def reject(self, reason: str) -> None:
        """Requests refused before the worker ran: not asks, so they stay out of asks and latency."""
        with self._lock:
            self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _finish(self, seconds: float) -> None:
        self.asks += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def render(self) -> str:
        with self._lock:
            lines = [
                "# HELP ragsync_asks_total Questions that reached the query worker.",
                "# TYPE ragsync_asks_total counter",
                f"ragsync_asks_total {self.asks}",
                "# HELP ragsync_asks_answered_total Questions answered with checked citations.",
                "# TYPE ragsync_asks_answered_total counter",
                f"ragsync_asks_answered_total {self.answered}",
                "# HELP ragsync_asks_abstained_total Questions abstained on, by reason code.",
                "# TYPE ragsync_asks_abstained_total counter",
                *(f'ragsync_asks_abstained_total{{reason="{r}"}} {n}' for r, n in sorted(self.abstained.items())),
                "# HELP ragsync_ask_errors_total Questions that failed without an answer or abstention.",
                "# TYPE ragsync_ask_errors_total counter",
                *(f'ragsync_ask_errors_total{{kind="{k}"}} {n}' for k, n in sorted(self.errors.items())),
                "# HELP ragsync_ask_rejected_total Requests refused before the worker ran.",
                "# TYPE ragsync_ask_rejected_total counter",
                *(f'ragsync_ask_rejected_total{{reason="{r}"}} {n}' for r, n in sorted(self.rejected.items())),
                "# HELP ragsync_ask_latency_seconds Time the worker took per question.",
                "# TYPE ragsync_ask_latency_seconds summary",
                f"ragsync_ask_latency_seconds_sum {self.latency_sum:.6f}",
                f"ragsync_ask_latency_seconds_count {self.latency_count}",
            ]
        return "\n".join(lines) + "\n"


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


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it is larger than limit; stops reading as soon as it is too large."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _log_unexpected(exc: BaseException) -> None:
    frames = "; ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__))
    log.error("ask failed with %s at %s", type(exc).__name__, frames)


def create_app(worker_factory: Callable[[], QueryWorker]) -> Starlette:
    """The API over one QueryWorker made by worker_factory; the caller owns and closes its stores."""
    holder = _LazyWorker(worker_factory)
    metrics = AskMetrics()

    def unauthorized() -> JSONResponse:
        metrics.reject("unauthorized")
        return JSONResponse(_UNAUTHORIZED, status_code=401, headers={"WWW-Authenticate": "Bearer"})

    async def ask(request: Request) -> Response:
        token = _bearer(request.headers.get("authorization"))
        if token is None:
            return unauthorized()
        worker = await run_in_threadpool(holder.get)
        try:
            principal = verify_token(worker.secret, token)
        except InvalidToken:
            return unauthorized()

        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            metrics.reject("too_large")
            return JSONResponse({"error": "request too large"}, status_code=413)
        try:
            ask_request = AskRequest.model_validate_json(body)
        except ValidationError as exc:
            metrics.reject("invalid_request")
            # Field locations and error kinds only: echoing input values back is never needed.
            problems = [{"field": ".".join(str(p) for p in e["loc"]), "error": e["type"]} for e in exc.errors()]
            return JSONResponse({"error": "invalid request", "problems": problems}, status_code=422)

        started = time.perf_counter()
        try:
            result = await run_in_threadpool(worker.ask, principal, ask_request.question, ask_request.as_of)
        except ModelUnavailable as exc:
            metrics.error("model_unavailable", time.perf_counter() - started)
            log.warning("model unavailable: %s", exc)  # the message is built to carry no prompt text
            headers = {"Retry-After": "5"} if exc.retryable else {}
            return JSONResponse({"error": "model unavailable"}, status_code=503, headers=headers)
        except Exception as exc:
            metrics.error("internal", time.perf_counter() - started)
            _log_unexpected(exc)
            return JSONResponse({"error": "internal error"}, status_code=500)
        metrics.observe(result, time.perf_counter() - started)
        return JSONResponse(result.public())

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def prometheus(request: Request) -> Response:
        return PlainTextResponse(metrics.render(), media_type=PROMETHEUS_TEXT)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(holder.get)
        yield

    app = Starlette(
        routes=[
            Route("/v1/ask", ask, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    return app
