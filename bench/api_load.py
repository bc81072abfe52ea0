#!/usr/bin/env python3
"""Answers under load: N concurrent clients on POST /v1/ask of a real `ragsync serve`, each request a
unique answerable question, on the embedded or the cluster profile.

The home is an evaluation set's (bench/eval_homes.py; `eval/<set>/run.sh [--ci]` builds it). The
embedded run serves a copy of it (serve owns and may write its home); the cluster run syncs the same
corpus into fresh, uniquely named Elasticsearch indices, a Qdrant collection, Kafka topics and a Redis
namespace through `ragsync worker`, and removes them afterwards. The asker comes only from a token
signed with the serve's secret, one per principal of the set's questions.

Questions: every answerable question of the set, each made unique by a qualifier holding a reference
number ("(ticket 4821-3)"), which the answering model sets aside as a careful reader would
(query.reading.set_aside) and which no passage mentions, so no retrieval cache entry is ever reused.
Each client sends its next question as soon as the previous answer arrived (closed loop).

Where the time goes: with --py-spy S, py-spy samples the serve for S seconds in the middle of the run
(every thread, idle ones left out) and the report sums the samples by stage (question embedding,
sentence embeddings, embedding cache, stores, answer step, HTTP).

    python3 bench/api_load.py --profile embedded                 # 50 clients, 60 s
    python3 bench/api_load.py --profile cluster --duration 15    # a quick look
    flock /work/wt/bench.lock python3 bench/api_load.py --profile embedded --label after --py-spy 10
    flock /work/wt/bench.lock python3 bench/api_load.py --profile cluster --workers 1,2,3 --duration 30

Results are merged into bench/results/api_load.json under runs[<profile>][<label>].
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eval_homes import add_homes_option, embed_model_path, set_paths  # noqa: E402
from load_profile import cpu_seconds, spy_for, summarise_profile  # noqa: E402
from serving import start_serve, stop  # noqa: E402

from query.tokens import issue_token  # noqa: E402
from schemas.principal import Principal  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "api_load.json"
SECRET = "bench-api-load-secret-0123456789abcdef"
QDRANT = "http://127.0.0.1:6333"
GOALS = {"embedded": {"p95_ms": 300, "rps": 100}, "cluster": {"p95_ms": 200, "rps": 100}}
SET_TENANTS = {"python-manual": ("pydocs", "pyschool"), "git-doc": ("gitdocs",), "flex-doc": ("flexdocs",)}


def questions(base: Path) -> list[dict[str, Any]]:
    out = []
    for line in (base / "questions.jsonl").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            q = json.loads(line)
            if q.get("expect") == "answer":
                out.append(q)
    return out


def unique_question(question: str, n: int) -> str:
    """The question with a qualifier no passage mentions, which the reader sets aside."""
    return f"{question.rstrip()} (ticket {1000 + n // 1000}-{n % 1000})"


def environment(
    profile: str, home: Path, tag: str, tree: Path = ROOT, settings: tuple[str, ...] = ()
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
    for setting in settings:  # --setting name=value: RAGSYNC_NAME for the serve (and the worker)
        name, _, value = setting.partition("=")
        env[f"RAGSYNC_{name.strip().upper()}"] = value
    env.update(
        RAGSYNC_PROFILE=profile,
        RAGSYNC_HOME=str(home),
        RAGSYNC_EMBED_MODEL_PATH=str(embed_model_path()),
        RAGSYNC_SESSION_SECRET=SECRET,
        RAGSYNC_CONFIG=os.devnull,
        RAGSYNC_METRICS_PORT="0",
        PYTHONPATH=str(tree),
    )
    if profile == "cluster":
        env.update(
            RAGSYNC_QDRANT_URL="http://127.0.0.1:6333",
            RAGSYNC_QDRANT_COLLECTION=f"apiload{tag}",
            RAGSYNC_KAFKA_TOPIC_PREFIX=f"apiload{tag}.",
            RAGSYNC_ES_INDEX_PREFIX=f"apiload{tag}",
            RAGSYNC_REDIS_NAMESPACE=f"apiload{tag}",
        )
    return env


def run_cli(env: dict[str, str], *args: str, timeout: float = 900) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"ragsync {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def cluster_cleanup(tag: str) -> None:
    """Remove the run's indices and collection (Kafka topics and Redis keys are left to expire). Indices
    one by one: Elasticsearch refuses a wildcard delete (action.destructive_requires_name), which left
    every earlier run's indices behind."""
    with httpx.Client(timeout=30) as http, contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        listed = http.get(f"http://127.0.0.1:9200/_cat/indices/apiload{tag}*", params={"h": "index", "format": "json"})
        names = [row["index"] for row in listed.json()] if listed.status_code == 200 else []
        collections = http.get("http://127.0.0.1:6333/collections").json()["result"]["collections"]
        names += [f"collections/{c['name']}" for c in collections if str(c["name"]).startswith(f"apiload{tag}")]
        for url in (f"http://127.0.0.1:{6333 if n.startswith('collections/') else 9200}/{n}" for n in names):
            with contextlib.suppress(httpx.HTTPError):
                http.delete(url)


