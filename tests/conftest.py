"""Shared fixtures. Every adapter of a port is a parameter of that port's one contract suite.

Cluster adapters need the real local services (compose/local/services up). Where a service, the
embedding model, a documentation package or a browser is missing, its tests are skipped, unless
RAGSYNC_REQUIRE_SERVICES=1, the one strict switch (scripts/test.sh, hence CI, sets it): then every
skip is a failure, so a green run always means the real stores, the real model
and the real manuals were tested, never a suite that passed because a part was missing.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from schemas.passages import Passage, make_passage_id

MODEL_PATH = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH", "/nonexistent"))


def _embedded_lexical_name() -> str:
    from ragsync.home_lexical import NEW_HOME_ENGINE

    engine = os.environ.get("RAGSYNC_LEXICAL_ENGINE") or NEW_HOME_ENGINE
    return "sqlite-tantivy" if engine == "tantivy" else "sqlite-fts5"


EMBEDDED_LEXICAL = _embedded_lexical_name()
"""A new embedded home's lexical store as audit records and reports name it (lexical_engine, else the
engine a new home is given)."""
if not (MODEL_PATH / "model.onnx").is_file():
    MODEL_PATH = Path(__file__).resolve().parents[2] / "shared/models/all-MiniLM-L6-v2-onnx"

SERVICES = {
    "kafka": ("127.0.0.1", 9092),
    "elasticsearch": ("127.0.0.1", 9200),
    "redis": ("127.0.0.1", 6379),
    "qdrant": ("127.0.0.1", 6333),
}
QDRANT_URL = "http://127.0.0.1:6333"


def service_up(name: str) -> bool:
    host, port = SERVICES[name]
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_service(name: str) -> None:
    if service_up(name):
        return
    message = f"{name} is not running on {SERVICES[name][0]}:{SERVICES[name][1]} (compose/local/services up {name})"
    pytest.skip(message)  # a failure under RAGSYNC_REQUIRE_SERVICES=1 (pytest_runtest_makereport below)


SLOW_MODULES = frozenset(
    {
        "test_cluster_end_to_end",
        "test_commands_beside_serve",
        "test_console",
        "test_deletion_physical",
        "test_dokuwiki_source",
        "test_end_to_end",
        "test_erasure",
        "test_isolation_property",
        "test_kafka_pipeline",
        "test_kafka_unreachable",
        "test_operator_key",
        "test_order_property",
        "test_posix_permissions",
        "test_publish_failure",
        "test_serve",
        "test_serve_idle",
        "test_serve_sources",
        "test_serve_visibility",
        "test_version_access_property",
    }
)
"""Modules that start processes (serve, workers, Kafka clients, a wiki or file server) or run many real syncs:
the full run only."""

CLUSTER_PARAMS = ("elasticsearch", "qdrant-server", "redis", "kafka")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks for `scripts/test.sh --fast` (-m "not cluster and not slow"): adapters parametrized with a
    service are `cluster`, the modules above `slow`; markers set in the modules themselves are kept."""
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module is not None else ""
        if module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(p in str(callspec.id) for p in CLUSTER_PARAMS):
            item.add_marker(pytest.mark.cluster)


STRICT = os.environ.get("RAGSYNC_REQUIRE_SERVICES") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under RAGSYNC_REQUIRE_SERVICES=1 a skipped test (a missing service, model, manual or browser) fails."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under RAGSYNC_REQUIRE_SERVICES=1, where every skip is a failure: {reason}"


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture
def drive(tmp_path: Path) -> Path:
    """A drive folder of three notes of tenant acme, readable by group:staff (the sync tests'; a test
    module with a tree of its own, tests/test_drive_connector.py, defines its own `drive`)."""
    drive = tmp_path / "drive"
    (drive / "acme").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(3):
        (drive / f"acme/note-{i}.md").write_text(f"# Note {i}\n\nThe note number {i} says hello.\n")
    return drive


