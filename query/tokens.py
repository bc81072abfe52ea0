"""Session tokens: the only way a principal enters the query worker.

Tokens are standard JWTs (RFC 7519), so a backend in any language can mint them with its own JWT
library:
- HS256 with a shared secret (ragsync's own `session_secret`, or a key a backend shares), with a
  `kid` header naming the key: during a rotation two keys are valid at once (the current one signs,
  the previous ones still verify) until every token signed with the old one has expired.
- RS256 or ES256 from an identity provider, verified with the public keys of a configured JWKS
  file, selected by `kid`.
Claims: `sub` the user, `tenant`, `groups` (a list), `iat`, `exp` and `aud` (all required and
checked, with a small leeway for clock skew), `iss` when an issuer is configured. `exp`, `iat` and
`nbf` are NumericDates (RFC 7519: a JSON number of seconds); a string, a boolean, NaN or an
infinity is refused, since "NaN" or "Infinity" would make a token that never expires. The claim names
for tenant, groups and user can be changed to match an identity provider's.

Fail closed: the accepted algorithms come from the key, never from the token (an HMAC key is only
used for HS256, a JWKS key only for its own asymmetric algorithm, so a token cannot make the server
check an RSA public key as an HMAC secret); `alg: none`, unknown `kid`s, missing claims and
non-string groups are refused. Every refusal is an InvalidToken, which the API answers with one
generic 401.

The previous format, base64url(JSON claims) "." base64url(HMAC-SHA256(secret, claims part)), is
still read until `legacy_until` (a migration window), and refused after it. Its claims get the same
checks: `groups` a list of strings (a string is refused, never split into one group per letter).
The reason for a refusal is logged by the API (`401 for POST /v1/ask: <reason>`), never the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jwt
from pydantic import ValidationError

from schemas.errors import InvalidToken as InvalidToken  # re-export (schemas.errors)
from schemas.principal import Principal

log = logging.getLogger(__name__)

DEFAULT_AUDIENCE = "ragsync"
DEFAULT_KID = "default"
HMAC_ALGORITHM = "HS256"
ASYMMETRIC_ALGORITHMS = {"RS256": "RSA", "ES256": "EC"}
"""Algorithm -> the JWK key type it needs."""
MIN_HMAC_KEY_BYTES = 32  # RFC 7518 section 3.2


@dataclass(frozen=True)
class TokenRules:
    """What a valid token must say, beyond its signature."""

    audience: str = DEFAULT_AUDIENCE
    issuer: str | None = None
    leeway_s: float = 30.0
    user_claim: str = "sub"
    tenant_claim: str = "tenant"
    groups_claim: str = "groups"
    legacy_until: datetime | None = None  # read the previous format until then; None: never


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _quietly_hmac(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """PyJWT warns on every call with a short HMAC key; the verifier has warned once already."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
        return fn(*args, **kwargs)


_WARNED_SHORT: set[str] = set()


def _warn_if_short(kid: str, secret: str) -> None:
    if len(secret.encode()) < MIN_HMAC_KEY_BYTES and kid not in _WARNED_SHORT:
        _WARNED_SHORT.add(kid)
        log.warning(
            "the HS256 key %r is %d bytes; use at least %d random bytes (RFC 7518 3.2)",
            kid,
            len(secret.encode()),
            MIN_HMAC_KEY_BYTES,
        )


@dataclass(frozen=True)
class TokenSigner:
    """Mints HS256 JWTs with the current key (what `ragsync token issue` and the demo use)."""

    secret: str
    kid: str = DEFAULT_KID
    rules: TokenRules = field(default_factory=TokenRules)

    def issue(self, principal: Principal, ttl_s: int = 3600, now: float | None = None) -> str:
        if not self.secret:
            raise ValueError("a session secret is required")
        issued = int(now if now is not None else time.time())
        claims: dict[str, Any] = {
            self.rules.user_claim: principal.user,
            self.rules.tenant_claim: principal.tenant,
            self.rules.groups_claim: list(principal.groups),
            "iat": issued,
            "exp": issued + ttl_s,
            "aud": self.rules.audience,
        }
        if self.rules.issuer:
            claims["iss"] = self.rules.issuer
        token: str = _quietly_hmac(jwt.encode, claims, self.secret, algorithm=HMAC_ALGORITHM, headers={"kid": self.kid})
        return token


