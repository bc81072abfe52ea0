"""`ragsync serve` and `ragsync.server:app` as users run them: real processes, real sockets, model loaded.

Operator metrics never reach askers (issue 8, item 9): per-reason abstention counts would let a
caller diff them around its own ask and learn whether a denied document exists.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from conftest import MODEL_PATH

from ragsync.demo import build_drive

REPO = Path(__file__).resolve().parents[1]
QUESTION = "How many days do customers have to request a refund?"


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
    env.update(
        RAGSYNC_HOME=str(tmp_path / "home"),
        RAGSYNC_EMBED_MODEL_PATH=str(MODEL_PATH),
        RAGSYNC_SESSION_SECRET="server-test",
        RAGSYNC_CONFIG=os.devnull,
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragsync.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


@dataclass
class Server:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def start_reading(self) -> None:
        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.lines.append(line.rstrip("\n"))

        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, pattern: str, timeout_s: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}; got: {self.lines}")

    def stop(self, how: signal.Signals = signal.SIGINT) -> int:
        if self.process.poll() is None:
            self.process.send_signal(how)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def launch(argv: list[str], env: dict[str, str]) -> Server:
    process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    server = Server(process)
    server.start_reading()
    return server


@pytest.fixture
def synced(tmp_path: Path) -> tuple[dict[str, str], str]:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    env = base_env(tmp_path)
    build_drive(tmp_path / "drive")
    done = cli(env, "sync", str(tmp_path / "drive"), "--tenant", "acme,globex", "--json")
    assert done.returncode == 0, done.stderr
    assert '"dense": true' in done.stdout
    issued = cli(env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff")
    assert issued.returncode == 0, issued.stderr
    return env, issued.stdout.strip()


@pytest.fixture
def serve(synced: tuple[dict[str, str], str]) -> Iterator[tuple[Server, str, str, str]]:
    env, token = synced
    server = launch([sys.executable, "-m", "ragsync.cli", "serve", "--port", "0"], {**env, "RAGSYNC_METRICS_PORT": "0"})
    try:
        api = server.wait_for(r"API on (http://127\.0\.0\.1:\d+)").group(1)
        metrics = server.wait_for(r"operator metrics on (http://127\.0\.0\.1:\d+)/metrics").group(1)
        yield server, api, metrics, token
    finally:
        server.stop()


def sample(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing"
    return float(match.group(1))


def test_serve_answers_and_keeps_metrics_on_the_operator_listener(serve: tuple[Server, str, str, str]) -> None:
    server, api, metrics, token = serve
    headers = {"Authorization": f"Bearer {token}"}

    answer = httpx.post(f"{api}/v1/ask", json={"question": QUESTION, "as_of": "2026-03-01"}, headers=headers)
    denied = httpx.post(f"{api}/v1/ask", json={"question": "What is the salary band?"}, headers=headers)
    on_api = httpx.get(f"{api}/metrics")
    scraped = httpx.get(f"{metrics}/metrics")

    assert answer.status_code == 200 and answer.json()["answered"] is True
    assert denied.status_code == 200 and denied.json()["answered"] is False
    assert on_api.status_code == 404, "askers must not read per-reason abstention counts"
    assert scraped.status_code == 200
    text = scraped.text
    assert sample(text, "ragsync_asks_total") == 2
    assert sample(text, 'ragsync_asks_abstained_total{reason="no_visible_evidence"}') >= 0
    assert sample(text, 'ragsync_ask_latency_seconds_bucket{le="+Inf"}') == 2
    assert 'ragsync_http_request_duration_seconds_bucket{le="0.5",method="POST",route="/v1/ask",status="200"}' in text
    assert sample(text, 'ragsync_events_backlog{topic="documents"}') == 0
    assert sample(text, 'ragsync_events_applied_total{topic="documents"}') == 4  # the four drive documents
    assert sample(text, "ragsync_dead_letters") == 0
    assert sample(text, "process_resident_memory_bytes") > 0
    # One request log line per request, with its latency, and never the question.
    server.wait_for(r"ragsync\.http: POST /v1/ask 200 \d+\.\dms")
    server.wait_for(r"ragsync\.http: GET /metrics 404")
    assert not any("refund" in line or "salary" in line for line in server.lines)


def test_serve_startup_names_every_address(serve: tuple[Server, str, str, str]) -> None:
    server, api, _, _ = serve

    assert httpx.get(f"{api}/openapi.json").json()["paths"]["/v1/ask"]
    assert httpx.get(f"{api}/readyz").json()["status"] == "ready"
    assert any(f"docs {api}/docs" in line for line in server.lines)
    # Loopback is no credential: any account of the machine can scrape, and the startup line says so.
    assert any(
        "/metrics (no credential: any local account can read them; set metrics_token" in line for line in server.lines
    )
    assert server.stop(signal.SIGTERM) == 0  # a graceful stop, as under a service manager


def test_metrics_off_loopback_need_an_operator_credential(synced: tuple[dict[str, str], str]) -> None:
    env, _ = synced
    done = cli({**env, "RAGSYNC_METRICS_HOST": "0.0.0.0"}, "serve", "--port", "0")

    assert done.returncode == 2
    assert "error: metrics_host '0.0.0.0' is not a loopback address: set metrics_token" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_metrics_token_guards_the_operator_listener(synced: tuple[dict[str, str], str]) -> None:
    """On loopback too: when set, the token is required on every metrics listener."""
    env, _ = synced
    server = launch(
        [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0"],
        {**env, "RAGSYNC_METRICS_PORT": "0", "RAGSYNC_METRICS_TOKEN": "operator-secret"},
    )
    try:
        metrics = server.wait_for(r"operator metrics on (http://127\.0\.0\.1:\d+)/metrics \(Bearer").group(1)
        anonymous = httpx.get(f"{metrics}/metrics")
        wrong = httpx.get(f"{metrics}/metrics", headers={"Authorization": "Bearer server-test"})
        operator = httpx.get(f"{metrics}/metrics", headers={"Authorization": "Bearer operator-secret"})
    finally:
        server.stop()

    assert anonymous.status_code == wrong.status_code == 401
    assert operator.status_code == 200 and "ragsync_asks_total" in operator.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_asgi_app_runs_under_uvicorn_from_settings(synced: tuple[dict[str, str], str]) -> None:
    env, token = synced
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "ragsync.server:app", "--port", str(port), "--no-access-log"],
        {**env, "RAGSYNC_METRICS_TOKEN": "operator-secret"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        server.wait_for(r"Application startup complete")
        answer = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, headers={"Authorization": f"Bearer {token}"})
        anonymous = httpx.get(f"{base}/metrics")
        operator = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer operator-secret"})
    finally:
        server.stop()

    assert answer.status_code == 200 and answer.json()["answered"] is True
    assert anonymous.status_code == 401
    assert operator.status_code == 200 and sample(operator.text, "ragsync_asks_answered_total") == 1


def test_the_asgi_app_refuses_bad_settings_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "ragsync.server:app", "--port", str(port)],
        base_env(tmp_path, RAGSYNC_TOPK="3"),
    )
    code = server.process.wait(timeout=120)
    time.sleep(0.2)

    assert code != 0
    expected = "environment variable RAGSYNC_TOPK: unknown setting (did you mean RAGSYNC_TOP_K?)"
    assert any(expected in line for line in server.lines), server.lines
    assert not any("Traceback" in line for line in server.lines), server.lines


def test_openapi_documents_webhook_pushes_from_their_models(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from ragsync.server import server_app
    from ragsync.settings import Settings
    from ragsync.wiring import build

    hooks = {"kb": {"secret": "hook-secret-0123456789", "tenants": ["acme"]}}
    components = build(Settings(home=tmp_path / "home", session_secret="s" * 32, webhooks=hooks))
    try:
        spec = TestClient(server_app(components)).get("/openapi.json").json()
    finally:
        components.close()

    push = spec["paths"]["/v1/webhooks/{source}"]["post"]
    assert "X-Ragsync-Signature" in [p["name"] for p in push["parameters"]]
    assert {"UpsertPush", "AclPush", "DeletePush"} <= set(spec["components"]["schemas"])
    assert spec["components"]["schemas"]["UpsertPush"]["additionalProperties"] is False
    assert "/v1/ask" in spec["paths"]
