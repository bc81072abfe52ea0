"""The owner's routes in `ragsync serve`, and the hook that runs the owner inside the server's lifespan.

(/readyz itself is the API's: the owner gives it checks and details, see ragsync.server.)

    GET  /v1/owner/status   what `ragsync status` prints                      (operator key)
    GET  /v1/owner/progress committed offsets of the indexer per topic         (operator key)
    POST /v1/owner/ask      an ask with its trace, for `ragsync ask --show-trace` (operator key)
                            {"token": str, "question": str, "as_of": ISO datetime?}
    POST /v1/owner/audit/deletion  a deletion certificate, for `ragsync audit deletion` (operator key)
                            {"doc_id": str, "tenant": str?}: the owner holds the vector shard;
                            404 no deletion recorded, 422 a name matching several documents
    POST /v1/owner/verify   `ragsync verify`'s report, on the stores the owner holds (operator key)
                            {"tenant": str?}

The operator key is the home's own (ragsync.operator_key: random, in the home, expiring, rotated by
`ragsync operator rotate`): whoever can read the home (a CLI with access to it) may read its status
and traces, nobody else. It travels in the X-Ragsync-Operator header and is checked against the key
file on every request, in constant time, so a rotation or an expiry takes effect at once. Traces hold
passage IDs and reason codes only, never text, as everywhere else.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from query.tokens import InvalidToken
from ragsync.operator_key import operator_keys
from ragsync.owner import Owner

OPERATOR_HEADER = "X-Ragsync-Operator"

log = logging.getLogger("ragsync.api")


class TracedAsk(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    token: str = Field(min_length=1, max_length=8192)
    question: str = Field(min_length=1, max_length=4000)
    as_of: datetime | None = None


class CertificateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    doc_id: str = Field(min_length=1, max_length=2048)
    tenant: str | None = Field(default=None, max_length=64)


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tenant: str | None = Field(default=None, max_length=64)


def mount_owner(app: Starlette, owner: Owner) -> None:
    """Add the owner's routes (before any catch-all mount) and run it inside the app's lifespan."""
    keys = operator_keys(owner.settings)
    keys.current()  # a home's first serve makes its key, so commands find one

    def operator(request: Request) -> bool:
        return keys.accepts(request.headers.get(OPERATOR_HEADER, ""))

    def denied() -> JSONResponse:
        return JSONResponse({"error": f"missing or invalid {OPERATOR_HEADER}"}, status_code=401)

    async def status(request: Request) -> Response:
        if not operator(request):
            return denied()
        return JSONResponse(await run_in_threadpool(owner.status))

    async def progress(request: Request) -> Response:
        if not operator(request):
            return denied()
        return JSONResponse({"committed": await run_in_threadpool(owner.committed), "backlog": owner.backlog()})

    async def traced_ask(request: Request) -> Response:
        if not operator(request):
            return denied()
        try:
            body = TracedAsk.model_validate_json(await request.body())
        except ValidationError as exc:
            problems = [{"field": ".".join(str(p) for p in e["loc"]), "error": e["type"]} for e in exc.errors()]
            return JSONResponse({"error": "invalid request", "problems": problems}, status_code=422)
        worker = owner.components.query_worker()
        try:
            result = await run_in_threadpool(worker.ask_with_token, body.token, body.question, body.as_of)
        except InvalidToken as exc:
            log.warning("401 for POST /v1/owner/ask: %s", exc)  # the reason, never the token
            return JSONResponse({"error": "invalid token"}, status_code=401)
        payload: dict[str, Any] = result.public()
        payload["trace"] = result.trace.model_dump(mode="json")
        return JSONResponse(payload)

    async def deletion_certificate(request: Request) -> Response:
        if not operator(request):
            return denied()
        from ragsync.certificate import CertificateError, NoDeletionRecorded, certificate

        try:
            body = CertificateRequest.model_validate_json(await request.body())
        except ValidationError:
            return JSONResponse({"error": "invalid request: {doc_id: str, tenant: str?}"}, status_code=422)
        try:
            cert = await run_in_threadpool(certificate, owner.components, body.doc_id, body.tenant)
        except NoDeletionRecorded as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        except CertificateError as exc:  # ambiguous: the caller must name the tenant
            return JSONResponse({"error": str(exc)}, status_code=422)
        return JSONResponse(cert)

    async def verify(request: Request) -> Response:
        if not operator(request):
            return denied()
        try:
            body = VerifyRequest.model_validate_json(await request.body() or b"{}")
        except ValidationError:
            return JSONResponse({"error": "invalid request: {tenant: str?}"}, status_code=422)
        return JSONResponse(await run_in_threadpool(owner.verify, body.tenant))

    routes = [
        Route("/v1/owner/verify", verify, methods=["POST"]),
        Route("/v1/owner/audit/deletion", deletion_certificate, methods=["POST"]),
        Route("/v1/owner/status", status, methods=["GET"]),
        Route("/v1/owner/progress", progress, methods=["GET"]),
        Route("/v1/owner/ask", traced_ask, methods=["POST"]),
    ]
    app.router.routes[0:0] = routes
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(scope_app: Any) -> AsyncIterator[Any]:
        await run_in_threadpool(owner.start)
        try:
            async with inner(scope_app) as state:
                yield state
        finally:
            await run_in_threadpool(owner.stop)

    app.router.lifespan_context = lifespan