class TokenVerifier:
    """Verifies JWTs against the configured keys (and, within the window, the previous format)."""

    def __init__(
        self,
        hmac_keys: Mapping[str, str],
        *,
        current_kid: str = DEFAULT_KID,
        jwks: jwt.PyJWKSet | None = None,
        rules: TokenRules | None = None,
    ) -> None:
        self.hmac_keys = {kid: secret for kid, secret in hmac_keys.items() if secret}
        self.current_kid = current_kid
        self.jwks = jwks
        self.rules = rules or TokenRules()
        for kid, secret in self.hmac_keys.items():
            _warn_if_short(kid, secret)

    @classmethod
    def shared_secret(cls, secret: str, rules: TokenRules | None = None) -> TokenVerifier:
        return cls({DEFAULT_KID: secret}, rules=rules)

    def verify(self, token: str, now: float | None = None) -> Principal:
        """The token's principal; InvalidToken for anything else (the reason is for logs, not callers)."""
        instant = now if now is not None else time.time()
        token = token.strip()
        parts = token.split(".")
        if len(parts) == 2:
            return self._legacy(parts[0], parts[1], instant)
        if len(parts) != 3 or not all(parts):
            raise InvalidToken("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken("malformed token header") from exc
        algorithm = header.get("alg")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("malformed kid")
        key = self._key(algorithm, kid)
        try:
            claims: dict[str, Any] = _quietly_hmac(
                jwt.decode,
                token,
                key,
                algorithms=[algorithm],
                audience=self.rules.audience,
                issuer=self.rules.issuer,
                options={
                    "require": ["exp", "iat", "aud"],
                    "verify_exp": False,  # times are checked below against `now`, with the same leeway
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidSignatureError as exc:
            raise InvalidToken("bad signature") from exc
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"invalid token: {type(exc).__name__}") from exc
        self._check_times(claims, instant)
        return self._principal(claims)

    def _key(self, algorithm: object, kid: str | None) -> Any:
        if algorithm == HMAC_ALGORITHM:
            secret = self.hmac_keys.get(kid if kid is not None else self.current_kid)
            if secret is None:
                raise InvalidToken("unknown key id")
            return secret
        if isinstance(algorithm, str) and algorithm in ASYMMETRIC_ALGORITHMS and self.jwks is not None:
            candidates = [k for k in self.jwks.keys if k.key_id == kid] if kid is not None else list(self.jwks.keys)
            if len(candidates) != 1:
                raise InvalidToken("unknown key id")
            jwk = candidates[0]
            # The key's own algorithm (its "alg", else what its kty and curve imply) must be the token's.
            if jwk.algorithm_name != algorithm or jwk.key_type != ASYMMETRIC_ALGORITHMS[algorithm]:
                raise InvalidToken("the key does not allow this algorithm")
            if jwk.public_key_use not in (None, "sig"):
                raise InvalidToken("the key is not for signatures")
            return jwk.key
        raise InvalidToken("algorithm not accepted")

    def _check_times(self, claims: Mapping[str, Any], now: float) -> None:
        leeway = self.rules.leeway_s
        expires = numeric_date(claims, "exp")
        issued = numeric_date(claims, "iat")
        not_before = numeric_date(claims, "nbf") if "nbf" in claims else issued
        if expires + leeway <= now:
            raise InvalidToken("token expired")
        if issued - leeway > now or not_before - leeway > now:
            raise InvalidToken("token not valid yet")

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        return principal_of(
            claims.get(self.rules.tenant_claim),
            claims.get(self.rules.user_claim),
            claims.get(self.rules.groups_claim, []),
        )

    def _legacy(self, body: str, signature: str, now: float) -> Principal:
        """The previous format, accepted only inside the migration window."""
        until = self.rules.legacy_until
        if until is None or now >= until.timestamp():
            raise InvalidToken("the previous token format is no longer accepted")
        if not body or not signature:
            raise InvalidToken("malformed token")
        for secret in self.hmac_keys.values():
            expected = _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest())
            if hmac.compare_digest(expected, signature):
                break
        else:
            raise InvalidToken("bad signature")
        try:
            claims = json.loads(_unb64(body))
        except ValueError as exc:
            raise InvalidToken("malformed claims") from exc
        if not isinstance(claims, dict):
            raise InvalidToken("malformed claims")
        if numeric_date(claims, "exp") <= now:
            raise InvalidToken("token expired")
        return principal_of(claims.get("tenant"), claims.get("user"), claims.get("groups", []))


def numeric_date(claims: Mapping[str, Any], name: str) -> float:
    """The claim as an RFC 7519 NumericDate (a JSON number of seconds), else InvalidToken.

    Strings, booleans, NaN and the infinities are refused: `float("NaN")` compares false with every
    instant and `"Infinity"` is later than all of them, so either made a token that never expires.
    """
    value = claims.get(name)
    if value is None:
        raise InvalidToken(f"missing {name}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"{name} is not a NumericDate")
    try:
        seconds = float(value)
    except OverflowError:
        raise InvalidToken(f"{name} is out of range") from None
    if not math.isfinite(seconds):
        raise InvalidToken(f"{name} is not a finite NumericDate")
    return seconds


def principal_of(tenant: object, user: object, groups: object) -> Principal:
    """The principal the claims name: strings only, and groups a list of strings. A string is not
    split into groups ("hr" is not h and r); anything else is refused, never coerced."""
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise InvalidToken("groups must be a list of strings")
    if not isinstance(user, str) or not isinstance(tenant, str):
        raise InvalidToken("missing user or tenant")
    try:
        return Principal(tenant=tenant, user=user, groups=tuple(groups))
    except ValidationError as exc:
        raise InvalidToken("malformed claims") from exc


def load_jwks(path: Path) -> jwt.PyJWKSet:
    """The public keys of an identity provider (its JWKS document, saved to a file)."""
    try:
        return jwt.PyJWKSet.from_json(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (jwt.PyJWKSetError, jwt.PyJWKError, ValueError, TypeError) as exc:
        raise ValueError(f'{path} is not a JWKS document ({{"keys": [...]}}): {exc}') from None


def issue_token(secret: str, principal: Principal, ttl_s: int = 3600, now: float | None = None) -> str:
    """An HS256 JWT for `principal`, signed with `secret` under the default key id (tests, tools)."""
    return TokenSigner(secret).issue(principal, ttl_s, now)


def issue_legacy_token(secret: str, principal: Principal, ttl_s: int = 3600, now: float | None = None) -> str:
    """The previous format (for migration tests): base64url(JSON claims) "." base64url(HMAC)."""
    issued = int(now if now is not None else time.time())
    claims = {
        "tenant": principal.tenant,
        "user": principal.user,
        "groups": list(principal.groups),
        "exp": issued + ttl_s,
    }
    body = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest())}"


def verify_token(secret: str, token: str, now: float | None = None) -> Principal:
    """Verify an HS256 JWT signed with `secret` (default key id or none)."""
    if not secret:
        raise InvalidToken("the server has no session secret configured")
    return TokenVerifier.shared_secret(secret).verify(token, now)
