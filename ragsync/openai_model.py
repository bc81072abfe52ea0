"""Builds the OpenAI-compatible chat adapter from Settings: the composition root's side of query.openai_model.

The adapter takes plain arguments; only this module reads Settings and the environment.
"""

from __future__ import annotations

import os

from query.openai_model import OpenAICompatibleModel
from query.ports import ModelUnavailable
from ragsync.settings import Settings

API_KEY_ENV = "RAGSYNC_OPENAI_API_KEY"


def openai_model_from_settings(settings: Settings) -> OpenAICompatibleModel:
    """Missing URL or model name fails here, at startup, rather than on the first question.

    The key is optional (a local server usually wants none) and comes from the environment only, so
    it never lands in a settings file or a settings dump. OPENAI_API_KEY is deliberately not read: a
    key meant for OpenAI would otherwise be sent to whatever server openai_base_url names.
    """
    if not settings.openai_base_url:
        raise ModelUnavailable(
            "model = 'openai' needs openai_base_url (e.g. http://127.0.0.1:8000/v1)", retryable=False
        )
    if not settings.openai_model:
        raise ModelUnavailable("model = 'openai' needs openai_model (the name the server serves)", retryable=False)
    try:
        return OpenAICompatibleModel(
            settings.openai_base_url,
            settings.openai_model,
            api_key=os.environ.get(API_KEY_ENV, "").strip() or None,
            timeout_s=settings.openai_timeout_s,
            tool_choice=settings.openai_tool_choice,
        )
    except ValueError as exc:
        raise ModelUnavailable(f"openai_base_url: {exc}", retryable=False) from exc
