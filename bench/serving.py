"""A real `ragsync serve` for the benchmarks that ask over HTTP (bench/api_load.py,
bench/serve_revocation.py): one way to start it, wait for it and stop it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def start_serve(
    env: dict[str, str], log: Path, *, cwd: Path = ROOT, timeout_s: float = 300.0, args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """`ragsync serve --port 0 [args]` with `env` (RAGSYNC_HOME, profile, secret, PYTHONPATH for the source tree to
    run), its output in `log`; returns it once /readyz answers 200, with the API's base URL. The address
    is the one this process announced ("API on ..."), so a serve left behind by another run is never
    mistaken for it. Exits the benchmark, with the log's tail, when the serve exits or is not ready in time."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0", *args],
        env=env,
        cwd=cwd,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
        lines = log.read_text().splitlines()
        api = next((line.split("API on ", 1)[1].split()[0] for line in lines if "API on " in line), None)
        if api is not None:
            try:
                if httpx.get(f"{api}/readyz", timeout=5).status_code == 200:
                    return proc, api
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    stop(proc)
    raise SystemExit(f"serve not ready within {timeout_s:.0f}s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen[bytes] | None, timeout_s: float = 120.0) -> None:
    """SIGTERM (serve shuts down gracefully and closes its stores), then SIGKILL after `timeout_s`."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
