#!/usr/bin/env python3
"""What the HTTP stack costs per answer, apart from answering (issue 22 item 3): the real public app
(ragsync.http_app.server_app over a copy of an evaluation set's embedded home, token checked, body
validated, metrics and request log kept) whose query worker returns one real answer, asked once
before the clock, for every request. So the CPU measured is FastAPI/Starlette, the middleware, the
token, the thread hop and the serialisation, and with `--uvicorn` the server and its HTTP parser too.

    python3 bench/api_http_cost.py                       # the app alone, 2,000 requests in-process
    flock /work/wt/bench.lock python3 bench/api_http_cost.py --uvicorn --duration 15   # 50 clients

Results go into bench/results/api_load.json under http_stack.<label>.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eval_homes import embed_model_path, set_paths  # noqa: E402
from load_profile import process_cpu_seconds  # noqa: E402

SECRET = "bench-http-cost-secret-0123456789abcdef"
RESULTS = ROOT / "bench" / "results" / "api_load.json"


def canned_components(home: Path, question: dict[str, Any]) -> tuple[Any, Any]:
    """The home's components with a worker that returns `question`'s real answer to every ask."""
    from ragsync.settings import load_settings
    from ragsync.wiring import build
    from schemas.principal import Principal

    os.environ.update(RAGSYNC_HOME=str(home), RAGSYNC_SESSION_SECRET=SECRET, RAGSYNC_CONFIG=os.devnull)
    os.environ.setdefault("RAGSYNC_EMBED_MODEL_PATH", str(embed_model_path()))
    components = build(load_settings())
    worker = components.query_worker()
    p = question["principal"]
    principal = Principal(tenant=p["tenant"], user=p["user"], groups=tuple(p["groups"]))
    result = worker.ask(principal, question["question"], None)
    worker.ask = lambda *a, **k: result  # the stack around the answer is what is measured
    components.query_worker = lambda: worker
    return components, principal


def in_process(app: Any, token: bytes, n: int) -> float:
    """CPU ms per request through the ASGI callable (no sockets, no server)."""
    body = json.dumps({"question": "What is JSONDecodeError a subclass of? (ticket 1)"}).encode()
    headers = [(b"host", b"x"), (b"content-type", b"application/json"), (b"authorization", b"Bearer " + token)]
    headers.append((b"content-length", str(len(body)).encode()))

    async def one() -> int:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST"}
        scope.update(scheme="http", path="/v1/ask", raw_path=b"/v1/ask", query_string=b"", root_path="")
        scope.update(headers=headers, client=("127.0.0.1", 1), server=("127.0.0.1", 2), state={})
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            status = message.get("status", status)

        await app(scope, receive, send)
        return status

    async def many(count: int) -> None:
        for _ in range(count):
            assert await one() == 200

    asyncio.run(many(50))
    started = time.process_time()
    asyncio.run(many(n))
    return (time.process_time() - started) * 1000 / n


async def clients(port: int, token: str, seconds: float, count: int = 50) -> int:
    import httpx

    done = 0
    end = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=count)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits) as http:

        async def one() -> None:
            nonlocal done
            while time.monotonic() < end:
                response = await http.post(
                    "/v1/ask", json={"question": "q?"}, headers={"Authorization": f"Bearer {token}"}
                )
                assert response.status_code == 200, response.text
                done += 1

        await asyncio.gather(*(one() for _ in range(count)))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="python-manual")
    parser.add_argument("--variant", default="ci", choices=("ci", "full"))
    parser.add_argument("--requests", type=int, default=2000, help="in-process requests")
    parser.add_argument("--uvicorn", action="store_true", help="through a real uvicorn and 50 httpx clients")
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--label", default="after")
    parser.add_argument("--serve", nargs=2, metavar=("HOME", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    base, eval_home = set_paths(args.set, args.variant, None)
    question = next(
        json.loads(line)
        for line in (base / "questions.jsonl").read_text().splitlines()
        if line.strip() and not line.startswith("#") and json.loads(line).get("expect") == "answer"
    )
    if args.serve:  # the server process of --uvicorn
        from ragsync.server import bind, run_server

        components, _ = canned_components(Path(args.serve[0]), question)
        run_server(components, listener=bind("127.0.0.1", int(args.serve[1])), announce=lambda m: print(m, flush=True))
        return
    from query.tokens import issue_token

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-http-cost-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(eval_home, home, ignore=shutil.ignore_patterns("owner.lock", "*.sock"))
        entry: dict[str, Any]
        if not args.uvicorn:
            from ragsync.http_app import server_app

            components, principal = canned_components(home, question)
            try:
                ms = in_process(server_app(components), issue_token(SECRET, principal).encode(), args.requests)
            finally:
                components.close()
            entry = {"mode": "in-process ASGI", "requests": args.requests, "app_cpu_ms_per_request": round(ms, 3)}
        else:
            from schemas.principal import Principal

            p = question["principal"]
            token = issue_token(SECRET, Principal(tenant=p["tenant"], user=p["user"], groups=tuple(p["groups"])))
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
            env.update(PYTHONPATH=str(ROOT), RAGSYNC_METRICS_PORT="0")
            env["RAGSYNC_EMBED_MODEL_PATH"] = str(embed_model_path())
            command = [sys.executable, __file__, "--set", args.set, "--variant", args.variant]
            server = subprocess.Popen(
                [*command, "--serve", str(home), str(port)], env=env, stdout=subprocess.PIPE, text=True
            )
            try:
                assert server.stdout is not None
                for line in server.stdout:
                    if "API on" in line:
                        break
                asyncio.run(clients(port, token, 3.0))
                before = process_cpu_seconds(server.pid)
                done = asyncio.run(clients(port, token, args.duration))
                used = process_cpu_seconds(server.pid) - before
            finally:
                server.terminate()
                server.wait(60)
            entry = {
                "mode": "uvicorn (h11), 50 httpx clients",
                "requests": done,
                "req_per_s": round(done / args.duration, 1),
                "server_cpu_ms_per_request": round(used * 1000 / done, 3),
            }
    entry.update(
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        load_avg_start=[round(x, 2) for x in load_start],
        load_avg_end=[round(x, 2) for x in os.getloadavg()],
        command="python3 " + " ".join(sys.argv),
    )
    report: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    report.setdefault("http_stack", {})[args.label] = entry
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(entry, indent=2))


if __name__ == "__main__":
    main()
