"""Listening sockets bound before anything is served (so startup lines name the real port), and a
small ASGI server in a thread of its own for the operator metrics listener."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from typing import Any

from ragsync.quiet_server import QuietServer
from ragsync.request_log import ASGIApp
from ragsync.settings import SettingsError


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


def serve_in_thread(app: ASGIApp, listener: Listener) -> tuple[threading.Thread, Any]:
    import uvicorn

    server = QuietServer(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[listener.sock])), name="ragsync-metrics", daemon=True
    )
    thread.start()
    return thread, server
