"""The tenant-qualified ACL keys on the Qdrant server (indexer.qdrant_acl_key): a collection written before
them keeps the tenant + ACL filter until migrated; the migration never gives a point a key of another
tenant or of an entry its ACL lacks, fixes keys an older writer left behind, and marks the collection only
once every point holds exactly its keys. On the real server (the shared service)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DIM, NOW, QDRANT_URL, make_passage, require_service, unique, unit
from qdrant_client import QdrantClient, models

from indexer.payload import TENANT_ACL, passage_to_point, point_id, tenant_acl_keys
from indexer.qdrant_acl_key import MARKER, marked, migrate, set_keys
from indexer.qdrant_server import QdrantVectorIndex
from schemas.principal import AccessFilter

PASSAGES = [
    make_passage("a", anchor="a-1", acl=("group:staff",)),
    make_passage("b", anchor="b-1", acl=("group:staff", "user:ann")),
    make_passage("c", anchor="c-1", acl=("group:board",)),
    make_passage("d", doc_id="d.md", anchor="d-1", acl=("group:staff", "user:ann")),
    make_passage("e", doc_id="e.md", anchor="e-1", acl=()),
    make_passage("g", tenant="globex", anchor="g-1", acl=("group:staff",)),
    make_passage("h", tenant="globex", anchor="h-1", acl=("group:staff", "user:ann")),
    # Under a naive join ("tenant:entry") this point's key would be acme's for the entry group:user:x.
    make_passage("i", tenant="acme:group", anchor="i-1", acl=("user:x",)),
]
ASKERS = [
    AccessFilter("acme", ("group:staff",), NOW),
    AccessFilter("acme", ("group:staff", "user:ann"), NOW),
    AccessFilter("acme", ("group:board",), NOW),
    AccessFilter("acme", ("user:ann",), NOW),
    AccessFilter("globex", ("group:staff",), NOW),
    AccessFilter("globex", ("group:board", "user:ann"), NOW),
    AccessFilter("acme:group", ("user:x",), NOW),
    AccessFilter("acme", ("group:user:x",), NOW),
]


@pytest.fixture
def old() -> Iterator[tuple[QdrantClient, str]]:
    """A collection as this code's predecessor wrote it: no marker, no `tacl` on any point."""
    require_service("qdrant")
    client = QdrantClient(url=QDRANT_URL)
    name = unique("test_acl_key_")
    QdrantVectorIndex(client, DIM, collection=name)  # the indexes and the collection, as the adapter makes them
    client.delete_collection(name)
    client.create_collection(name, vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    points = [
        models.PointStruct(
            id=point_id(p.tenant, p.passage_id),
            vector=unit(1, 0.01 * i).tolist(),
            payload={k: v for k, v in passage_to_point(p).items() if k != TENANT_ACL},
        )
        for i, p in enumerate(PASSAGES)
    ]
    client.upsert(name, points=points, wait=True)
    yield client, name
    client.delete_collection(name)
    client.close()


def answers(index: QdrantVectorIndex) -> list[list[str]]:
    return [sorted(h.passage_id for h in index.search(unit(1, 0), a, 20, -1.0)) for a in ASKERS]


def reference() -> list[list[str]]:
    """What each asker may read: grants_allow through Passage.readable_by's rule, tenant first."""
    return [
        sorted(p.passage_id for p in PASSAGES if p.tenant == a.tenant and set(p.acl) & set(a.entries)) for a in ASKERS
    ]


def keys_of(client: QdrantClient, name: str) -> dict[str, Any]:
    points, _ = client.scroll(name, limit=100, with_payload=True)
    return {
        str((p.payload or {})["passage_id"]) + "@" + str((p.payload or {})["tenant"]): (p.payload or {}).get(TENANT_ACL)
        for p in points
    }


def test_an_old_collection_is_searched_without_the_keys_until_migrated_then_with_them(
    old: tuple[QdrantClient, str],
) -> None:
    client, name = old
    before = QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=name)
    assert not before.keyed and not marked(client, name)
    assert answers(before) == reference()  # the tenant + ACL filter needs no key
    progress: list[tuple[str, int, int]] = []
    report = migrate(client, name, page=3, progress=lambda *a: progress.append(a))
    assert report.marked and report.fixed == 0 and report.points == len(PASSAGES)
    assert report.by_filter == 6  # (tenant, ACL) pairs with entries; the point with no ACL needs no key
    assert progress and progress[-1] == ("check 1", len(PASSAGES), len(PASSAGES))
    assert marked(client, name)
    held = keys_of(client, name)
    for p in PASSAGES:
        assert held[f"{p.passage_id}@{p.tenant}"] in ([] if not p.acl else tenant_acl_keys(p.tenant, p.acl), None)
        if p.acl:
            assert held[f"{p.passage_id}@{p.tenant}"] == tenant_acl_keys(p.tenant, p.acl)
    after = QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=name)
    assert after.keyed
    assert answers(after) == reference()
    # Still searched by the key after a revocation and a grant, written by this code.
    after.set_acl("acme", "doc.md", ["group:board"], {})
    changed = [
        p.model_copy(update={"acl": ("group:board",)}) if p.tenant == "acme" and p.doc_id == "doc.md" else p
        for p in PASSAGES
    ]
    assert answers(after) == [
        sorted(p.passage_id for p in changed if p.tenant == a.tenant and set(p.acl) & set(a.entries)) for a in ASKERS
    ]
    before.close()
    after.close()


