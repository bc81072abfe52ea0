"""Run `ragsync serve` and other ragsync commands as real processes, for the end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from conftest import MODEL_PATH

from query.tokens import issue_token
from schemas.principal import Principal

ROOT = Path(__file__).resolve().parents[1]
SECRET = "serve-e2e-secret"


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_") or k == "RAGSYNC_REQUIRE_SERVICES"}
    env.update(
        RAGSYNC_HOME=str(home),
        RAGSYNC_EMBED_MODEL_PATH=str(MODEL_PATH),
        RAGSYNC_SESSION_SECRET=SECRET,
        RAGSYNC_CONFIG=os.devnull,
        RAGSYNC_METRICS_PORT="0",  # a free port: never the shared default another serve may hold
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert done.returncode == 0, f"ragsync {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return done


def token(tenant: str, user: str, *groups: str) -> str:
    return issue_token(SECRET, Principal(tenant=tenant, user=user, groups=groups))


class Serve:
    """`ragsync serve --port 0` on a home; ready once /readyz answers 200 (stores open, indexer running)."""

    def __init__(self, env: dict[str, str], *args: str, timeout_s: float = 120) -> None:
        self.env = env
        self.home = Path(env["RAGSYNC_HOME"])
        self.log = self.home.parent / f"serve-{time.monotonic_ns()}.log"
        self.home.mkdir(parents=True, exist_ok=True)
        self._out = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0", *args],
            env=env,
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.api = self._wait_ready(timeout_s)
        self.http = httpx.Client(base_url=self.api, timeout=60)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.output()}")
            try:
                info = json.loads((self.home / "owner.lock").read_text() or "{}")
                mine = info.get("pid") == self.proc.pid and info.get("api")
                if mine and httpx.get(f"{info['api']}/readyz", timeout=5).status_code == 200:
                    return str(info["api"])
            except (OSError, ValueError, httpx.HTTPError):
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve not ready after {timeout_s}s:\n{self.output()}")

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.log.read_text()

    def ask(self, tok: str, question: str) -> dict[str, Any]:
        response = self.http.post("/v1/ask", json={"question": question}, headers={"Authorization": f"Bearer {tok}"})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def ready(self) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get("/readyz").json()
        return body

    def wait_drained(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(self.ready()["backlog"].values()):
                return
            time.sleep(0.1)
        raise AssertionError(f"backlog not drained: {self.ready()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout_s)
        self.http.close()
        self._out.close()
        return self.proc.returncode

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cites(answer: dict[str, Any], path: str) -> bool:
    """Whether a claim quotes the document at `path` (doc IDs are <source>:<path>)."""
    return any(c["passage_id"].split("@", 1)[0].split(":", 1)[-1] == path for c in answer["claims"])