def expected_passages(eval_home: Path) -> int:
    """Current passages of the set's embedded home: what the cluster stores hold once the sync is applied."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{eval_home / 'lexical.db'}?mode=ro", uri=True)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM passages WHERE superseded_ms IS NULL").fetchone()[0])


def wait_applied(tag: str, expected: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """Until Elasticsearch and Qdrant each hold the `expected` passages: `ragsync sync` returns once its
    events are published, and the worker embeds and applies them after; a load started before would ask
    half-empty stores (the first cluster run answered 0.5 % of its questions, its sentence embeddings done
    during the load)."""
    started = time.monotonic()
    counts = {"elasticsearch": 0, "qdrant": 0}
    with httpx.Client(timeout=30) as http:
        while time.monotonic() - started < timeout_s:
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                http.post(f"http://127.0.0.1:9200/apiload{tag}*-passages-*/_refresh")
                es = http.get(f"http://127.0.0.1:9200/apiload{tag}*-passages-*/_count")
                counts["elasticsearch"] = int(es.json()["count"]) if es.status_code == 200 else 0
                listed = http.get("http://127.0.0.1:6333/collections").json()["result"]["collections"]
                names = [c["name"] for c in listed if str(c["name"]).startswith(f"apiload{tag}")]
                qd = [http.post(f"{QDRANT}/collections/{n}/points/count", json={"exact": True}) for n in names]
                counts["qdrant"] = sum(int(r.json()["result"]["count"]) for r in qd if r.status_code == 200)
            if counts["elasticsearch"] >= expected and counts["qdrant"] >= expected:
                return {"expected": expected, **counts, "seconds": round(time.monotonic() - started, 1)}
            time.sleep(1.0)
    raise SystemExit(f"the worker applied {counts} of {expected} passages within {timeout_s:.0f}s")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


async def load(
    api: str, asks: list[tuple[str, str]], clients: int, duration_s: float, warmup_s: float
) -> dict[str, Any]:
    """Closed-loop clients; requests that finish during the warm-up or after the end are not counted."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    answered = 0
    counter = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    loop = asyncio.get_running_loop()
    begin = loop.time()
    measure_from = begin + warmup_s
    end = measure_from + duration_s

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal answered, counter
        while loop.time() < end:
            n = counter
            counter += 1
            token, question = asks[n % len(asks)]
            text = unique_question(question, n)
            started = loop.time()
            try:
                response = await http.post(
                    "/v1/ask", json={"question": text}, headers={"Authorization": f"Bearer {token}"}
                )
                ok = response.status_code == 200
                body = response.json() if ok else None
            except httpx.HTTPError as exc:
                if measure_from <= loop.time() <= end:
                    errors[type(exc).__name__] += 1
                continue
            finally:
                elapsed = loop.time() - started
            finished = loop.time()
            if finished < measure_from or finished > end:
                continue  # counted by when it finished: a slow server still shows its latencies
            if not ok:
                errors[f"HTTP {response.status_code}"] += 1
                continue
            latencies.append(elapsed)
            answered += bool(body and body.get("answered"))

    async with httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    done = len(latencies)
    return {
        "requests": done,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "req_per_s": round(done / duration_s, 1),
        # None (JSON null, not NaN) when no request finished in the window
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 0.95) * 1000, 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
        "max_ms": round(max(latencies, default=0.0) * 1000, 1),
        "answered_share": round(answered / done, 3) if done else 0.0,
    }


def warm_pass(api: str, asks: list[tuple[str, str]]) -> dict[str, Any]:
    """Every distinct question once, one at a time, before the clock: the sentence vectors an answer reads
    are embedded on a home's first questions and cached in its embedding cache from then on; a run on a
    home never asked would otherwise measure that one-off embedding instead of answering."""
    started = time.monotonic()
    distinct = list(dict.fromkeys(asks))
    with httpx.Client(base_url=api, timeout=300) as http:
        for token, question in distinct:
            http.post("/v1/ask", json={"question": question}, headers={"Authorization": f"Bearer {token}"})
    return {"questions": len(distinct), "seconds": round(time.monotonic() - started, 1)}


