"""The console's routes: /console (overview), /console/propagation, /console/deletions,
/console/certificate, /console/ask, and /console/login and /logout.

Every page but the login form answers only to the operator (ragsync.console.auth); without it a page
is a 401 with the login form, so an asker's token (or nothing) never reads a byte of it. Data comes
from the same functions as the CLI's (`status`, `audit propagation`, `audit deletions`, `audit
deletion`, the query worker), run in a thread so the event loop keeps answering meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ragsync.console import pages
from ragsync.console.auth import COOKIE, Credentials, cookie_header, read_form
from ragsync.operator_key import operator_keys
from ragsync.wiring import Components

DEAD_LETTERS_SHOWN = 100
DELETIONS_SHOWN = 500

HEADERS = {
    # Nothing from elsewhere, no framing, no script at all: the pages are plain HTML and inline SVG.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer makes Chromium send Origin: null on our own forms
}

Handler = Callable[[Request], Awaitable[Response]]


def _html(body: str, status: int = 200, extra: Mapping[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status, headers={**HEADERS, **(extra or {})})


def console_routes(
    components: Components, *, readiness_details: Callable[[], Mapping[str, Any]] | None = None
) -> list[Route]:
    """The routes, over the app's components (the owner's, on the embedded profile)."""
    keys = operator_keys(components.settings)
    keys.current()  # a home's first serve makes its key, so the operator has one to paste
    creds = Credentials(keys)
    worker_lock = threading.Lock()
    workers: list[Any] = []

    def query_worker() -> Any:
        with worker_lock:
            if not workers:
                workers.append(components.query_worker())
            return workers[0]

    def guarded(render: Callable[[Request, str], Awaitable[Response]]) -> Handler:
        async def handler(request: Request) -> Response:
            if not creds.allowed(request):
                return _html(pages.login("operator credential required"), 401, {"WWW-Authenticate": "Bearer"})
            return await render(request, creds.csrf(request.cookies.get(COOKIE, "")))

        return handler

    async def login_form(request: Request) -> Response:
        return _html(pages.login())

    async def login(request: Request) -> Response:
        form = await read_form(request)
        cookie = creds.login(form.get("key", "")) if form is not None else None
        if cookie is None:
            return _html(pages.login("that is not this home's operator key (or it expired)"), 401)
        response = RedirectResponse("/console", 303, headers=HEADERS)
        response.headers["set-cookie"] = cookie_header(cookie, secure=request.url.scheme == "https")
        return response

    async def logout(request: Request) -> Response:
        form = await read_form(request) or {}
        if not creds.allowed_post(request, form):
            return _html(pages.login("operator credential required"), 403)
        response = RedirectResponse("/console/login", 303, headers=HEADERS)
        response.headers["set-cookie"] = cookie_header("", secure=request.url.scheme == "https", clear=True)
        return response

    def collect_overview() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        from ragsync.dead_letters import pending
        from ragsync.home_lock import current_owner
        from ragsync.status import home_status

        status = home_status(components, current_owner(components.settings.home, settle_s=0))
        try:
            dead = [d.summary() for d in pending(components.events, DEAD_LETTERS_SHOWN)]
        except Exception as exc:  # the page still shows the rest when the log cannot list them
            dead = [{"id": "-", "origin": "?", "key": "", "reason": f"cannot list: {type(exc).__name__}"}]
        readiness = dict(readiness_details()) if readiness_details is not None else {}
        return status, dead, readiness

    async def overview(request: Request, csrf: str) -> Response:
        status, dead, readiness = await run_in_threadpool(collect_overview)
        return _html(pages.overview(status, dead, readiness, csrf))

    def collect_propagation() -> tuple[list[Any], Any]:
        from indexer.propagation import summarize

        records = components.propagation.records(None)
        return records, summarize(records, components.settings.revocation_bound_s)

    async def propagation(request: Request, csrf: str) -> Response:
        records, summary = await run_in_threadpool(collect_propagation)
        return _html(pages.propagation(records, summary, csrf))

    async def deletions(request: Request, csrf: str) -> Response:
        records = await run_in_threadpool(components.audit.records, None)
        latest = sorted(records, key=lambda r: r.seq or 0, reverse=True)[:DELETIONS_SHOWN]
        return _html(pages.deletions(latest, csrf))

    async def certificate(request: Request, csrf: str) -> Response:
        from ragsync.certificate import CertificateError
        from ragsync.certificate import certificate as make

        doc, tenant = request.query_params.get("doc", ""), request.query_params.get("tenant") or None
        if not doc or len(doc) > 2048 or (tenant is not None and len(tenant) > 64):
            return _html(pages.problem("Deletion certificate", "name a document: ?doc=ID&tenant=T", csrf), 422)
        try:
            cert = await run_in_threadpool(make, components, doc, tenant)
        except CertificateError as exc:
            return _html(pages.problem("Deletion certificate", str(exc), csrf), 404)
        return _html(pages.certificate(cert, csrf))

    async def ask_form(request: Request, csrf: str) -> Response:
        return _html(pages.ask_form(csrf))

    async def ask(request: Request) -> Response:
        from query.tokens import InvalidToken
        from schemas.instants import InvalidInstant, parse_instant

        form = await read_form(request)
        if form is None or not creds.allowed_post(request, form):
            return _html(pages.login("operator credential required"), 403)
        csrf = creds.csrf(request.cookies.get(COOKIE, ""))
        question, as_of_text, token = (
            form.get("question", "").strip(),
            form.get("as_of", "").strip(),
            form.get("token", ""),
        )
        status = 200
        try:
            if not question or len(question) > 4000 or not token or len(token) > 8192:
                raise ValueError("a token and a question (at most 4000 characters) are needed")
            as_of = parse_instant(as_of_text, field="as of") if as_of_text else None
            worker = await run_in_threadpool(query_worker)
            result = await run_in_threadpool(worker.ask_with_token, token, question, as_of)
            shown = pages.answer(result.public(), result.trace.model_dump(mode="json"))
        except InvalidToken:
            status, shown = 401, '<p class="bad">The asker\'s token is invalid or expired.</p>'
        except (InvalidInstant, ValueError) as exc:
            status, shown = 422, f'<p class="bad">{pages.esc(str(exc))}</p>'
        return _html(pages.ask_form(csrf, question, as_of_text, shown), status)

    return [
        Route("/console/login", login_form, methods=["GET"]),
        Route("/console/login", login, methods=["POST"]),
        Route("/console/logout", logout, methods=["POST"]),
        Route("/console", guarded(overview), methods=["GET"]),
        Route("/console/propagation", guarded(propagation), methods=["GET"]),
        Route("/console/deletions", guarded(deletions), methods=["GET"]),
        Route("/console/certificate", guarded(certificate), methods=["GET"]),
        Route("/console/ask", guarded(ask_form), methods=["GET"]),
        Route("/console/ask", ask, methods=["POST"]),
    ]


def mount_console(
    app: Starlette, components: Components, *, readiness_details: Callable[[], Mapping[str, Any]] | None = None
) -> None:
    """Add the console's routes ahead of any catch-all mount (the webhook app is mounted at "")."""
    app.router.routes[0:0] = console_routes(components, readiness_details=readiness_details)
