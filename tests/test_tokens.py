"""Session tokens are standard JWTs: any language can mint them, and only what the keys allow passes.

The JWTs here are built by hand (hmac, base64 and `cryptography`, not PyJWT), so the verifier is
tested against an independent implementation of the format, as a backend in another language would
produce it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from starlette.testclient import TestClient

from query.api import create_app
from query.extractive import ExtractiveModel
from query.retrieval import Retriever
from query.tokens import (
    InvalidToken,
    TokenRules,
    TokenSigner,
    TokenVerifier,
    issue_legacy_token,
    load_jwks,
)
from query.worker import QueryWorker
from ragsync.cli import main
from ragsync.settings import SettingsError, load_settings
from schemas.principal import Principal

SECRET = "a-shared-secret-of-at-least-32-bytes!!"
ANN = Principal(tenant="acme", user="ann", groups=("staff",))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"sub": "ann", "tenant": "acme", "groups": ["staff"], "iat": now, "exp": now + 600}
    base["aud"] = "ragsync"
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def signing_input(header: dict[str, Any], payload: dict[str, Any]) -> bytes:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}".encode()


def hs256(payload: dict[str, Any], secret: str = SECRET, kid: str | None = "default", alg: str = "HS256") -> str:
    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    message = signing_input(header, payload)
    return f"{message.decode()}.{b64(hmac.new(secret.encode(), message, hashlib.sha256).digest())}"


def verifier(**rules: Any) -> TokenVerifier:
    return TokenVerifier({"default": SECRET}, rules=TokenRules(**rules))


# ---- HS256 --------------------------------------------------------------------------------------


def test_a_hand_made_hs256_jwt_is_accepted() -> None:
    assert verifier().verify(hs256(claims())) == ANN


def test_without_kid_the_current_key_is_used() -> None:
    assert verifier().verify(hs256(claims(), kid=None)) == ANN


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(lambda: tamper(hs256(claims()), groups=["staff", "hr"]), id="tampered-groups"),
        pytest.param(lambda: tamper(hs256(claims()), tenant="globex"), id="tampered-tenant"),
        pytest.param(lambda: hs256(claims(), secret="someone-elses-secret-of-32-bytes!!"), id="foreign-secret"),
        pytest.param(lambda: hs256(claims(), kid="k9"), id="unknown-kid"),
        pytest.param(lambda: unsigned(claims()), id="alg-none"),
        pytest.param(lambda: hs256(claims(), alg="HS512"), id="other-hmac-alg"),
        pytest.param(lambda: hs256(claims(aud=None)), id="no-aud"),
        pytest.param(lambda: hs256(claims(aud="another-service")), id="wrong-aud"),
        pytest.param(lambda: hs256(claims(iat=None)), id="no-iat"),
        pytest.param(lambda: hs256(claims(exp=None)), id="no-exp"),
        pytest.param(lambda: hs256(claims(exp=int(time.time()) - 60)), id="expired"),
        pytest.param(lambda: hs256(claims(iat=int(time.time()) + 3600)), id="issued-in-the-future"),
        pytest.param(lambda: hs256(claims(nbf=int(time.time()) + 3600)), id="not-yet-valid"),
        pytest.param(lambda: hs256(claims(groups="staff")), id="groups-not-a-list"),
        pytest.param(lambda: hs256(claims(groups=[1])), id="groups-not-strings"),
        pytest.param(lambda: hs256(claims(sub=None)), id="no-user"),
        pytest.param(lambda: hs256(claims(tenant="bad tenant/..")), id="bad-tenant"),
        pytest.param(lambda: "a.b.c", id="junk"),
        pytest.param(lambda: "", id="empty"),
    ],
)
def test_refused(token: Any) -> None:
    with pytest.raises(InvalidToken):
        verifier().verify(token())


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
@pytest.mark.parametrize(
    "value",
    # A string or a non-finite number slipped through float(): "NaN" compares false with every
    # instant and "Infinity" is later than all of them, so a key holder minted tokens that never expire.
    ["NaN", "Infinity", "-Infinity", "1e30", str(int(time.time()) + 600), float("nan"), float("inf"), True, 10**400],
    ids=["str-nan", "str-inf", "str-neg-inf", "str-big", "str-digits", "nan", "inf", "bool", "huge-int"],
)
def test_times_must_be_numeric_dates(claim: str, value: Any) -> None:
    with pytest.raises(InvalidToken, match=claim):
        verifier().verify(hs256(claims(**{claim: value})))


def test_numeric_dates_may_be_fractional() -> None:
    now = time.time()
    assert verifier().verify(hs256(claims(iat=now, nbf=now, exp=now + 60.5))) == ANN


def test_a_refused_token_is_logged_with_its_reason_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from indexer.sqlite_fts import SqliteLexicalIndex

    index = SqliteLexicalIndex(tmp_path / "lexical.db")
    worker = QueryWorker(Retriever(index, None, None, None), ExtractiveModel(), SECRET)
    bad = hs256(claims(groups="hr"))
    try:
        with TestClient(create_app(lambda: worker)) as client, caplog.at_level("INFO", logger="ragsync.api"):
            response = client.post("/v1/ask", json={"question": "q"}, headers={"Authorization": f"Bearer {bad}"})
    finally:
        index.close()

    assert response.status_code == 401 and response.json() == {"error": "invalid token"}, "one generic answer"
    assert "401 for POST /v1/ask: groups must be a list of strings" in caplog.messages
    assert not any(bad.split(".")[1] in m for m in caplog.messages), "never the token"


def tamper(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body.update(changes)
    return f"{header}.{b64(json.dumps(body).encode())}.{signature}"


def unsigned(payload: dict[str, Any]) -> str:
    return signing_input({"alg": "none", "typ": "JWT"}, payload).decode() + "."


def test_issuer_is_required_once_configured() -> None:
    strict = verifier(issuer="https://login.example")

    assert strict.verify(hs256(claims(iss="https://login.example"))) == ANN
    for bad in (claims(), claims(iss="https://evil.example")):
        with pytest.raises(InvalidToken):
            strict.verify(hs256(bad))


def test_leeway_absorbs_clock_skew_only() -> None:
    now = int(time.time())
    skewed = hs256(claims(iat=now + 20, exp=now - 20 + 600))

    assert verifier(leeway_s=30).verify(skewed) == ANN
    with pytest.raises(InvalidToken):
        verifier(leeway_s=5).verify(skewed)


def test_signer_output_is_a_standard_jwt() -> None:
    token = TokenSigner(SECRET, "k2").issue(ANN, ttl_s=120)
    header, payload, signature = token.split(".")

    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "kid": "k2", "typ": "JWT"}
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert body["sub"] == "ann" and body["tenant"] == "acme" and body["groups"] == ["staff"]
    assert body["aud"] == "ragsync" and body["exp"] - body["iat"] == 120
    expected = b64(hmac.new(SECRET.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest())
    assert signature == expected


# ---- key rotation -------------------------------------------------------------------------------

OLD, NEW = "the-old-key-that-is-being-retired-now", "the-new-key-that-signs-from-today-on!"


def test_two_keys_are_valid_during_a_rotation() -> None:
    rotating = TokenVerifier({"k2": NEW, "k1": OLD}, current_kid="k2")

    assert rotating.verify(TokenSigner(OLD, "k1").issue(ANN)) == ANN
    assert rotating.verify(TokenSigner(NEW, "k2").issue(ANN)) == ANN
    assert rotating.verify(hs256(claims(), secret=NEW, kid=None)) == ANN  # no kid: the current key
    with pytest.raises(InvalidToken):
        rotating.verify(hs256(claims(), secret=OLD, kid="k2"))  # a key is only ever checked under its own kid
    retired = TokenVerifier({"k2": NEW}, current_kid="k2")
    with pytest.raises(InvalidToken):
        retired.verify(TokenSigner(OLD, "k1").issue(ANN))


def test_rotation_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGSYNC_CONFIG", str(tmp_path / "ragsync.toml"))
    (tmp_path / "ragsync.toml").write_text(
        f'session_secret = "{NEW}"\nsession_key_id = "k2"\n[previous_session_secrets]\nk1 = "{OLD}"\n'
    )
    from ragsync.wiring import token_signer, token_verifier

    settings = load_settings()
    tokens = token_verifier(settings)

    assert tokens.verify(TokenSigner(OLD, "k1").issue(ANN)) == ANN
    assert tokens.verify(token_signer(settings).issue(ANN)) == ANN
    (tmp_path / "ragsync.toml").write_text(
        f'session_secret = "{NEW}"\nsession_key_id = "k1"\n[previous_session_secrets]\nk1 = "{OLD}"\n'
    )
    with pytest.raises(SettingsError, match="reuses the current session_key_id 'k1'"):
        load_settings()


# ---- an identity provider: RS256 / ES256 from a JWKS file -----------------------------------------


def int_b64(value: int, length: int | None = None) -> str:
    return b64(value.to_bytes(length or (value.bit_length() + 7) // 8, "big"))


@pytest.fixture(scope="module")
def idp() -> dict[str, Any]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_numbers = rsa_key.public_key().public_numbers()
    ec_numbers = ec_key.public_key().public_numbers()
    jwks = {
        "keys": [
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": int_b64(rsa_numbers.n),
             "e": int_b64(rsa_numbers.e)},
            {"kty": "EC", "kid": "ec-1", "use": "sig", "crv": "P-256", "x": int_b64(ec_numbers.x, 32),
             "y": int_b64(ec_numbers.y, 32)},
        ]
    }  # fmt: skip
    return {"rsa": rsa_key, "ec": ec_key, "jwks": jwks}


def rs256(key: rsa.RSAPrivateKey, payload: dict[str, Any], kid: str = "rsa-1") -> str:
    message = signing_input({"alg": "RS256", "typ": "JWT", "kid": kid}, payload)
    return f"{message.decode()}.{b64(key.sign(message, padding.PKCS1v15(), hashes.SHA256()))}"


def es256(key: ec.EllipticCurvePrivateKey, payload: dict[str, Any], kid: str = "ec-1") -> str:
    message = signing_input({"alg": "ES256", "typ": "JWT", "kid": kid}, payload)
    r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
    return f"{message.decode()}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


@pytest.fixture
def idp_verifier(idp: dict[str, Any], tmp_path: Path) -> TokenVerifier:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(idp["jwks"]))
    return TokenVerifier({"default": SECRET}, jwks=load_jwks(path))


def test_rs256_and_es256_from_the_jwks_are_accepted(idp: dict[str, Any], idp_verifier: TokenVerifier) -> None:
    assert idp_verifier.verify(rs256(idp["rsa"], claims())) == ANN
    assert idp_verifier.verify(es256(idp["ec"], claims())) == ANN


def test_identity_provider_tokens_refused(idp: dict[str, Any], idp_verifier: TokenVerifier) -> None:
    other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_public_pem = (
        idp["rsa"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    refused = {
        "tampered": tamper(rs256(idp["rsa"], claims()), groups=["admin"]),
        "other key, same kid": rs256(other_rsa, claims()),
        "unknown kid": rs256(idp["rsa"], claims(), kid="rsa-9"),
        "EC key named for RS256": rs256(idp["rsa"], claims(), kid="ec-1"),
        "public key as an HMAC secret": hs256(claims(), secret=rsa_public_pem, kid="rsa-1"),
        "expired": es256(idp["ec"], claims(exp=int(time.time()) - 120)),
        "wrong audience": es256(idp["ec"], claims(aud="someone-else")),
    }
    for what, token in refused.items():
        with pytest.raises(InvalidToken):
            idp_verifier.verify(token)
            pytest.fail(what)


def test_claim_names_follow_the_identity_provider(idp: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(idp["jwks"]))
    rules = TokenRules(user_claim="email", tenant_claim="org", groups_claim="roles", audience="api://ragsync")
    tokens = TokenVerifier({}, jwks=load_jwks(path), rules=rules)
    payload = claims(sub="00u1", email="ann", org="acme", roles=["staff"], aud="api://ragsync", tenant=None)
    payload.pop("groups")

    assert tokens.verify(es256(idp["ec"], payload)) == ANN


def test_a_bad_jwks_file_is_a_settings_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jwks.json").write_text('{"keys": "no"}')
    monkeypatch.setenv("RAGSYNC_JWKS_FILE", str(tmp_path / "jwks.json"))

    with pytest.raises(SettingsError) as caught:
        load_settings()

    (problem,) = caught.value.problems
    assert problem.startswith("environment variable RAGSYNC_JWKS_FILE: jwks_file") and "not a JWKS document" in problem


# ---- the previous format, during a migration window ---------------------------------------------


def test_previous_format_is_read_only_inside_the_window() -> None:
    legacy = issue_legacy_token(SECRET, ANN)
    open_window = verifier(legacy_until=datetime.now(UTC) + timedelta(days=7))
    closed = verifier(legacy_until=datetime.now(UTC) - timedelta(seconds=1))

    assert open_window.verify(legacy) == ANN
    with pytest.raises(InvalidToken, match="no longer accepted"):
        closed.verify(legacy)
    with pytest.raises(InvalidToken, match="no longer accepted"):
        verifier().verify(legacy)  # the default: no window
    signature = legacy.partition(".")[2]
    intruder = Principal(tenant="acme", user="x")
    forged_body = issue_legacy_token("attacker-secret-of-at-least-32-bytes", intruder).partition(".")[0]
    with pytest.raises(InvalidToken):
        open_window.verify(f"{forged_body}.{signature}")


def legacy(payload: dict[str, Any], secret: str = SECRET) -> str:
    """A token of the previous format built by hand: base64url(JSON claims) "." base64url(HMAC)."""
    body = b64(json.dumps(payload).encode())
    return f"{body}.{b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest())}"


def test_previous_format_groups_are_a_list_of_strings_or_refused() -> None:
    open_window = verifier(legacy_until=datetime.now(UTC) + timedelta(days=7))
    base = {"tenant": "acme", "user": "ann", "exp": int(time.time()) + 600}

    assert open_window.verify(legacy({**base, "groups": ["hr"]})).groups == ("hr",)
    assert open_window.verify(legacy(base)).groups == ()
    for groups in ("hr", {"hr": 1}, [1], ["hr", None], None):
        with pytest.raises(InvalidToken, match="groups must be a list of strings"):
            open_window.verify(legacy({**base, "groups": groups}))  # "hr" was read as the groups h and r


def test_previous_format_exp_is_a_numeric_date() -> None:
    open_window = verifier(legacy_until=datetime.now(UTC) + timedelta(days=7))
    base = {"tenant": "acme", "user": "ann", "groups": ["staff"], "exp": int(time.time()) + 600}

    assert open_window.verify(legacy(base)) == ANN
    for exp in ("NaN", "Infinity", str(int(time.time()) + 600), float("inf"), True, None):
        with pytest.raises(InvalidToken, match="exp"):
            open_window.verify(legacy({**base, "exp": exp}))
    for odd in ([base], "claims", 7):
        with pytest.raises(InvalidToken):
            open_window.verify(legacy(odd))  # type: ignore[arg-type]


# ---- through the API and the CLI ----------------------------------------------------------------


def test_the_api_accepts_a_hand_made_jwt_and_refuses_a_tampered_one(tmp_path: Path) -> None:
    from conftest import make_passage

    from indexer.sqlite_fts import SqliteLexicalIndex

    lexical = SqliteLexicalIndex(tmp_path / "lexical.db")
    lexical.upsert([make_passage("Refunds are paid within 14 days.", doc_id="refunds.md")])
    worker = QueryWorker(Retriever(lexical, None, None, None), ExtractiveModel(), verifier())
    try:
        with TestClient(create_app(lambda: worker)) as client:
            good = hs256(claims())
            answered = client.post(
                "/v1/ask", json={"question": "When are refunds paid?"}, headers={"Authorization": f"Bearer {good}"}
            )
            tampered = client.post(
                "/v1/ask",
                json={"question": "When are refunds paid?"},
                headers={"Authorization": f"Bearer {tamper(good, groups=['hr'])}"},
            )
    finally:
        lexical.close()

    assert answered.status_code == 200 and answered.json()["answered"] is True
    assert tampered.status_code == 401 and tampered.json() == {"error": "invalid token"}


def test_the_cli_asks_with_a_hand_made_jwt(tmp_path: Path) -> None:
    from ragsync.demo import build_drive

    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "no-model"),
        "RAGSYNC_SESSION_SECRET": SECRET,
        "RAGSYNC_CONFIG": os.devnull,
    }
    build_drive(tmp_path / "drive")
    runner = CliRunner()
    assert runner.invoke(main, ["sync", str(tmp_path / "drive"), "--tenant", "acme,globex"], env=env).exit_code == 0

    good = runner.invoke(main, ["ask", "How many days to request a refund?", "--token", hs256(claims())], env=env)
    bad = runner.invoke(main, ["ask", "How many days?", "--token", tamper(hs256(claims()), tenant="globex")], env=env)

    assert good.exit_code == 0 and "30 days" in good.output
    assert bad.exit_code == 2 and "invalid session token" in bad.output
