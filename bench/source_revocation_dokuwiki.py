#!/usr/bin/env python3
"""Revocation in the wiki itself, timed to the first served answer without the page (issue 19 item 7).

`ragsync serve` runs with a private DokuWiki (tests/dokuwiki_world.py) declared in `[[sources]]`
(kind = "dokuwiki", interval_s = --interval). --n pages `vault:vNN` are each readable by @staff
through a page rule; ann (in staff) asks about each until the serve cites it. Then, one page at a
time, the page rule is deleted through the wiki's ACL API (`plugin.acl.delAcl`) and a poller asks the
serve over HTTP as ann, as a backend would, until the answer no longer cites the page: the latency
is from the API call's start to that answer. It includes waiting for the next pass (up to
interval_s), the pass (page list, rules, users through the API) and the ACL event's application.

    python3 bench/source_revocation_dokuwiki.py            # 50 revocations, interval 2 s

Writes the `dokuwiki` entry of bench/results/source_revocation.json (other entries kept):
{"n", "p50", "p99", "interval_s"}. Goal: p99 <= interval_s + 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import free_port  # noqa: E402
from dokuwiki_world import ADMIN, PASSWORD, Wiki, available  # noqa: E402

from query.tokens import issue_token  # noqa: E402
from schemas.principal import Principal  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "source_revocation.json"
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")
SECRET = "bench-source-revocation-secret-0123456789"
WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "indigo", "jasper"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))]


def start_serve(env: dict[str, str], home: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0"],
        env=env,
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited:\n{log.read_text()}")
        try:
            info = json.loads((home / "owner.lock").read_text() or "{}")
            mine = info.get("pid") == proc.pid and info.get("api")
            if mine and httpx.get(f"{info['api']}/readyz", timeout=5).status_code in (200, 503):
                return proc, str(info["api"])
        except (OSError, ValueError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    raise SystemExit("serve not ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    why = available()
    if why:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-wiki-revocation-") as tmp:
        root = Path(tmp)
        wiki = Wiki(root / "services", free_port()).start()
        proc: subprocess.Popen[bytes] | None = None
        try:
            wiki.create_user("ann", ["staff", "user"])
            wiki.create_user("bob", ["eng", "user"])
            wiki.revoke("*", "@user")
            wiki.grant("*", "@ALL", 0)
            for i in range(args.n):
                word = f"{WORDS[i % len(WORDS)]}{i:02d}"
                wiki.put(
                    f"vault:v{i:02d}", f"====== Vault {i} ======\n\nThe access code for vault number {i} is {word}.\n"
                )
                wiki.grant(f"vault:v{i:02d}", "@staff", 1)
            config = root / "ragsync.toml"
            config.write_text(
                "[[sources]]\n"
                'name = "wiki"\nkind = "dokuwiki"\n'
                f'url = "{wiki.url}"\nusername = "{ADMIN}"\npassword_env = "BENCH_WIKI_PASSWORD"\n'
                f'tenants = ["acme"]\ninterval_s = {args.interval}\n'
            )
            home = root / "home"
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
            env.update(
                RAGSYNC_HOME=str(home),
                RAGSYNC_EMBED_MODEL_PATH=str(MODEL),
                RAGSYNC_SESSION_SECRET=SECRET,
                RAGSYNC_CONFIG=str(config),
                RAGSYNC_METRICS_PORT="0",
                BENCH_WIKI_PASSWORD=PASSWORD,
                PYTHONPATH=str(ROOT),
            )
            proc, api = start_serve(env, home, root / "serve.log")
            http = httpx.Client(base_url=api, timeout=60)
            token = issue_token(SECRET, Principal(tenant="acme", user="ann", groups=("staff", "user")))

            def cited(i: int) -> bool:
                response = http.post(
                    "/v1/ask",
                    json={"question": f"What is the access code for vault number {i}?"},
                    headers={"Authorization": f"Bearer {token}"},
                )
                response.raise_for_status()
                body: dict[str, Any] = response.json()
                return any(c["passage_id"].startswith(f"wiki:vault/v{i:02d}@") for c in body.get("claims", []))

            deadline = time.monotonic() + 300
            while not all(cited(i) for i in range(args.n)):
                if time.monotonic() > deadline:
                    raise SystemExit(
                        "the wiki's pages never became answerable:\n" + (root / "serve.log").read_text()[-3000:]
                    )
                time.sleep(1)
            latencies: list[float] = []
            for i in range(args.n):
                time.sleep((i % 7) * args.interval / 7)  # revocations spread over the pass cycle
                started = time.perf_counter()
                wiki.revoke(f"vault:v{i:02d}", "@staff")
                while cited(i):
                    if time.perf_counter() - started > 120:
                        raise SystemExit(f"vault {i} still served 120 s after its revocation")
                    time.sleep(0.02)
                latencies.append(time.perf_counter() - started)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            wiki.stop()
    entry = {
        "n": len(latencies),
        "p50": round(percentile(latencies, 0.5), 3),
        "p99": round(percentile(latencies, 0.99), 3),
        "interval_s": args.interval,
    }
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["dokuwiki"] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"dokuwiki": entry, "max": round(max(latencies), 3), "goal_p99": args.interval + 2}))


if __name__ == "__main__":
    main()
