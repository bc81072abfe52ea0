"""The git wiki and webhook sources wired through the CLI and the server, on the embedded profile."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from click.testing import CliRunner
from starlette.testclient import TestClient

from connectors.webhook import signed_headers
from query.tokens import issue_token
from ragsync.cli import main
from ragsync.demo import build_drive
from ragsync.server import server_app
from ragsync.settings import Settings
from ragsync.wiring import build
from schemas.principal import Principal


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_sync_a_git_wiki_then_ask(tmp_path: Path) -> None:
    repo = tmp_path / "wiki"
    build_drive(repo)
    git(repo, "init", "-q")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "wiki")
    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "none"),
        "RAGSYNC_SESSION_SECRET": "s",
    }
    runner = CliRunner()
    out = runner.invoke(
        main, ["sync", str(repo), "--tenant", "acme,globex", "--git", "--json"], env=env, catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["upserts"] == 4
    token = issue_token("s", Principal(tenant="globex", user="gus", groups=("staff",)))
    ask = runner.invoke(main, ["ask", "How many days to request a refund?", "--token", token, "--json"], env=env)
    answer = json.loads(ask.output)
    assert answer["answered"] and "14 days" in answer["answer"]
    assert answer["claims"][0]["source_url"].startswith("git+file://")


def test_serve_accepts_signed_webhook_pushes_and_answers_from_them(tmp_path: Path) -> None:
    hook = "hook-secret-of-the-crm"
    settings = Settings(
        home=tmp_path / "home",
        embed_model_path=None,
        session_secret="s",
        webhooks={"crm": {"secret": hook, "tenants": ["acme"]}},
    )
    components = build(settings)
    try:
        client = TestClient(server_app(components))
        body = json.dumps(
            {
                "action": "upsert",
                "tenant": "acme",
                "doc_id": "crm/kb-17",
                "title": "VPN",
                "content": "# VPN\n\nThe VPN gateway for remote staff is vpn.acme.example on port 443.",
                "content_type": "markdown",
                "acl": ["group:staff"],
                "source_url": "https://crm.example/kb/17",
                "sequence": 1,
            }
        ).encode()
        now = int(time.time())
        denied = client.post(
            "/v1/webhooks/crm", content=body, headers=signed_headers("wrong-secret-0123456", body, now)
        )
        assert denied.status_code == 401
        pushed = client.post("/v1/webhooks/crm", content=body, headers=signed_headers(hook, body, now))
        assert pushed.status_code == 202, pushed.text
        # The embedded worker applies what the push published.
        from streams.embedded_worker import EmbeddedWorker

        assert EmbeddedWorker(components.events, components.sink()).drain().applied == 1
        token = issue_token("s", Principal(tenant="acme", user="ann", groups=("staff",)))
        answer = client.post(
            "/v1/ask",
            json={"question": "Which port does the VPN gateway use?"},
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert answer["answered"] and answer["claims"][0]["source_url"] == "https://crm.example/kb/17"
    finally:
        components.close()
