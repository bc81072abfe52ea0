"""Harness of the cluster fault suite (tests/test_cluster_faults.py): private services, a deployment, a prober.

- `PrivateServices`: Kafka, Elasticsearch, Redis and the Qdrant server started by compose/local/services
  under a services home of their own, on free ports, reusing the shared download cache. Nothing here
  ever talks to the shared instances (9092, 9200, 6379, 6333): faults stop and restart these.
- `Deployment`: one scenario's ragsync on those services (its own topic prefix, index prefix, Redis
  namespace, Qdrant collection, home and drive), its Faust workers as real `ragsync worker` processes
  and its syncs as real `ragsync sync` processes.
- `Prober`: a thread asking through the query side's own retriever (permission filters in every store,
  the Redis result cache), as the principals a revocation or deletion affects, throughout the scenario;
  it also watches doc state to learn when each change was applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import MODEL_PATH, free_port
from waiting import wait_until

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "compose/local/services"
TENANT = "acme"
GRACE_S = 5.0
"""How long after its publish, once every service is back, a revocation or deletion may still be served:
a healthy cluster applies one in about a second (a worker, Elasticsearch's refresh, the cache bump)."""


def shared_cache() -> Path:
    """The download cache of the shared services home (compose/local/services' default)."""
    home = os.environ.get("RAGSYNC_SERVICES_HOME") or str(Path.home() / ".cache" / "ragsync-services")
    return Path(home) / "cache"


class PrivateServices:
    """A services home of this test run: its own state folder and ports, the shared download cache.

    It lives under /var/tmp (world-traversable, like the launcher's Elasticsearch runtime) so the
    unprivileged user that runs Elasticsearch can reach its data there.
    """

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="ragsync-faults-", dir="/var/tmp"))
        self.home.chmod(0o755)
        self.ports = {
            "RAGSYNC_KAFKA_PORT": free_port(),
            "RAGSYNC_KAFKA_CONTROLLER_PORT": free_port(),
            "RAGSYNC_ES_PORT": free_port(),
            "RAGSYNC_REDIS_PORT": free_port(),
            "RAGSYNC_QDRANT_HTTP_PORT": free_port(),
            "RAGSYNC_QDRANT_GRPC_PORT": free_port(),
        }
        assert len(set(self.ports.values())) == len(self.ports)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")},
            **{k: str(v) for k, v in self.ports.items()},
            "RAGSYNC_SERVICES_HOME": str(self.home),
            "RAGSYNC_SERVICES_CACHE": str(shared_cache()),
            "RAGSYNC_ES_RUNTIME": str(self.home),
            "RAGSYNC_REDIS_PERSIST": "1",  # as compose/docker-compose.yml runs it: AOF + RDB
        }
        self.log = self.home / "launcher.log"

    @property
    def kafka(self) -> str:
        return f"127.0.0.1:{self.ports['RAGSYNC_KAFKA_PORT']}"

    @property
    def es_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['RAGSYNC_ES_PORT']}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['RAGSYNC_REDIS_PORT']}/0"

    @property
    def qdrant_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['RAGSYNC_QDRANT_HTTP_PORT']}"

    def _launcher(self, *args: str) -> None:
        with self.log.open("a") as out:
            out.write(f"$ services {' '.join(args)}\n")
            out.flush()
            res = subprocess.run(
                [sys.executable, str(LAUNCHER), *args], env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=300
            )
        assert res.returncode == 0, f"services {' '.join(args)} failed:\n{self.log.read_text()[-3000:]}"

    def up(self, *names: str, keep: bool = False) -> float:
        """Start (or, with keep, restart on the same data); returns when ready, the seconds it took."""
        started = time.monotonic()
        self._launcher("up", *(["--keep"] if keep else []), *names)
        return time.monotonic() - started

    def down(self, *names: str) -> None:
        self._launcher("down", *names)

    def kill(self, name: str) -> None:
        """SIGKILL a service started by the launcher (its pid file), and wait until it is gone."""
        pid = int((self.home / "run" / name / f"{name}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not pid_alive(pid), 15, f"{name} to die", every_s=0.2)

    def close(self) -> None:
        try:
            self.down("all")
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def passages_of_markdown(text: str, max_chars: int) -> int:
    from indexer.chunker import chunk_document

    return len(chunk_document(text, "markdown", max_chars=max_chars))


def section_doc(title: str, sections: int, words: str) -> str:
    body = "\n\n".join(
        f"## Part {j}\n\n{title} part {j} covers {words} step {j} in detail. " * 3 for j in range(sections)
    )
    return f"# {title}\n\n{body}\n"


@dataclass
class Targets:
    """Documents a scenario revokes (for `ann`, kept for `hal`) and deletes (for everyone), each with a canary."""

    revoked: dict[str, str] = field(default_factory=dict)  # doc_id -> canary
    deleted: dict[str, str] = field(default_factory=dict)

    def canary(self, doc_id: str) -> str:
        return self.revoked.get(doc_id) or self.deleted[doc_id]


class Deployment:
    """One scenario's ragsync on the private services: the real CLI in subprocesses."""

    def __init__(self, services: PrivateServices, root: Path, name: str) -> None:
        self.services = services
        self.root = root
        self.tag = f"f{name}{uuid.uuid4().hex[:6]}"
        self.drive = root / "drive"
        self.env = {
            "RAGSYNC_PROFILE": "cluster",
            "RAGSYNC_HOME": str(root / "home"),
            "RAGSYNC_SESSION_SECRET": "faults",
            "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
            "RAGSYNC_KAFKA_BOOTSTRAP": services.kafka,
            "RAGSYNC_KAFKA_TOPIC_PREFIX": f"{self.tag}.",
            "RAGSYNC_ES_URL": services.es_url,
            "RAGSYNC_ES_INDEX_PREFIX": self.tag,
            "RAGSYNC_REDIS_URL": services.redis_url,
            "RAGSYNC_REDIS_NAMESPACE": self.tag,
            "RAGSYNC_QDRANT_URL": services.qdrant_url,
            "RAGSYNC_QDRANT_COLLECTION": self.tag,
            "RAGSYNC_CONFIG": os.devnull,
        }
        self.workers: list[subprocess.Popen[bytes]] = []
        self.targets = Targets()
        self.syncs: list[dict[str, Any]] = []

    # ---- settings and components in this process ------------------------------------------------

    def settings(self) -> Any:
        from ragsync.settings import Settings

        e = self.env
        return Settings(
            profile="cluster",
            home=Path(e["RAGSYNC_HOME"]),
            session_secret=e["RAGSYNC_SESSION_SECRET"],
            embed_model_path=MODEL_PATH,
            kafka_bootstrap=e["RAGSYNC_KAFKA_BOOTSTRAP"],
            kafka_topic_prefix=e["RAGSYNC_KAFKA_TOPIC_PREFIX"],
            es_url=e["RAGSYNC_ES_URL"],
            es_index_prefix=e["RAGSYNC_ES_INDEX_PREFIX"],
            redis_url=e["RAGSYNC_REDIS_URL"],
            redis_namespace=e["RAGSYNC_REDIS_NAMESPACE"],
            qdrant_url=e["RAGSYNC_QDRANT_URL"],
            qdrant_collection=e["RAGSYNC_QDRANT_COLLECTION"],
        )

    def components(self) -> Any:
        from ragsync.wiring import build

        return build(self.settings())

    # ---- the drive --------------------------------------------------------------------------------

    def write_drive(self, base_docs: int) -> None:
        """Team documents for staff, a vault staff and HR read (revoked for staff later), and doomed documents."""
        acme = self.drive / TENANT
        (acme / "team").mkdir(parents=True)
        (acme / "vault").mkdir()
        (acme / ".ragsync-acl.toml").write_text(  # the vault's readers are granted here; its own manifest narrows
            f'tenant = "{TENANT}"\nread = ["group:staff"]\n[folders."vault"]\nread = ["group:staff", "group:hr"]\n'
        )
        (acme / "vault/.ragsync-acl.toml").write_text('read = ["group:staff", "group:hr"]\n')
        for i in range(base_docs):
            (acme / "team" / f"base{i:03d}.md").write_text(section_doc(f"Team page {i}", 3, f"routine {i}"))
        from schemas.events import qualify_doc_id, source_name_from

        source = source_name_from(self.drive.name, "drive")
        for i in range(3):
            canary = f"zqv{uuid.uuid4().hex[:10]}"
            (acme / "vault" / f"secret{i}.md").write_text(section_doc(f"Vault note {i}", 2, canary))
            self.targets.revoked[qualify_doc_id(source, f"{TENANT}/vault/secret{i}.md")] = canary
            canary = f"zqd{uuid.uuid4().hex[:10]}"
            (acme / "team" / f"doomed{i}.md").write_text(section_doc(f"Doomed page {i}", 2, canary))
            self.targets.deleted[qualify_doc_id(source, f"{TENANT}/team/doomed{i}.md")] = canary

    def write_backlog(self, docs: int, sections: int = 4) -> None:
        bulk = self.drive / TENANT / "bulk"
        bulk.mkdir()
        for i in range(docs):
            (bulk / f"bulk{i:03d}.md").write_text(section_doc(f"Bulk manual {i}", sections, f"procedure {i}"))

    def revoke_and_delete(self) -> None:
        """At the source: the vault narrowed to HR, the doomed pages removed."""
        (self.drive / TENANT / "vault/.ragsync-acl.toml").write_text('read = ["group:hr"]\n')
        for i in range(3):
            (self.drive / TENANT / "team" / f"doomed{i}.md").unlink()

    def expected(self, max_chars: int) -> dict[str, int]:
        """What the source says: every live document and its number of passages."""
        from schemas.events import qualify_doc_id, source_name_from

        source = source_name_from(self.drive.name, "drive")
        out = {}
        for path in sorted(self.drive.rglob("*.md")):
            rel = path.relative_to(self.drive).as_posix()
            out[qualify_doc_id(source, rel)] = passages_of_markdown(path.read_text(), max_chars)
        return out

    # ---- processes --------------------------------------------------------------------------------

    def cli_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
        return {**base, **self.env, "PYTHONPATH": str(REPO)}

    def start_worker(self) -> subprocess.Popen[bytes]:
        n = len(self.workers)
        with (self.root / f"worker{n}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ragsync.cli", "-v", "worker"],
                cwd=REPO,
                env=self.cli_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def worker_logs(self) -> str:
        return "\n".join(
            f"--- worker{n}.log:\n{(self.root / f'worker{n}.log').read_text(errors='replace')[-4000:]}"
            for n in range(len(self.workers))
        )

    def sync(self, timeout_s: float = 240.0) -> dict[str, Any]:
        """`ragsync sync <drive> --json` in a process of its own; the outcome, with when it returned."""
        started = time.time()
        try:
            res = subprocess.run(
                [sys.executable, "-m", "ragsync.cli", "sync", str(self.drive), f"--tenant={TENANT}", "--json"],
                cwd=REPO,
                env=self.cli_env(),
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            code, out, err = res.returncode, res.stdout, res.stderr
        except subprocess.TimeoutExpired as exc:
            code, out, err = -1, str(exc.stdout or ""), f"timed out after {timeout_s:.0f}s"
        outcome = {"exit": code, "started": started, "returned": time.time(), "stdout": out, "stderr": err[-2000:]}
        try:
            outcome["report"] = json.loads(out) if code == 0 else None
        except ValueError:
            outcome["report"] = None
        self.syncs.append(outcome)
        return outcome

    def verify_cli(self) -> tuple[int, dict[str, Any]]:
        res = subprocess.run(
            [sys.executable, "-m", "ragsync.cli", "verify", "--json"],
            cwd=REPO,
            env=self.cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            return res.returncode, json.loads(res.stdout)
        except ValueError:
            return res.returncode, {"stdout": res.stdout, "stderr": res.stderr[-2000:]}

    def stop_workers(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def drop(self) -> None:
        """Remove this scenario's indices, collection and Redis keys from the private services."""
        from elasticsearch import Elasticsearch
        from qdrant_client import QdrantClient

        from indexer.redis_cache import RedisCache

        es = Elasticsearch(self.services.es_url)
        try:
            names = list(es.indices.get(index=f"{self.tag}*"))
            if names:
                es.indices.delete(index=",".join(names))
        except Exception:  # cleanup is best effort: the private services are discarded anyway
            pass
        finally:
            es.close()
        qdrant = QdrantClient(url=self.services.qdrant_url, check_compatibility=False)
        try:
            qdrant.delete_collection(self.tag)
        except Exception:
            pass
        finally:
            qdrant.close()
        with contextlib.suppress(Exception):
            RedisCache(self.services.redis_url, namespace=self.tag).drop_all()


# ---- the prober ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    started: float
    ended: float
    user: str
    doc_id: str
    returned: bool
    cached: bool
    error: str | None


class Prober(threading.Thread):
    """Asks, as `ann` (staff) and `hal` (staff + HR), for every target document by its canary, over and over.

    Retrieval is what every answer is built from, so a target among the retrieved passages (either
    ranker, or the fused list, or a cached result) counts as served, whether or not a model would
    cite it. Between rounds it reads each target's doc state: the first time it shows the change
    applied is when the stores and the cache confirmed it (the sink writes doc state last).
    """

    def __init__(self, deployment: Deployment, pause_s: float = 0.05) -> None:
        super().__init__(daemon=True, name="prober")
        from schemas.principal import Principal

        self.deployment = deployment
        self.pause_s = pause_s
        self.ann = Principal(tenant=TENANT, user="ann", groups=("staff",))
        self.hal = Principal(tenant=TENANT, user="hal", groups=("staff", "hr"))
        self.probes: list[Probe] = []
        self.applied: dict[str, float] = {}
        self.stop_flag = threading.Event()
        self.failure: BaseException | None = None
        self.components = deployment.components()
        self.retriever = self.components.retriever()

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the test, never lost in a thread
            self.failure = exc

    def _loop(self) -> None:
        targets = self.deployment.targets
        asks = [(p, d) for d in [*targets.revoked, *targets.deleted] for p in (self.ann, self.hal)]
        while not self.stop_flag.is_set():
            for principal, doc_id in asks:
                self._ask(principal, doc_id, targets.canary(doc_id))
                if self.stop_flag.wait(self.pause_s):
                    return
            self._watch_states()

    def _ask(self, principal: Any, doc_id: str, canary: str) -> None:
        started = time.time()
        try:
            found = self.retriever.search(principal, f"What does {canary} say?", datetime.now(UTC))
        except Exception as exc:
            self.probes.append(Probe(started, time.time(), principal.user, doc_id, False, False, type(exc).__name__))
            return
        ids = [p.passage_id for p in found.passages] + found.lexical_ids + found.dense_ids + [i for i, _ in found.fused]
        returned = any(pid.split("@", 1)[0] == doc_id for pid in ids)
        self.probes.append(Probe(started, time.time(), principal.user, doc_id, returned, found.cached, None))

    def _watch_states(self) -> None:
        targets = self.deployment.targets
        for doc_id in [*targets.revoked, *targets.deleted]:
            if doc_id in self.applied:
                continue
            try:
                state = self.components.docs.get(TENANT, doc_id)
            except Exception:
                continue
            if state is None:
                continue
            done = state.deleted if doc_id in targets.deleted else tuple(state.acl) == ("group:hr",)
            if done:
                self.applied[doc_id] = time.time()

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(60)
        self.components.close()
        if self.failure is not None:
            raise AssertionError(f"the prober failed: {self.failure!r}") from self.failure


@dataclass
class ProbeVerdict:
    probes: int
    errors: int
    during_fault: int
    seen_before: dict[str, int]
    leaks: list[str]
    served_after_publish_s: dict[str, float]
    kept_for_hal_after: int
    timeline: dict[str, dict[str, float | int | None]]
    """Per target, seconds after the fault's end: when doc state showed it applied, when it was last served,
    and how many of those servings came from the result cache."""


def judge(
    prober: Prober,
    published_at: float,
    fault: tuple[float, float],
    grace_s: float = GRACE_S,
) -> ProbeVerdict:
    """The prober's record against the promises.

    A revoked or deleted document may not be served (1) by any query that started after doc state
    showed the change applied, nor (2) by any query that started more than `grace_s` after both its
    publish and the end of the fault. `served_after_publish_s` is, per target, how long after the
    publish it was last served: the window (1) and (2) bound.
    """
    targets = prober.deployment.targets
    leaks: list[str] = []
    served: dict[str, float] = {}
    seen_before: dict[str, int] = {}
    deadline = max(published_at, fault[1]) + grace_s
    for probe in prober.probes:
        affected = probe.doc_id in targets.deleted or (probe.user == "ann" and probe.doc_id in targets.revoked)
        if not affected or not probe.returned:
            continue
        if probe.started < published_at:
            seen_before[probe.doc_id] = seen_before.get(probe.doc_id, 0) + 1
            continue
        served[probe.doc_id] = max(served.get(probe.doc_id, 0.0), probe.started - published_at)
        applied = prober.applied.get(probe.doc_id)
        if applied is not None and probe.started > applied:
            leaks.append(f"{probe.user} got {probe.doc_id} {probe.started - applied:.2f}s after it was applied")
        elif probe.started > deadline:
            leaks.append(
                f"{probe.user} got {probe.doc_id} {probe.started - deadline + grace_s:.2f}s after publish and recovery"
            )
    kept = sum(
        1
        for p in prober.probes
        if p.user == "hal" and p.doc_id in targets.revoked and p.returned and p.started > deadline
    )
    timeline: dict[str, dict[str, float | int | None]] = {}
    for doc_id in [*targets.revoked, *targets.deleted]:
        applied = prober.applied.get(doc_id)
        hits = [
            p
            for p in prober.probes
            if p.doc_id == doc_id
            and p.returned
            and p.started >= published_at
            and (p.user == "ann" or doc_id in targets.deleted)
        ]
        timeline[doc_id] = {
            "applied": None if applied is None else round(applied - fault[1], 2),
            "last_served": round(max(p.started for p in hits) - fault[1], 2) if hits else None,
            "served_from_cache": sum(1 for p in hits if p.cached),
        }
    return ProbeVerdict(
        timeline=timeline,
        probes=len(prober.probes),
        errors=sum(1 for p in prober.probes if p.error),
        during_fault=sum(1 for p in prober.probes if fault[0] <= p.started <= fault[1]),
        seen_before=seen_before,
        leaks=leaks,
        served_after_publish_s={k: round(v, 2) for k, v in served.items()},
        kept_for_hal_after=kept,
    )


# ---- the stores against the source ------------------------------------------------------------------


def store_drift(deployment: Deployment, components: Any) -> list[str]:
    """Per document, independently of `ragsync verify`: passages of the newest version, versions and ACLs in
    each store equal what the source says (its files, its manifests, the versions its connector published)."""
    from connectors.state import ConnectorState
    from schemas.events import qualify_doc_id

    settings = components.settings
    expected = deployment.expected(settings.chunk_max_chars)
    connectors = ConnectorState(settings.home / "connectors.db")
    try:
        published = {
            qualify_doc_id(source, r.doc_id): r for source in connectors.sources() for r in connectors.records(source)
        }
    finally:
        connectors.close()
    problems: list[str] = []
    stores = [components.lexical, components.vector]
    for doc_id, record in published.items():
        state = components.docs.get(TENANT, doc_id)
        if state is None:
            problems.append(f"{doc_id}: no doc state")
            continue
        held = {store.name: store.inventory(TENANT, doc_id) for store in stores}
        if doc_id not in expected:  # deleted at the source
            if not record.deleted or not state.deleted:
                problems.append(f"{doc_id}: gone from the source, deleted={record.deleted}/{state.deleted}")
            problems += [f"{doc_id}: {len(p)} passages left in {s}" for s, p in held.items() if p]
            continue
        want_acl = ("group:hr",) if "/vault/" in doc_id else ("group:staff",)
        if state.deleted or state.applied_version != record.version or tuple(state.acl) != want_acl:
            problems.append(f"{doc_id}: state v{state.applied_version} {state.acl}, source v{record.version}")
        if state.content_hash != record.content_hash or state.content_version is None:
            problems.append(f"{doc_id}: the content applied is not the source's")
            continue
        for name, passages in held.items():
            current = [p for p in passages if p.version == state.content_version]
            if len(current) != expected[doc_id] or len({p.passage_id for p in current}) != len(current):
                problems.append(f"{doc_id}: {len(current)} passages in {name}, the source has {expected[doc_id]}")
            if any(p.version > state.content_version for p in passages):
                problems.append(f"{doc_id}: {name} holds a version newer than v{state.content_version}")
            if any(tuple(sorted(p.acl)) != want_acl for p in passages):
                problems.append(f"{doc_id}: {name} holds passages without the ACL {want_acl}")
    missing = set(expected) - set(published)
    problems += [f"{doc_id}: in the source, never published" for doc_id in sorted(missing)]
    return problems


def wait_clean(components: Any, since: float, timeout_s: float) -> tuple[float, Any]:
    """Poll `ragsync verify` in this process until it reports no drift and nothing pending; seconds after `since`."""
    from ragsync.verify import verify

    last: list[object] = []

    def clean() -> Any:
        try:
            report = verify(components)
        except Exception as exc:  # a store still coming back: try again
            last[:] = [exc]
            return None
        last[:] = [report]
        return report if report.ok else None

    report = wait_until(clean, timeout_s, "verify to be clean after the fault", every_s=1.0, explain=lambda: repr(last))
    return time.time() - since, report


def ingested(components: Any, doc_ids: Sequence[str]) -> int:
    """How many of these documents have doc state (applied) right now."""
    return sum(1 for d in doc_ids if components.docs.get(TENANT, d) is not None)
