"""`ragsync serve --workers N` (ragsync.serve_workers), through the real CLI and real processes: on the
cluster profile two serving processes share one socket, a revocation holds in every one of them, the
operator metrics add up every worker's requests, and a worker that dies stops the serve; on the
embedded profile the option is refused (one owner per home)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_cluster_end_to_end import cli, start_ragsync, stop
from test_cluster_end_to_end import cluster_env as cluster_env  # the fixture
from waiting import wait_until

from ragsync.demo import build_drive

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What is the salary band for a senior engineer?"


def announced(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 240) -> tuple[str, str, list[int]]:
    """The API and metrics URLs and the worker pids the supervisor announced once every worker was ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"serve exited {proc.returncode}:\n{log.read_text()}"
        lines = log.read_text().splitlines()
        api = next((ln.split("API on ", 1)[1].split()[0] for ln in lines if "API on " in ln), None)
        pids = next((ln.split("(pids ", 1)[1].split(")")[0] for ln in lines if "(pids " in ln), None)
        metrics = next((ln.split("metrics on ", 1)[1].split()[0] for ln in lines if "metrics on " in ln), None)
        if api and pids and metrics:
            return api, metrics.removesuffix("/metrics"), [int(p) for p in pids.split()]
        time.sleep(0.2)
    raise AssertionError(f"serve --workers announced nothing in {timeout_s}s:\n{log.read_text()}")


def asks_per_worker(multiproc: Path) -> Counter[int]:
    """POST /v1/ask requests each worker process observed, from its own multiprocess metrics file."""
    from prometheus_client.mmap_dict import MmapedDict

    counts: Counter[int] = Counter()
    for path in multiproc.glob("histogram_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
            _, sample, labels, *_ = json.loads(key)
            if sample.endswith("_bucket") and labels.get("route") == "/v1/ask":
                counts[pid] += int(value)
    return counts


def burst(api: str, token: str, n: int) -> list[dict[str, Any]]:
    """`n` asks at once, each on a connection of its own, so the kernel hands them to any worker."""

    def one(i: int) -> dict[str, Any]:
        with httpx.Client(base_url=api, timeout=120) as http:
            question = f"{QUESTION} (ticket 77-{i}-{time.monotonic_ns()})"
            response = http.post("/v1/ask", json={"question": question}, headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def shows_salaries(answer: dict[str, Any]) -> bool:
    text = json.dumps(answer)
    return "90,000" in text or "acme/hr/" in text


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_two_workers_share_the_socket_and_a_revocation_holds_in_both(
    tmp_path: Path, cluster_env: dict[str, str]
) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    multiproc = tmp_path / "metrics"
    multiproc.mkdir()
    env = {**os.environ, **cluster_env, "PYTHONPATH": str(REPO), "RAGSYNC_METRICS_PORT": "0"}
    worker = start_ragsync(["worker"], env, tmp_path / "worker.log")
    serve_log = tmp_path / "serve.log"
    serve = start_ragsync(
        ["serve", "--port", "0", "--workers", "2"], {**env, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}, serve_log
    )
    try:
        cli(cluster_env, "sync", str(drive), "--tenant", "acme,globex", "--json")
        hal = cli(cluster_env, "token", "issue", "--tenant", "acme", "--user", "hal", "--groups", "staff,hr").strip()
        api, metrics, pids = announced(serve_log, serve)
        assert len(set(pids)) == 2 and serve.pid not in pids

        def answered() -> bool:
            return bool(burst(api, hal, 1)[0]["answered"])

        wait_until(answered, 120, "the worker to index the drive", every_s=0.5)

        # Before: both workers answer hal from the salaries document.
        seen: Counter[int] = Counter()
        for _ in range(10):
            before = asks_per_worker(multiproc)
            answers = burst(api, hal, 12)
            assert all(a["answered"] and "90,000" in a["answer"] for a in answers), answers
            seen += asks_per_worker(multiproc) - before
            if all(seen[p] for p in pids):
                break
        assert all(seen[p] for p in pids), f"one worker answered every ask: {seen}"

        # The revocation: once one ask is denied, every ask on every worker is denied.
        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')
        assert json.loads(cli(cluster_env, "sync", str(drive), "--tenant", "acme,globex", "--json"))["acl_changes"] == 1
        wait_until(lambda: not answered(), 60, "the revocation", every_s=0.2)
        seen = Counter()
        for _ in range(10):
            before = asks_per_worker(multiproc)
            answers = burst(api, hal, 12)
            assert not any(shows_salaries(a) for a in answers), [a for a in answers if shows_salaries(a)]
            seen += asks_per_worker(multiproc) - before
            if all(seen[p] for p in pids):
                break
        assert all(seen[p] for p in pids), f"the revoked asks reached one worker only: {seen}"

        # Operator metrics add up every worker's requests, whichever worker answers the scrape.
        total = sum(asks_per_worker(multiproc).values())
        for _ in range(4):
            text = httpx.get(f"{metrics}/metrics", timeout=30).text
            scraped = [
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("ragsync_http_request_duration_seconds_count") and 'route="/v1/ask"' in line
            ]
            assert sum(scraped) == total > 0

        # A worker that dies stops the serve (exit 1) and the other worker with it.
        os.kill(pids[0], signal.SIGKILL)
        assert serve.wait(120) == 1
        wait_until(lambda: not Path(f"/proc/{pids[1]}").exists(), 60, "the other worker to stop")
    finally:
        stop(serve, worker)


def test_workers_are_refused_on_an_embedded_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
    env.update(RAGSYNC_HOME=str(tmp_path / "home"), RAGSYNC_CONFIG=os.devnull, PYTHONPATH=str(REPO))
    for args in (["--workers", "2"], ["--listen-fds", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert "cluster profile" in done.stderr
        assert not (tmp_path / "home" / "owner.lock").exists(), "refused before taking the home"