@pytest.fixture
def es_prefix() -> Iterator[str]:
    """A fresh Elasticsearch index prefix for the doc-state and audit stores, their indexes dropped after
    the test (the shared cluster outlives every run, so a test's indexes must not)."""
    require_service("elasticsearch")
    from indexer.elastic_audit import ElasticDeletionAudit
    from indexer.elastic_state import ElasticDocStates

    value = unique("ragsync-test-")
    yield value
    for cls in (ElasticDocStates, ElasticDeletionAudit):
        store = cls("http://127.0.0.1:9200", prefix=value)
        store.drop_all()
        store.close()


SHARED_PORTS = frozenset({9092, 9093, 9200, 9300, 6379, 6333, 6334, 8080, 9464, 9465})
"""The shared services' and ragsync's default ports: a private instance never takes one."""


def free_port() -> int:
    """A port nothing listens on now (for a private service, a serve or a metrics listener)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in SHARED_PORTS:
            return port


NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def make_passage(
    text: str,
    *,
    tenant: str = "acme",
    doc_id: str = "doc.md",
    version: int = 1,
    anchor: str = "root-1",
    acl: tuple[str, ...] = ("group:staff",),
    effective_from: datetime | None = None,
    superseded_on: datetime | None = None,
    heading_path: tuple[str, ...] = (),
) -> Passage:
    return Passage(
        passage_id=make_passage_id(doc_id, version, anchor),
        doc_id=doc_id,
        version=version,
        anchor=anchor,
        tenant=tenant,
        acl=acl,
        effective_from=effective_from or NOW - timedelta(days=30),
        superseded_on=superseded_on,
        heading_path=heading_path,
        title="",
        text=text,
        source_url=f"file:///{doc_id}",
        chunker_version="test",
    )


# ---- lexical adapters -------------------------------------------------------------------------


def _sqlite_lexical(tmp: Path) -> Any:
    from indexer.sqlite_fts import SqliteLexicalIndex

    return SqliteLexicalIndex(tmp / "lexical.db")


def _tantivy_lexical(tmp: Path) -> Any:
    from indexer.tantivy_lexical import TantivyLexicalIndex

    return TantivyLexicalIndex(tmp / "lexical.db")


def _elastic_lexical(tmp: Path) -> Any:
    require_service("elasticsearch")
    from indexer.elastic import ElasticLexicalIndex

    return ElasticLexicalIndex("http://127.0.0.1:9200", prefix=unique("ragsync-test-"))


LEXICAL_FACTORIES: dict[str, Callable[[Path], Any]] = {
    "sqlite-fts5": _sqlite_lexical,
    "sqlite-tantivy": _tantivy_lexical,
    "elasticsearch": _elastic_lexical,
}


@pytest.fixture(params=list(LEXICAL_FACTORIES))
def lexical_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    index = LEXICAL_FACTORIES[request.param](tmp_path)
    yield index
    drop = getattr(index, "drop_all", None)
    if drop:
        drop()
    index.close()


# ---- vector adapters --------------------------------------------------------------------------

DIM = 8


def _edge_vector(tmp: Path) -> Any:
    from indexer.qdrant_edge import EdgeVectorIndex

    return EdgeVectorIndex(tmp / "vectors", DIM)


def _qdrant_local_vector(tmp: Path) -> Any:
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    return QdrantVectorIndex(QdrantClient(path=str(tmp / "qdrant-local")), DIM, collection=unique("passages_"))


def _qdrant_server_vector(tmp: Path) -> Any:
    require_service("qdrant")
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex

    return QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=unique("test_passages_"))


VECTOR_FACTORIES: dict[str, Callable[[Path], Any]] = {
    "qdrant-edge": _edge_vector,
    "qdrant-server": _qdrant_server_vector,
    "qdrant-client-local": _qdrant_local_vector,
}


@pytest.fixture(params=list(VECTOR_FACTORIES))
def vector_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    index = VECTOR_FACTORIES[request.param](tmp_path)
    yield index
    drop = getattr(index, "drop_all", None)
    if drop and not getattr(index, "local", True):
        drop()
    index.close()


def unit(*values: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


# ---- caches -----------------------------------------------------------------------------------


def _memory_cache(tmp: Path) -> Any:
    from indexer.cache import InProcessCache

    return InProcessCache()


def _sqlite_generation_cache(tmp: Path) -> Any:
    from indexer.cache import InProcessCache
    from indexer.state import SqliteGenerations

    return InProcessCache(generations=SqliteGenerations(tmp / "state.db"))


def _redis_cache(tmp: Path) -> Any:
    require_service("redis")
    from indexer.redis_cache import RedisCache

    return RedisCache("redis://127.0.0.1:6379/0", namespace=unique("t"))


CACHE_FACTORIES: dict[str, Callable[[Path], Any]] = {
    "in-process": _memory_cache,
    "in-process+sqlite-generations": _sqlite_generation_cache,
    "redis": _redis_cache,
}


@pytest.fixture(params=list(CACHE_FACTORIES))
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    c = CACHE_FACTORIES[request.param](tmp_path)
    yield c
    c.close()


# ---- embedding caches ------------------------------------------------------------------------
# Each factory returns an opener: every call opens another adapter on the SAME storage, the way a
# second worker (another process, another machine) would see what the first one stored.


def _sqlite_embedding_cache(tmp: Path) -> Callable[[], Any]:
    from indexer.embedding_cache import SqliteEmbeddingCache

    return lambda: SqliteEmbeddingCache(tmp / "embeddings.db")


def _redis_embedding_cache(tmp: Path) -> Callable[[], Any]:
    require_service("redis")
    from indexer.redis_embeddings import RedisEmbeddingCache

    namespace = unique("emb")
    return lambda: RedisEmbeddingCache("redis://127.0.0.1:6379/0", namespace=namespace)


EMBEDDING_CACHE_FACTORIES: dict[str, Callable[[Path], Callable[[], Any]]] = {
    "sqlite": _sqlite_embedding_cache,
    "redis": _redis_embedding_cache,
}


@pytest.fixture(params=list(EMBEDDING_CACHE_FACTORIES))
def open_embedding_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    opener = EMBEDDING_CACHE_FACTORIES[request.param](tmp_path)
    opened: list[Any] = []

    def open_one() -> Any:
        opened.append(opener())
        return opened[-1]

    yield open_one
    drop = getattr(opened[0], "drop_all", None) if opened else None
    if drop:
        drop()
    for cache in opened:
        cache.close()


# ---- event logs -------------------------------------------------------------------------------


def _sqlite_log(tmp: Path) -> Any:
    from streams.sqlite_log import SqliteEventLog

    return SqliteEventLog(tmp / "events.db")


def _kafka_log(tmp: Path) -> Any:
    require_service("kafka")
    from streams.kafka_log import KafkaEventLog

    return KafkaEventLog("127.0.0.1:9092", topic_prefix=unique("t") + ".", partitions=3)


LOG_FACTORIES: dict[str, Callable[[Path], Any]] = {"sqlite": _sqlite_log, "kafka": _kafka_log}


@pytest.fixture(params=list(LOG_FACTORIES))
def event_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    log = LOG_FACTORIES[request.param](tmp_path)
    yield log
    log.close()


@pytest.fixture(scope="session")
def embedder() -> Any:
    from indexer.embedder import FastEmbedder

    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    return FastEmbedder(MODEL_PATH)


@pytest.fixture
def wiki(tmp_path: Path) -> Iterator[Any]:
    """A private real DokuWiki (tests/dokuwiki_world.py) on a free port, stopped afterwards; skipped
    when Debian's dokuwiki and php are not installed (`available()` says why)."""
    from dokuwiki_world import Wiki, available

    why = available()
    if why:
        pytest.skip(why)
    running = Wiki(tmp_path / "services", free_port()).start()
    try:
        yield running
    finally:
        running.stop()
