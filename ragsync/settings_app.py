"""`ragsync.server:app`, the ASGI app for uvicorn or gunicorn, built from settings when the server starts it."""

from __future__ import annotations

import asyncio
import logging
import threading

from fastapi import FastAPI

from ragsync.components import Components
from ragsync.http_app import server_app
from ragsync.request_log import Message, Receive, Scope, Send
from ragsync.settings import SettingsError, load_settings
from ragsync.wiring import build

log = logging.getLogger("ragsync.server")  # the name it had before the split (issue 21), for log filters


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
