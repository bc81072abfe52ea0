"""Send a request to an ASGI app with header bytes exactly as a server hands them over.

httpx and Starlette's TestClient re-encode header values as UTF-8, so a test cannot make a header
hold the byte 0xb2; uvicorn passes the bytes through and Starlette decodes them as latin-1 ('²').
Bugs that live in that gap are tested by calling the app the way uvicorn does.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message


async def post(app: ASGIApp, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, bytes]:
    """(status, body) of one POST; an exception the app raised after answering still gives its status."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent = False
    status = 0
    answer = bytearray()

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        elif message["type"] == "http.response.body":
            answer.extend(message.get("body", b""))

    try:
        await app(scope, receive, send)
    except Exception:
        if not status:
            raise
    return status, bytes(answer)
