"""Session tokens' rules, verifier and signer, built from Settings (query.tokens takes plain arguments)."""

from __future__ import annotations

from query.tokens import TokenRules, TokenSigner, TokenVerifier, load_jwks
from ragsync.settings import Settings


def token_rules(settings: Settings) -> TokenRules:
    return TokenRules(
        audience=settings.token_audience,
        issuer=settings.token_issuer,
        leeway_s=settings.token_leeway_s,
        user_claim=settings.jwt_user_claim,
        tenant_claim=settings.jwt_tenant_claim,
        groups_claim=settings.jwt_groups_claim,
        legacy_until=settings.legacy_tokens_until,
    )


def token_verifier(settings: Settings) -> TokenVerifier:
    """The current key, the previous ones of a rotation, and the identity provider's JWKS."""
    keys = {settings.session_key_id: settings.secret(), **settings.previous_session_secrets}
    jwks = load_jwks(settings.jwks_file) if settings.jwks_file is not None else None
    return TokenVerifier(keys, current_kid=settings.session_key_id, jwks=jwks, rules=token_rules(settings))


def token_signer(settings: Settings) -> TokenSigner:
    return TokenSigner(settings.secret(), settings.session_key_id, token_rules(settings))