def prepare(args: argparse.Namespace, tmp: Path, tag: str) -> tuple[dict[str, str], Path, list[Any]]:
    """The home to serve and the processes to stop afterwards."""
    base, eval_home = set_paths(args.set, args.variant, args.homes)
    home = tmp / "home"
    env = environment(args.profile, home, tag, args.tree.resolve(), tuple(args.setting))
    procs: list[Any] = []
    if args.profile == "embedded":
        shutil.copytree(eval_home, home, ignore=shutil.ignore_patterns("owner.lock", "*.sock"))
        return env, base, procs
    worker_log = (tmp / "worker.log").open("wb")
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "ragsync.cli", "worker"],
            cwd=ROOT,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
    )
    tenants = [a for t in SET_TENANTS[args.set] for a in ("--tenant", t)]
    started = time.monotonic()
    print(run_cli(env, "sync", str(base / "corpus"), *tenants, "--source", "corpus", "--json").strip())
    print(f"cluster sync published in {time.monotonic() - started:.0f}s")
    print(f"cluster sync applied: {wait_applied(tag, expected_passages(eval_home))}")
    return env, base, procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=("embedded", "cluster"), default="embedded")
    parser.add_argument("--set", default="python-manual", choices=sorted(SET_TENANTS))
    parser.add_argument("--variant", default="ci", choices=("ci", "full"))
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before measuring")
    parser.add_argument("--py-spy", type=float, default=0.0, help="seconds of py-spy sampling mid-run (0: none)")
    parser.add_argument("--label", default="after", help="where in the results this run goes (before, after)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_homes_option(parser)
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="the source tree the serve runs (default this one; e.g. main's)"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the serve, e.g. embed_query_batch=1 (repeatable): levers side by side",
    )
    parser.add_argument(
        "--no-warm-pass",
        dest="warm_pass",
        action="store_false",
        help="skip asking every question once before the load (a home never asked has no sentence vectors yet)",
    )
    parser.add_argument(
        "--workers",
        default="1",
        help="serving processes (serve --workers N, cluster profile); a list such as 1,2,3 measures each in turn "
        "on the same stores, under <label>_w<N>",
    )
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    procs: list[Any] = []
    counts = [int(n) for n in str(args.workers).split(",")]
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-api-load-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            env, base, procs = prepare(args, tmp, tag)
            asks = []
            tokens: dict[tuple[str, str, tuple[str, ...]], str] = {}
            for q in questions(base):
                p = q["principal"]
                key = (p["tenant"], p["user"], tuple(p["groups"]))
                if key not in tokens:
                    tokens[key] = issue_token(SECRET, Principal(tenant=key[0], user=key[1], groups=key[2]), ttl_s=7200)
                asks.append((tokens[key], q["question"]))
            for n in counts:
                entry = measure(args, env, asks, tmp, n)
                label = args.label if len(counts) == 1 else f"{args.label}_w{n}"
                record(args, label, entry)
        finally:
            for proc in reversed(procs):
                stop(proc)
            if args.profile == "cluster":
                cluster_cleanup(tag)


def measure(
    args: argparse.Namespace, env: dict[str, str], asks: list[tuple[str, str]], tmp: Path, workers: int
) -> dict[str, Any]:
    """One serve (`--workers N` when N > 1) under the load, stopped afterwards; its entry in the results."""
    load_start = os.getloadavg()
    log = tmp / f"serve-w{workers}.log"
    extra = ("--workers", str(workers)) if workers > 1 else ()
    serve, api = start_serve(env, log, cwd=args.tree.resolve(), args=extra)
    try:
        warmed = warm_pass(api, asks) if args.warm_pass else None
        spy = tmp / f"spy-w{workers}.txt"

        async def window_cpu() -> float:
            await asyncio.sleep(args.warmup)
            before = cpu_seconds(serve.pid)
            await asyncio.sleep(args.duration)
            return cpu_seconds(serve.pid) - before

        async def run() -> dict[str, Any]:
            task = asyncio.create_task(load(api, asks, args.clients, args.duration, args.warmup))
            cpu = asyncio.create_task(window_cpu())
            if args.py_spy > 0:
                await asyncio.sleep(args.warmup + max(0.0, (args.duration - args.py_spy) / 2))
                await asyncio.to_thread(spy_for, serve.pid, args.py_spy, spy)
            measured = await task
            used = await cpu
            measured["serve_cpu_s"] = round(used, 1)
            measured["serve_cpu_ms_per_request"] = (
                round(used * 1000 / measured["requests"], 1) if measured["requests"] else None
            )
            return measured

        measured = asyncio.run(run())
        profile = summarise_profile(spy) if args.py_spy > 0 else None
        serve_log_tail = [line for line in log.read_text().splitlines() if "ERROR" in line][-5:]
    finally:
        stop(serve)
    goal = GOALS[args.profile]
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "set": f"{args.set} ({args.variant})",
        "clients": args.clients,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "serve_workers": workers,
        **measured,
        "meets_goal": measured["errors"] == 0
        and measured["p95_ms"] is not None
        and measured["p95_ms"] <= goal["p95_ms"]
        and measured["req_per_s"] >= goal["rps"],
        "warm_pass": warmed,
        "where_the_time_goes": profile,
        "serve_errors_logged": serve_log_tail,
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "tree": str(args.tree.resolve()),
        "settings": list(args.setting),
        "embed_model_path": str(embed_model_path()),
        "home": str(set_paths(args.set, args.variant, args.homes)[1]),
        "command": "python3 " + " ".join(sys.argv),
    }


def record(args: argparse.Namespace, label: str, entry: dict[str, Any]) -> None:
    """Merge one run into the results file as soon as it is measured (earlier runs are kept)."""
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    report.setdefault("benchmark", "answers under load: closed-loop clients on /v1/ask, unique answerable questions")
    report["goals"] = {p: {**g, "errors": 0} for p, g in GOALS.items()}
    report.setdefault("runs", {}).setdefault(args.profile, {})[label] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k not in ("machine",)}, indent=2), flush=True)


if __name__ == "__main__":
    main()