def test_a_collection_the_adapter_creates_is_marked_at_creation() -> None:
    require_service("qdrant")
    name = unique("test_acl_key_")
    index = QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=name)
    try:
        assert index.keyed
        index.upsert(PASSAGES, np.stack([unit(1, 0.01 * i) for i in range(len(PASSAGES))]))
        assert answers(index) == reference()
    finally:
        index.drop_all()
        index.close()


def test_a_key_is_written_only_where_the_acl_holds_it_at_that_moment(old: tuple[QdrantClient, str]) -> None:
    """The migration's checked write, with the ACL changed under it: no point gains a key its ACL lacks."""
    client, name = old
    # As if read before a revocation of user:ann on doc.md: the points now hold group:staff alone.
    client.set_payload(
        name,
        payload={"acl": ["group:staff"]},
        points=models.Filter(must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value="doc.md"))]),
        wait=True,
    )
    set_keys(client, name, "acme", ["group:staff", "user:ann"])
    held = keys_of(client, name)
    assert held["doc.md@1#b-1@acme"] is None, "its ACL lost user:ann: no key for it"
    assert held["d.md@1#d-1@acme"] == tenant_acl_keys("acme", ["group:staff", "user:ann"])
    assert held["doc.md@1#h-1@globex"] is None, "another tenant's point with the same ACL"
    # A superset of the ACL read (a grant since) is not matched either: it keeps no key until its own write.
    set_keys(client, name, "acme", ["group:staff"])
    assert keys_of(client, name)["doc.md@1#b-1@acme"] == tenant_acl_keys("acme", ["group:staff"])
    assert keys_of(client, name)["doc.md@1#g-1@globex"] is None
    assert keys_of(client, name)["d.md@1#d-1@acme"] == tenant_acl_keys("acme", ["group:staff", "user:ann"]), (
        "a point whose ACL holds more than the combination is not the combination's"
    )


def test_keys_an_older_writer_left_behind_are_fixed_before_the_collection_is_marked(
    old: tuple[QdrantClient, str],
) -> None:
    """A key of a revoked entry (an older writer's revocation left `tacl` alone), and a key of another
    tenant: the scan finds both, rewrites them from the point's own tenant and ACL, and only then marks."""
    client, name = old
    assert migrate(client, name).marked
    client.update_collection(name, metadata={MARKER: 0})
    stale = models.Filter(must=[models.HasIdCondition(has_id=[point_id("acme", "doc.md@1#c-1")])])
    client.set_payload(
        name, payload={TENANT_ACL: tenant_acl_keys("acme", ["group:board", "group:staff"])}, points=stale, wait=True
    )
    alien = models.Filter(must=[models.HasIdCondition(has_id=[point_id("acme", "e.md@1#e-1")])])
    client.set_payload(name, payload={TENANT_ACL: tenant_acl_keys("globex", ["group:staff"])}, points=alien, wait=True)
    assert not QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=name).keyed
    report = migrate(client, name)
    assert report.marked and report.fixed == 2 and report.scans == 2
    held = keys_of(client, name)
    assert held["doc.md@1#c-1@acme"] == tenant_acl_keys("acme", ["group:board"])
    assert held["e.md@1#e-1@acme"] == []
    index = QdrantVectorIndex(QdrantClient(url=QDRANT_URL), DIM, collection=name)
    assert index.keyed and answers(index) == reference()
    index.close()


def test_the_operator_command_migrates_with_progress_and_refuses_the_embedded_profile(
    old: tuple[QdrantClient, str], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from ragsync.cli import main

    client, name = old
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_QDRANT_URL": QDRANT_URL,
        "RAGSYNC_QDRANT_COLLECTION": name,
        "RAGSYNC_CONFIG": os.devnull,
    }
    result = CliRunner().invoke(main, ["qdrant-acl-keys", "--page", "4"], env=env)
    assert result.exit_code == 0, result.output
    assert "by ACL: 6/6" in result.output and f"check 1: {len(PASSAGES)}/{len(PASSAGES)}" in result.output
    assert "marked=True" in result.output and f"collection={name}" in result.output
    assert marked(client, name)
    embedded = CliRunner().invoke(main, ["qdrant-acl-keys"], env=env | {"RAGSYNC_PROFILE": "embedded"})
    assert embedded.exit_code == 2 and "cluster profile" in embedded.output
