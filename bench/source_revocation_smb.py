#!/usr/bin/env python3
"""Revocation on the share, timed to the served answers (issue 19 item 7): `smb` in source_revocation.json.

`ragsync serve` runs on a fresh embedded home with the share of `compose/local/services up samba`
declared in `[[sources]]` (kind = "smb", interval_s = --interval). --revocations files, each readable by
one user through an explicit allow, are synced and answerable. Then, one file at a time, the share's
administrator removes that allow with smbcacls, as they would on a file server, and a poller asks the
serve over HTTP as that user until the answer no longer cites the file. The latency is the poller's
first answer without the file minus the moment smbcacls returned: it includes waiting for the next
pass (the interval), the pass over the share (SAMR, every descriptor) and the serve applying the ACL
event. Goal: p99 <= interval + 2 s.

    python3 bench/source_revocation_smb.py                      # 50 revocations, interval 2 s
    python3 bench/source_revocation_smb.py --revocations 5      # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

import smb_world as w  # noqa: E402

from query.tokens import issue_token  # noqa: E402
from schemas.principal import Principal  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "source_revocation.json"
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")
SECRET = "bench-source-revocation-smb-secret"
READER = f"{w.PREFIX}rev"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


def populate(n: int) -> None:
    w.ensure_user(READER)
    subprocess.run(["rm", "-rf", str(w.svc.SHARE_PATH / "vault")], check=True)  # only its own folder
    w.smbclient('mkdir "vault"')
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        puts = []
        for i in range(n):
            code = "".join(rng.choice("abcdefghjkmnpqrstuvwxyz") for _ in range(8))
            local = Path(tmp) / f"v{i:03d}.md"
            local.write_text(f"# Vault {i}\n\nThe access code for vault number {i} is {code}.\n")
            puts.append(f'put "{local}" "vault/v{i:03d}.md"')
        for start in range(0, len(puts), 50):
            w.smbclient("; ".join(puts[start : start + 50]))
    for i in range(n):
        w.smbcacls(f"vault/v{i:03d}.md", "--set", ",".join([w.ace(w.svc.SMB_USER, True), w.ace(READER, True)]))


def settings_file(root: Path, interval: float) -> Path:
    path = root / "ragsync.toml"
    path.write_text(
        f"""[[sources]]
name = "share"
kind = "smb"
server = "127.0.0.1"
port = {w.svc.SMB_PORT}
share = "{w.svc.SMB_SHARE}"
path = "/vault"
username = "{w.svc.SMB_USER}"
password_env = "SMB_BENCH_READER_PASSWORD"
tenants = ["{w.TENANT}"]
share_open = true
interval_s = {interval}
"""
    )
    return path


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
            raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
        try:
            info = json.loads((home / "owner.lock").read_text() or "{}")
            mine = info.get("pid") == proc.pid and info.get("api")
            if mine and httpx.get(f"{info['api']}/readyz", timeout=5).status_code in (200, 503):
                return proc, str(info["api"])
        except (OSError, ValueError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    raise SystemExit("serve not ready")


def cites(answer: dict[str, Any], path: str) -> bool:
    return any(c["passage_id"].split("@", 1)[0].split(":", 1)[-1] == path for c in answer["claims"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revocations", type=int, default=50)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not w.samba_up():
        print("samba is not running: compose/local/services up samba", file=sys.stderr)
        return 2
    populate(args.revocations)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-smb-revocation-") as tmp:
        root = Path(tmp)
        home = root / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        env.update(
            RAGSYNC_HOME=str(home),
            RAGSYNC_EMBED_MODEL_PATH=str(MODEL),
            RAGSYNC_SESSION_SECRET=SECRET,
            RAGSYNC_CONFIG=str(settings_file(root, args.interval)),
            RAGSYNC_METRICS_PORT="0",
            SMB_BENCH_READER_PASSWORD=w.svc.SMB_PASSWORD,
            PYTHONPATH=str(ROOT),
        )
        proc, api = start_serve(env, home, root / "serve.log")
        http = httpx.Client(base_url=api, timeout=60)
        token = issue_token(SECRET, Principal(tenant=w.TENANT, user=READER, groups=()))

        def ask(i: int) -> dict[str, Any]:
            response = http.post(
                "/v1/ask",
                json={"question": f"What is the access code for vault number {i}?"},
                headers={"Authorization": f"Bearer {token}"},
            )
            response.raise_for_status()
            body: dict[str, Any] = response.json()
            return body

        latencies: list[float] = []
        try:
            deadline = time.monotonic() + 600
            pending = set(range(args.revocations))
            while pending and time.monotonic() < deadline:  # the first passes: every file answerable
                pending = {i for i in pending if not cites(ask(i), f"v{i:03d}.md")}
                if pending:
                    time.sleep(1)
            if pending:
                raise SystemExit(f"{len(pending)} files never answerable: {sorted(pending)[:5]}")
            for i in range(args.revocations):
                doc = f"v{i:03d}.md"
                w.smbcacls(f"vault/{doc}", "-D", w.ace(READER, True))
                edited_at = time.monotonic()
                while cites(ask(i), doc):
                    if time.monotonic() - edited_at > 120:
                        raise SystemExit(f"{doc} still shown 120 s after its revocation on the share")
                    time.sleep(0.02)
                latencies.append(time.monotonic() - edited_at)
                print(f"revocation {i + 1}/{args.revocations}: {latencies[-1]:.2f}s", flush=True)
        finally:
            http.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    entry = {
        "n": len(latencies),
        "p50": round(percentile(latencies, 0.5), 3),
        "p99": round(percentile(latencies, 0.99), 3),
        "interval_s": args.interval,
        "details": {
            "max": round(max(latencies), 3),
            "goal_p99_s": args.interval + 2.0,
            "latency": "smbcacls -D returned -> first answer (/v1/ask as the revoked user) without the file",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "load_avg_start": [round(x, 2) for x in load_before],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "command": "python3 bench/source_revocation_smb.py " + " ".join(sys.argv[1:]),
        },
    }
    print(json.dumps(entry, indent=2))
    if not args.no_write:
        data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        data["smb"] = entry
        RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
