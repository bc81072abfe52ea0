"""Signed session tokens: the only way a principal enters the query worker.

Format: base64url(JSON claims) "." base64url(HMAC-SHA256(secret, claims part)). The server
secret never leaves the server; a tampered, expired or foreign-secret token is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from pydantic import ValidationError

from schemas.principal import Principal


class InvalidToken(Exception):
    pass


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(secret: str, principal: Principal, ttl_s: int = 3600, now: float | None = None) -> str:
    if not secret:
        raise ValueError("a session secret is required")
    issued = int(now if now is not None else time.time())
    claims = {
        "tenant": principal.tenant,
        "user": principal.user,
        "groups": list(principal.groups),
        "exp": issued + ttl_s,
    }
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    signature = _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest())
    return f"{body}.{signature}"


def verify_token(secret: str, token: str, now: float | None = None) -> Principal:
    if not secret:
        raise InvalidToken("the server has no session secret configured")
    body, dot, signature = token.strip().partition(".")
    if not dot or not body or not signature:
        raise InvalidToken("malformed token")
    expected = _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(expected, signature):
        raise InvalidToken("bad signature")
    try:
        claims = json.loads(_unb64(body))
        expires = int(claims["exp"])
        principal = Principal(tenant=claims["tenant"], user=claims["user"], groups=tuple(claims.get("groups", [])))
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        raise InvalidToken("malformed claims") from exc
    if expires <= (now if now is not None else time.time()):
        raise InvalidToken("token expired")
    return principal
