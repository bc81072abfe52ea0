"""Who may open the console: the holder of the home's operator key, and nobody else.

A browser logs in once (POST /console/login with the key pasted) and gets a session cookie: HttpOnly
(no script reads it), SameSite=Strict (no other site's page sends it, so a cross-site form cannot
act with it), Secure over HTTPS, path /console. The cookie is `<expiry>.<HMAC of the expiry under the
operator key>`: nothing is stored server side, and rotating the key (`ragsync operator rotate`) or
its expiry ends every session at once. Scripts may instead send the key itself, in
`Authorization: Bearer <key>` or the owner API's X-Ragsync-Operator header.

An asker's session token is never accepted: it is not the operator key, so it fails the same
comparison as any other string. Every POST made with the cookie also carries a CSRF token (an HMAC of
the cookie under the key) and, when the browser sends an Origin, that origin must be the server's.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request

from ragsync.operator_key import OperatorKeys

COOKIE = "ragsync_console"
SESSION_S = 8 * 3600.0
"""A session lasts a working day at most (and never past the key's own expiry)."""
MAX_FORM_BYTES = 64 * 1024
OPERATOR_HEADER = "X-Ragsync-Operator"


class Credentials:
    def __init__(self, keys: OperatorKeys, clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self.clock = clock

    def _key(self) -> str | None:
        key = self.keys.read()
        return key.key if key is not None and key.valid(self.clock()) else None

    @staticmethod
    def _sign(key: str, purpose: str, value: str) -> str:
        return hmac.new(key.encode(), f"ragsync-console|{purpose}|{value}".encode(), hashlib.sha256).hexdigest()

    def login(self, given: str) -> str | None:
        """A session cookie value for the right key, else None."""
        if not self.keys.accepts(given.strip()):
            return None
        current = self.keys.read()
        assert current is not None
        expires = int(min(self.clock() + SESSION_S, current.expires_at))
        return f"{expires}.{self._sign(current.key, 'session', str(expires))}"

    def session(self, cookie: str) -> bool:
        key = self._key()
        expires, _, sig = cookie.partition(".")
        if key is None or not expires.isdigit() or int(expires) <= self.clock():
            return False
        return hmac.compare_digest(sig.encode(), self._sign(key, "session", expires).encode())

    def csrf(self, cookie: str) -> str:
        key = self._key()
        return self._sign(key, "csrf", cookie) if key is not None else ""

    def header_key(self, request: Request) -> bool:
        """The operator key sent by a script (Bearer or the owner API's header)."""
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth[:7].lower() == "bearer " else request.headers.get(OPERATOR_HEADER, "")
        return bool(given) and self.keys.accepts(given)

    def allowed(self, request: Request) -> bool:
        """Whether a GET may be answered: a valid session cookie or the key in a header."""
        return self.session(request.cookies.get(COOKIE, "")) or self.header_key(request)

    def allowed_post(self, request: Request, form: dict[str, str]) -> bool:
        """A state-changing request: the key in a header, or the cookie with its CSRF token from our origin."""
        if self.header_key(request):
            return True
        cookie = request.cookies.get(COOKIE, "")
        if not self.session(cookie) or not same_origin(request):
            return False
        return hmac.compare_digest(form.get("csrf", "").encode(), self.csrf(cookie).encode())


def same_origin(request: Request) -> bool:
    """No Origin (an old browser, a script) passes; one that names another host is refused."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.netloc == request.headers.get("host", "") and parts.scheme == request.url.scheme


async def read_form(request: Request) -> dict[str, str] | None:
    """An urlencoded form of at most MAX_FORM_BYTES (first value of each field), or None."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return None
    return {k: v[0] for k, v in parsed.items()}


def cookie_header(value: str, *, secure: bool, clear: bool = False) -> str:
    attrs = ["Path=/console", "HttpOnly", "SameSite=Strict"]
    if secure:
        attrs.append("Secure")
    if clear:
        attrs.append("Max-Age=0")
    return f"{COOKIE}={'' if clear else value}; " + "; ".join(attrs)
