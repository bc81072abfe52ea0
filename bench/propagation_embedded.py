"""The embedded harness of bench/propagation.py: `ragsync serve` owns a fresh home; the probes query
the files it writes through the real Retriever and, every SERVED_EVERY-th event, serve itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from propagation_events import (  # noqa: E402
    COSTS,
    MODEL,
    SERVED_EVERY,
    STAFF,
    TENANT,
    Probe,
    word,
)

from schemas.events import Event  # noqa: E402
from schemas.principal import AccessFilter  # noqa: E402


class Embedded:
    """`ragsync serve` owns a fresh home and applies what this process publishes into its event log.

    Effective is probed like the cluster's: the real Retriever (BM25 with the permission filter, then the
    deny set) over the files serve writes (FTS5 and deny.db, read by this process as any reader would).
    Every SERVED_EVERY-th event is also followed through serve itself (the operator's traced ask: the
    whole answer path, up to three searches each embedding the question), reported as served_effective:
    an ask costs 0.1-0.5 s on a busy machine, so asking for all 20 events a second measured the
    queue of the probes' own questions. Converged comes from the worker's own propagation records
    (serve holds the vector shard).
    """

    probers = 6

    def __init__(self, tmp: Path) -> None:
        import socket

        from ragsync.settings import Settings
        from ragsync.wiring import build_embedded

        home = tmp / "home"
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.env = {
            "RAGSYNC_PROFILE": "embedded",
            "RAGSYNC_HOME": str(home),
            "RAGSYNC_EMBED_MODEL_PATH": str(MODEL),
            "RAGSYNC_CONFIG": os.devnull,
            "RAGSYNC_SESSION_SECRET": "bench-secret-0123456789abcdef0123456789",
            "RAGSYNC_METRICS_PORT": "0",
        }
        self.settings = Settings(
            profile="embedded",
            home=home,
            embed_model_path=tmp / "no-model",
            session_secret=self.env["RAGSYNC_SESSION_SECRET"],
        )
        self.components = build_embedded(self.settings, with_embedder=False)  # publishing and reading only
        self.log_path = tmp / "serve.log"
        self.server: subprocess.Popen[bytes] | None = None
        self._http: Any = None
        self._token = ""
        self._key = ""
        self.published_wall: dict[str, float] = {}
        from concurrent.futures import ThreadPoolExecutor

        self._askers = ThreadPoolExecutor(2, thread_name_prefix="bench-ask")
        self._asking: set[int] = set()

    def start(self) -> None:
        import httpx

        from ragsync.operator_key import operator_keys
        from ragsync.wiring import token_signer

        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        env.update(self.env, PYTHONPATH=str(ROOT))
        with self.log_path.open("wb") as out:
            self.server = subprocess.Popen(
                [sys.executable, "-m", "ragsync.cli", "serve", "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if self._http.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit(f"serve did not become ready; see {self.log_path}")
        self._token = token_signer(self.settings).issue(STAFF, ttl_s=6 * 3600)
        self._key = operator_keys(self.settings).current()

    def publish(self, events: list[Event]) -> None:
        self.components.events.publish_many(events)

    def publish_one(self, event: Event) -> None:
        self.published_wall[event.event_id] = time.time()
        self.components.events.publish(event)

    def indexed(self, doc_ids: list[str]) -> int:
        docs = self.components.docs
        return sum(1 for d in doc_ids if (s := docs.get(TENANT, d)) is not None and s.content_version)

    def backlog(self) -> int:
        return int(self.components.events.lag("documents", "ragsync-indexer"))

    def documents_end(self) -> int:
        """The SQLite log erases in place: nothing is appended to the documents topic meanwhile."""
        return 0

    @property
    def vector(self) -> Any:
        return None

    @staticmethod
    def settled(p: Probe) -> bool:
        return p.effective is not None and (p.seq % SERVED_EVERY or p.served is not None)

    def probe(self, p: Probe, retriever: Any) -> None:
        if p.effective is None:
            now_access = AccessFilter.for_principal(STAFF, datetime.now(UTC))
            began = time.monotonic()
            hits = retriever.rank(word(p.kind[:3], p.index), now_access).lexical
            COSTS.setdefault("query", []).append(time.monotonic() - began)
            if not any(h.passage.doc_id == p.doc_id for h in hits):
                p.effective = time.monotonic()
        if p.served is None and p.seq % SERVED_EVERY == 0 and p.seq not in self._asking:
            # On an asker thread of its own: an ask takes seconds on a loaded machine, and a prober
            # waiting for it left the other events' effective probes queued (measured 11 s p50 with
            # the deny entries in force at 0.2 s).
            self._asking.add(p.seq)
            self._askers.submit(self._ask, p)

    def _ask(self, p: Probe) -> None:
        try:
            began = time.monotonic()
            response = self._http.post(
                "/v1/owner/ask",
                json={"token": self._token, "question": word(p.kind[:3], p.index)},
                headers={"X-Ragsync-Operator": self._key},
            )
            COSTS.setdefault("ask", []).append(time.monotonic() - began)
            searches = response.json()["trace"]["searches"]
            ranked = [i for s in searches for i in (*s["lexical_ids"], *s["dense_ids"], *s["selected_ids"])]
            if not any(i.startswith(p.doc_id + "@") for i in ranked):
                p.served = time.monotonic()
        finally:
            self._asking.discard(p.seq)

    def finish(self, probes: list[Probe], deadline: float) -> None:
        """Converged from the worker's own propagation records (one read for all, once a second)."""
        while time.monotonic() < deadline:
            records = {r.event_id: r for r in self.components.propagation.records()}
            for p in probes:
                mine = records.get(p.event.event_id)
                if p.converged is not None or p.effective is None or mine is None or mine.converged_at is None:
                    continue
                lag = mine.converged_at.timestamp() - self.published_wall[p.event.event_id]
                p.converged = p.published + max(lag, p.effective - p.published)
                p.done.update({c: round(v, 4) for c, v in mine.delays().items()})
            if all(p.converged is not None for p in probes):
                return
            time.sleep(1)

    def worker_records(self) -> dict[str, Any]:
        from indexer.propagation import summarize

        s = summarize(self.components.propagation.records(), self.settings.revocation_bound_s)
        by_copy = {k: {q: round(v, 4) for q, v in d.items()} for k, d in s.by_copy.items()}
        return {"events": s.events, "by_copy": by_copy}

    def versions(self) -> dict[str, str]:
        import sqlite3

        import qdrant_edge

        return {"sqlite": sqlite3.sqlite_version, "qdrant-edge-py": getattr(qdrant_edge, "__version__", "0.9.0")}

    def close(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(90)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self._askers.shutdown(wait=True, cancel_futures=True)
        if self._http is not None:
            self._http.close()
        self.components.close()
