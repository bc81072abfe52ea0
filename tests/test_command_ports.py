"""Each command opens only the ports it needs (Components.opened()), and a publishing sync needs no store.

On the cluster profile that is what lets any number of syncs, askers and workers run at once: a sync
only scans and publishes to Kafka, an ask opens the read side, a worker the write side.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import require_service, unique

import ragsync.pipeline
from ragsync.cli import main
from ragsync.demo import TENANTS, build_drive
from ragsync.pipeline import sync_folder
from ragsync.settings import Settings
from ragsync.wiring import Components, build


def drop_indices(prefix: str) -> None:
    from elasticsearch import Elasticsearch

    es = Elasticsearch("http://127.0.0.1:9200")
    try:
        names = list(es.indices.get(index=f"{prefix}*"))
        if names:
            es.indices.delete(index=",".join(names))
    finally:
        es.close()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Components]]:
    """Every Components a command builds, kept for inspection after the command closed it."""
    made: list[Components] = []

    def recording_build(settings: Settings, **kw: Any) -> Components:
        components = build(settings, **kw)
        made.append(components)
        return components

    for module in ("sync", "owned", "audit", "service"):  # ask builds through commands.owned
        monkeypatch.setattr(f"ragsync.commands.{module}.build", recording_build)
    yield made


def test_chunker_change_re_emits_every_document_without_opening_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    settings = Settings(home=tmp_path / "home", embed_model_path=None)

    def publish_only() -> Any:
        components = build(settings)
        try:
            report = sync_folder(components, drive, tenants=TENANTS, apply=False)
            assert components.opened() == ["events"], "deciding what to emit must not open a store"
            return report
        finally:
            components.close()

    first = publish_only()
    assert first.scan.upserts == 4 and not first.reindexed
    again = publish_only()
    assert again.scan.upserts == 0 and not again.reindexed
    monkeypatch.setattr(ragsync.pipeline, "CHUNKER_VERSION", "structure-v999")
    changed = publish_only()
    assert changed.reindexed and changed.scan.upserts == 4, "a new chunker re-emits every document"
    assert publish_only().scan.upserts == 0, "once re-emitted, the new chunker is recorded"


@pytest.mark.cluster
def test_cluster_sync_opens_only_kafka_and_ask_only_the_read_side(tmp_path: Path, built: list[Components]) -> None:
    for service in ("kafka", "elasticsearch", "redis", "qdrant"):
        require_service(service)
    drive = tmp_path / "drive"
    build_drive(drive)
    tag = unique("ports")
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_SESSION_SECRET": "s",
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "no-model"),
        "RAGSYNC_KAFKA_TOPIC_PREFIX": f"{tag}.",
        "RAGSYNC_ES_INDEX_PREFIX": tag,
        "RAGSYNC_REDIS_NAMESPACE": tag,
        "RAGSYNC_QDRANT_COLLECTION": tag,
        "RAGSYNC_CONFIG": os.devnull,
    }
    runner = CliRunner()
    out = runner.invoke(
        main, ["sync", str(drive), "--tenant", "acme,globex", "--json"], env=env, catch_exceptions=False
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["upserts"] == 4
    assert built[-1].opened() == ["events"]

    tok = runner.invoke(main, ["token", "issue", "--tenant", "acme", "--user", "u"], env=env).output.strip()
    out = runner.invoke(main, ["ask", "refund window?", "--token", tok, "--json"], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    opened = built[-1].opened()
    assert set(opened) <= {"lexical", "embedder", "vector", "cache", "deny"} and "lexical" in opened, opened
    assert not {"events", "docs", "audit"} & set(opened)

    out = runner.invoke(main, ["audit", "deletions", "--json"], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert built[-1].opened() == ["audit"]
    drop_indices(tag)


@pytest.mark.cluster
def test_a_cluster_worker_opens_the_write_side_and_not_the_event_log(tmp_path: Path) -> None:
    """The Faust worker reads Kafka itself; what it builds from Components is the sink (streams/faust_app.py)."""
    for service in ("elasticsearch", "redis", "qdrant"):
        require_service(service)
    from conftest import MODEL_PATH

    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    tag = unique("ports")
    settings = Settings(
        profile="cluster",
        home=tmp_path / "home",
        embed_model_path=MODEL_PATH,
        es_index_prefix=tag,
        redis_namespace=tag,
        qdrant_collection=tag,
    )
    components = build(settings)
    try:
        components.sink()
        assert sorted(components.opened()) == ["audit", "cache", "docs", "embedder", "lexical", "vector"]
        assert components.vector is not None
        components.vector.drop_all()  # type: ignore[attr-defined]
    finally:
        components.close()
        drop_indices(tag)
