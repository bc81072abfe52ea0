"""The HTTP surface of `ragsync serve`: the ask API, plus webhook pushes when a secret is set."""

from __future__ import annotations

from starlette.applications import Starlette

from query.api import create_app
from ragsync.wiring import Components


def server_app(components: Components) -> Starlette:
    app = create_app(components.query_worker)
    secret = components.settings.webhook_secret
    if secret:
        from connectors.state import ConnectorState
        from connectors.webhook import create_webhook_app
        from streams.ports import publish_durably

        state = ConnectorState(components.settings.home / "connectors.db")
        components.closers.append(state)
        app.mount("", create_webhook_app(publish_durably(components.events), secret, state))
    return app
