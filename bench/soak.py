#!/usr/bin/env python3
"""Soak: `ragsync serve` with a declared, watched drive source under a steady mix of changes for a
while, then quiet: what serve costs when idle, whether memory and the home grow, how many audit
records each event leaves, and how long each command takes beside it.

A fresh embedded home, the embedding model loaded, `[[sources]]` naming a drive folder (watched)
and a webhook source. Every `--period-s` seconds one cycle: a document edited, a manifest edited
(a revocation, or its undoing), a document removed or put back (one missing at a time, so the
content stays flat), a webhook push (an upsert, every fourth a delete undone the cycle after),
three asks over HTTP, and one command in another process, in turn: `sync` (a second folder),
`ask`, `status`, `erase` (a drive document; the next full pass indexes it again), `audit verify`,
`verify`. Quiet periods (no event at all) come before the first cycle (after the first sync and
a few asks, so memory is compared once warm), every `--quiet-every-min` minutes and at the end;
in each, serve's CPU (utime+stime of it and its reaped children, from /proc/<pid>/stat), its RSS,
the audit trail's length and whether another connection can take state.db's write lock are sampled.

    python3 bench/soak.py                      # 30 minutes of cycles (~40 min in all)
    python3 bench/soak.py --minutes 3          # a quick run

Goals: idle CPU < 1 % of a core, no audit record while quiet, RSS and home size flat when the
content is flat (the first quiet period against the last), `erase` confirmed within the purge
bound with serve running. Writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.soak_probes import audit_kinds, home_size, proc_cpu_s, proc_rss_mb, stats, write_lock_free  # noqa: E402
from connectors.webhook import signed_headers  # noqa: E402
from query.tokens import issue_token  # noqa: E402
from schemas.principal import Principal  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")
SECRET = "bench-soak-session-secret"
HOOK = "bench-soak-webhook-secret"
PURGE_BOUND_S = 60.0
COMMANDS = ("sync", "ask", "status", "erase", "audit verify", "verify")
WORDS = ("access", "budget", "contract", "deadline", "invoice", "laptop", "ledger", "meeting", "office", "payroll")


def text(title: str, n: int) -> str:
    words = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(40))
    return f"# {title}\n\nRevision {n}: the {WORDS[n % len(WORDS)]} desk moved to room {100 + n % 400}.\n\n{words}.\n"


def build(root: Path, docs: int) -> tuple[Path, Path]:
    drive, extra = root / "drive", root / "extra"
    files = {"acme/.ragsync-acl.toml": 'tenant = "acme"\nread = ["group:staff"]\n'}
    for i in range(docs):
        files[f"acme/docs/d{i:03d}.md"] = text(f"Doc {i}", i)
    for k in range(4):
        files[f"acme/teams/t{k}/.ragsync-acl.toml"] = 'read = ["group:staff"]\n'
        for j in range(3):
            files[f"acme/teams/t{k}/n{j}.md"] = text(f"Team {k} note {j}", k * 3 + j)
    for j in range(8):
        files[f"acme/pool/p{j}.md"] = text(f"Pool {j}", j)
        files[f"acme/keep/e{j}.md"] = text(f"Kept {j}", j)
    for name, body in files.items():
        (drive / name).parent.mkdir(parents=True, exist_ok=True)
        (drive / name).write_text(body)
    (extra / "acme").mkdir(parents=True)
    (extra / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(5):
        (extra / f"acme/x{i}.md").write_text(text(f"Extra {i}", i))
    return drive, extra


class Soak:
    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        self.args = args
        self.root = root
        self.home = root / "home"
        self.drive, self.extra = build(root, args.docs)
        config = root / "ragsync.toml"
        config.write_text(
            f'[[sources]]\nname = "drive"\npath = "{self.drive}"\ntenants = ["acme"]\nwatch = true\n'
            f"interval_s = {args.interval_s}\n\n"
            f'[webhooks.crm]\nsecret = "{HOOK}"\ntenants = ["acme"]\n'
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        self.env.update(
            RAGSYNC_HOME=str(self.home),
            RAGSYNC_CONFIG=str(config),
            RAGSYNC_EMBED_MODEL_PATH=str(MODEL),
            RAGSYNC_SESSION_SECRET=SECRET,
            RAGSYNC_METRICS_PORT="0",
            RAGSYNC_PURGE_MAX_DELAY_S=str(PURGE_BOUND_S),
            PYTHONPATH=str(ROOT),
        )
        self.token = issue_token(SECRET, Principal(tenant="acme", user="ann", groups=("staff",)))
        self.latency: dict[str, list[float]] = {}
        self.failures: dict[str, list[str]] = {}
        self.events: Counter[str] = Counter()
        self.quiet: list[dict[str, Any]] = []
        self.rss: list[tuple[float, float]] = []
        self.sequence: Counter[str] = Counter()
        self.erase_lines: list[str] = []
        self.log = (root / "serve.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", "serve", "--port", "0"],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self._wait_ready(), timeout=120)
        self.t0 = time.monotonic()

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited:\n{(self.root / 'serve.log').read_text()}")
            try:
                info = json.loads((self.home / "owner.lock").read_text() or "{}")
                if (
                    info.get("pid") == self.proc.pid
                    and httpx.get(f"{info['api']}/readyz", timeout=5).status_code == 200
                ):
                    return str(info["api"])
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(0.2)
        raise SystemExit("serve not ready after 300 s")

    # ---- measuring ----------------------------------------------------------------------------

    def timed(self, name: str, seconds: float, error: str | None = None) -> None:
        self.latency.setdefault(name, []).append(seconds)
        if error:
            self.failures.setdefault(name, []).append(error[:300])

    def cli(self, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ragsync.cli", *args], env=self.env, cwd=ROOT, capture_output=True, text=True
        )
        lines = (done.stderr or done.stdout).strip().splitlines()
        error = f"exit {done.returncode}: {lines[-1] if lines else ''}" if done.returncode else None
        if name == "verify" and done.returncode == 3:  # no drift; events of the cycle still being applied
            self.events["verify pending"] += 1
            error = None
        self.timed(name, time.perf_counter() - started, error)
        return done

    def ask(self) -> None:
        started = time.perf_counter()
        response = self.http.post(
            "/v1/ask",
            json={"question": "Where did the invoice desk move?"},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        self.timed("ask (HTTP)", time.perf_counter() - started, None if response.status_code == 200 else response.text)
        self.events["ask"] += 1

    def sample_rss(self) -> None:
        self.rss.append((time.monotonic() - self.t0, proc_rss_mb(self.proc.pid)))

    def settle(self, timeout_s: float = 180) -> None:
        """Until the backlog is empty and the trail has not changed for 5 s (the last purge done)."""
        deadline = time.monotonic() + timeout_s
        last, since = audit_kinds(self.home), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            backlog = self.http.get("/readyz").json().get("backlog", {})
            now = audit_kinds(self.home)
            if now != last or any(backlog.values()):
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 5.0:
                return

    def quiet_period(self, label: str) -> None:
        self.settle()
        time.sleep(self.args.settle_s)
        pid = self.proc.pid
        audit0, cpu0, t0 = audit_kinds(self.home), proc_cpu_s(pid), time.monotonic()
        held = samples = 0
        rss: list[float] = []
        while time.monotonic() - t0 < self.args.quiet_s:
            time.sleep(2.0)
            samples += 1
            held += not write_lock_free(self.home)
            rss.append(proc_rss_mb(pid))
        cpu1, t1, audit1 = proc_cpu_s(pid), time.monotonic(), audit_kinds(self.home)
        record = {
            "label": label,
            "seconds": round(t1 - t0, 1),
            "cpu_percent": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
            "audit_records_added": sum(audit1.values()) - sum(audit0.values()),
            "write_lock_held_samples": f"{held}/{samples}",
            "rss_mb": round(max(rss), 1),
            "home_bytes": home_size(self.home)["total"],
            "audit_records": sum(audit1.values()),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        self.quiet.append(record | {"home": home_size(self.home), "audit_by_kind": audit1})
        print(json.dumps(record), flush=True)

    # ---- one cycle of events ------------------------------------------------------------------

    def cycle(self, i: int) -> None:
        n = self.args.docs
        (self.drive / f"acme/docs/d{i % n:03d}.md").write_text(text(f"Doc {i % n}", i + n))
        self.events["edit"] += 1
        team = self.drive / f"acme/teams/t{i % 4}/.ragsync-acl.toml"
        revoked = "leads" not in team.read_text()
        team.write_text('read = ["group:leads"]\n' if revoked else 'read = ["group:staff"]\n')
        self.events["revocation" if revoked else "grant"] += 1
        pool = self.drive / f"acme/pool/p{(i // 2) % 8}.md"
        if pool.exists():
            pool.unlink()
            self.events["deletion"] += 1
        else:
            pool.write_text(text(f"Pool {(i // 2) % 8}", i))
            self.events["re-creation"] += 1
        self.push(i)
        for _ in range(3):
            self.ask()
        self.command(COMMANDS[i % len(COMMANDS)], i)
        self.sample_rss()

    def push(self, i: int) -> None:
        doc = f"kb-{i % 5}"
        deleting = i % 4 == 3 and self.sequence[doc] > 0
        self.sequence[doc] += 1
        body: dict[str, Any] = {"action": "delete" if deleting else "upsert", "tenant": "acme", "doc_id": doc}
        if not deleting:
            body |= {"title": doc, "content": text(doc, i), "acl": ["group:staff"], "source_url": f"https://kb/{doc}"}
        raw = json.dumps(body | {"sequence": self.sequence[doc]}).encode()
        started = time.perf_counter()
        response = self.http.post("/v1/webhooks/crm", content=raw, headers=signed_headers(HOOK, raw, int(time.time())))
        self.timed(
            "webhook push (HTTP)", time.perf_counter() - started, None if response.status_code == 202 else response.text
        )
        self.events["push delete" if deleting else "push upsert"] += 1

    def command(self, name: str, i: int) -> None:
        if name == "sync":
            (self.extra / f"acme/x{i % 5}.md").write_text(text(f"Extra {i % 5}", i))
            self.cli(name, "sync", str(self.extra), "--tenant", "acme", "--json")
            self.events["sync (CLI)"] += 1
        elif name == "ask":
            self.cli(name, "ask", "Where did the ledger desk move?", "--token", self.token, "--json")
        elif name == "status":
            self.cli(name, "status")
        elif name == "erase":
            done = self.cli(name, "erase", "--tenant", "acme", f"drive:acme/keep/e{(i // 6) % 8}.md")
            self.events["erasure"] += 1
            self.erase_lines.append((done.stdout + done.stderr).strip()[:300])
        elif name == "audit verify":
            self.cli(name, "audit", "verify", "--json")
        elif name == "verify":
            self.cli(name, "verify", "--json")

    # ---- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        for _ in range(2):  # what every command's latency includes: a Python process importing ragsync
            self.cli("start-up (ragsync --help)", "--help")
        self.settle(600)  # the declared source's first full pass, embedded and applied
        for _ in range(3):  # the first ask loads what answering needs: before the baseline
            self.ask()
        self.sample_rss()
        self.quiet_period("baseline: after the first sync and a few asks, before any change")
        started, i = time.monotonic(), 0
        next_quiet = started + self.args.quiet_every_min * 60
        end = started + self.args.minutes * 60
        while time.monotonic() < end:
            t = time.monotonic()
            self.cycle(i)
            i += 1
            if time.monotonic() >= next_quiet and time.monotonic() < end - self.args.period_s:
                self.quiet_period(f"after {i} cycles")
                next_quiet = time.monotonic() + self.args.quiet_every_min * 60
                end += self.quiet[-1]["seconds"] + self.args.settle_s  # quiet time is not active time
            time.sleep(max(0.0, t + self.args.period_s - time.monotonic()))
        self.quiet_period(f"final: after {i} cycles")
        return self.report(i)

    def report(self, cycles: int) -> dict[str, Any]:
        first, last = self.quiet[0], self.quiet[-1]
        changes = sum(v for k, v in self.events.items() if k != "ask")
        audit_events = self.events["deletion"] + self.events["erasure"] + self.events["push delete"]
        audit_added = last["audit_records"] - first["audit_records"]
        erase_ok = not self.failures.get("erase") and max(self.latency.get("erase", [0.0])) < PURGE_BOUND_S
        verify_all = self.cli("audit verify", "audit", "verify", "--json")
        final_count = json.loads(verify_all.stdout)["records"] if verify_all.returncode == 0 else None
        by_kind = {k: round((last["home"].get(k, 0) - first["home"].get(k, 0)) / max(1, changes)) for k in last["home"]}
        idle = [q["cpu_percent"] for q in self.quiet]
        return {
            "bench": "soak",
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()}
            | {"purge_max_delay_s": PURGE_BOUND_S, "model": str(MODEL)},
            "cycles": cycles,
            "events": dict(self.events),
            "quiet_periods": self.quiet,
            "idle_cpu_percent": {"first": idle[0], "max_after_changes": max(idle[1:], default=None)},
            "rss_mb": {
                "first_quiet": first["rss_mb"],
                "last_quiet": last["rss_mb"],
                "growth": round(last["rss_mb"] - first["rss_mb"], 1),
                # The first cycle's changes (first edit embedded, first purge) take memory once.
                "growth_after_first_cycle": round(last["rss_mb"] - self.rss[1][1], 1) if len(self.rss) > 1 else None,
                "max": round(max((r for _, r in self.rss), default=last["rss_mb"]), 1),
                "series_s_mb": [(round(t), round(r, 1)) for t, r in self.rss],
            },
            "home_bytes": {
                "first_quiet": first["home_bytes"],
                "last_quiet": last["home_bytes"],
                "growth_per_change": round((last["home_bytes"] - first["home_bytes"]) / max(1, changes)),
                "growth_per_change_by_part": by_kind,
            },
            "audit": {
                "records_first_quiet": first["audit_records"],
                "records_last_quiet": last["audit_records"],
                "audit_verify_at_end": final_count,
                "by_kind_at_end": last["audit_by_kind"],
                "records_per_deletion_or_erasure": round(audit_added / max(1, audit_events), 2),
                "records_per_change": round(audit_added / max(1, changes), 3),
                "added_while_quiet": [q["audit_records_added"] for q in self.quiet],
            },
            "latency_s": {name: stats(values) for name, values in sorted(self.latency.items())},
            "ask_http_series_s": [
                round(v, 3) for v in self.latency.get("ask (HTTP)", [])
            ],  # [0]: the first after start
            "failures": self.failures,
            "erase_output": self.erase_lines,
            "goals": {
                "idle_cpu_below_1_percent": all(v < 1.0 for v in idle),
                "no_audit_growth_while_quiet": all(q["audit_records_added"] == 0 for q in self.quiet),
                "write_lock_free_while_quiet": all(q["write_lock_held_samples"].startswith("0/") for q in self.quiet),
                "erase_within_purge_bound": erase_ok,
                "audit_verify_matches_file": final_count == last["audit_records"],
            },
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.http.close()
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="Active time: cycles of changes (quiet periods extra)."
    )
    parser.add_argument("--period-s", type=float, default=15.0, help="Seconds per cycle of events.")
    parser.add_argument("--quiet-s", type=float, default=60.0, help="Length of each quiet period.")
    parser.add_argument(
        "--quiet-every-min", type=float, default=10.0, help="A quiet period every this many active minutes."
    )
    parser.add_argument("--settle-s", type=float, default=5.0, help="Wait after the last purge before a quiet period.")
    parser.add_argument("--docs", type=int, default=40, help="Documents edited in turn.")
    parser.add_argument("--interval-s", type=int, default=300, help="The source's full-pass interval.")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args()
    if not (MODEL / "model.onnx").is_file():
        raise SystemExit(f"no embedding model at {MODEL} (set RAGSYNC_EMBED_MODEL_PATH)")
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-soak-") as tmp:
        soak = Soak(Path(tmp), args)
        try:
            result = soak.run()
        finally:
            soak.stop()
        serve_log = (Path(tmp) / "serve.log").read_text()
        result["serve_log"] = {"tracebacks": serve_log.count("Traceback"), "lines": serve_log.count("\n")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("idle_cpu_percent", "rss_mb", "home_bytes", "audit", "goals")}, indent=2))
    print(json.dumps(result["latency_s"], indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
