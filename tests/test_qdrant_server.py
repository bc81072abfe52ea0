"""The Qdrant server adapter's connection rules: which Qdrant the cluster profile uses, version checks, local mode."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH, QDRANT_URL, free_port, require_service

from indexer.ports import StoreUnavailable
from indexer.qdrant_server import QdrantUnavailable, compatible, connect, open_local, version_problem
from ragsync.cli import main
from ragsync.cluster import DEFAULT_QDRANT_URL, qdrant_target
from ragsync.settings import Settings


def test_compatibility_is_one_minor_version_apart() -> None:
    assert compatible("1.19.1", "1.18.3") and compatible("1.19.1", "1.20.0") and compatible("1.18.0", "1.18.3")
    assert not compatible("1.20.0", "1.18.3"), "qdrant-client 1.20 warns against a 1.18 server"
    assert not compatible("2.0.0", "1.18.3") and not compatible("1.19.1", "dev")
    message = version_problem("http://q:6333", "1.20.0", "1.18.3")
    assert message is not None and "\n" not in message and "qdrant-client 1.18.x" in message
    assert version_problem("http://q:6333", "1.19.1", "1.18.3") is None


def test_the_cluster_profile_uses_the_server_unless_local_mode_is_asked_for(tmp_path: Path) -> None:
    def target(**kw: object) -> object:
        return qdrant_target(Settings(profile="cluster", home=tmp_path, **kw))  # type: ignore[arg-type]

    assert target() == DEFAULT_QDRANT_URL == "http://127.0.0.1:6333"
    assert target(qdrant_url="http://qdrant:6333") == "http://qdrant:6333"
    assert target(qdrant_url="local") == tmp_path / "qdrant-local"
    assert target(qdrant_path=tmp_path / "q") == tmp_path / "q"
    assert target(qdrant_url="local", qdrant_path=tmp_path / "q") == tmp_path / "q"
    with pytest.raises(StoreUnavailable, match="both set"):
        target(qdrant_url="http://qdrant:6333", qdrant_path=tmp_path / "q")


def test_connect_refuses_an_incompatible_server_in_one_line() -> None:
    require_service("qdrant")
    with pytest.raises(QdrantUnavailable) as err:
        connect(QDRANT_URL, client="1.20.0")
    assert "\n" not in str(err.value) and "is 1.18.3 but qdrant-client is 1.20.0" in str(err.value)
    connect(QDRANT_URL).close()  # the pinned client is compatible with the shared server


def test_connect_names_the_fix_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(QdrantUnavailable) as err:
        connect(url, timeout_s=2)
    message = str(err.value)
    assert "\n" not in message and url in message
    assert "compose/local/services up qdrant" in message and "RAGSYNC_QDRANT_URL=local" in message


def test_local_mode_says_it_is_single_process(tmp_path: Path) -> None:
    first = open_local(tmp_path / "q")
    try:
        with pytest.raises(QdrantUnavailable, match="single-process"):
            open_local(tmp_path / "q")
    finally:
        first.close()


def test_cli_prints_one_line_when_qdrant_is_down(tmp_path: Path) -> None:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip("the dense ranker (and so Qdrant) is opened only with a model")
    require_service("elasticsearch")
    url = f"http://127.0.0.1:{free_port()}"
    env = {
        "RAGSYNC_PROFILE": "cluster",
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_SESSION_SECRET": "s",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_QDRANT_URL": url,
        "RAGSYNC_ES_INDEX_PREFIX": f"qdown{os.getpid()}",
        "RAGSYNC_CONFIG": os.devnull,
    }
    runner = CliRunner()
    tok = runner.invoke(main, ["token", "issue", "--tenant", "acme", "--user", "u"], env=env).output.strip()
    result = runner.invoke(main, ["ask", "anything?", "--token", tok], env=env)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: Qdrant server not reachable at {url}"), result.output


def test_one_collection_tenant_keyed_with_payload_only_acl_updates() -> None:
    require_service("qdrant")
    import numpy as np
    from conftest import DIM, NOW, make_passage, unique, unit

    from indexer.payload import point_id
    from indexer.qdrant_server import QdrantVectorIndex
    from schemas.principal import AccessFilter

    index = QdrantVectorIndex(connect(QDRANT_URL), DIM, collection=unique("test_layout_"))
    try:
        index.upsert(
            [make_passage("a", anchor="a-1"), make_passage("g", tenant="globex", anchor="g-1")],
            np.stack([unit(1, 0), unit(0, 1)]),
        )
        client = index._client
        schema = client.get_collection(index.collection).payload_schema
        tenant = schema["tenant"].params
        assert tenant is not None and getattr(tenant, "is_tenant", False), "tenant must be the tenant key"
        for field, kind in (("acl", "keyword"), ("doc_id", "keyword")):
            assert schema[field].data_type == kind
        for field in ("effective_from", "superseded_on"):
            assert schema[field].data_type == "datetime"
        assert index.count("acme") == 1 and index.count("globex") == 1, "both tenants share one collection"

        pid = point_id("acme", "doc.md@1#a-1")
        before = client.retrieve(index.collection, [pid], with_vectors=True)[0].vector
        index.set_acl("acme", "doc.md", ["group:board"], {})
        after = client.retrieve(index.collection, [pid], with_vectors=True, with_payload=True)[0]
        assert after.vector == before and (after.payload or {})["acl"] == ["group:board"]
        assert index.search(unit(1, 0), AccessFilter("acme", ("group:staff",), NOW), 5, 0.0) == []
    finally:
        index.drop_all()
        index.close()


def test_a_document_larger_than_one_request_is_upserted_whole() -> None:
    """The server refuses a JSON body over 32 MB: 450 points of 4,096 components (~37 MB as JSON) in
    one upsert were refused with HTTP 400, so such a document could never be indexed."""
    require_service("qdrant")
    import numpy as np
    from conftest import make_passage, unique

    from indexer.qdrant_server import QdrantVectorIndex

    dim, count = 4096, 450
    index = QdrantVectorIndex(connect(QDRANT_URL), dim, collection=unique("test_big_doc_"))
    try:
        vectors = np.random.default_rng(3).standard_normal((count, dim)).astype(np.float32)
        index.upsert([make_passage("a", anchor=f"a-{i}") for i in range(count)], vectors)
        assert index.count("acme") == count
    finally:
        index.drop_all()
        index.close()


def test_a_search_the_server_cannot_answer_is_a_one_line_store_error() -> None:
    """The server goes away after the index was opened: a question fails with QdrantUnavailable (CLI
    exit 1, API 503), never a traceback and never an answer from BM25 alone."""
    require_service("qdrant")
    import numpy as np
    from qdrant_client import QdrantClient

    from indexer.qdrant_server import QdrantVectorIndex
    from schemas.principal import AccessFilter

    collection = f"ragsync-gone-{free_port()}"
    reachable = connect(QDRANT_URL)
    index = QdrantVectorIndex(reachable, 4, collection=collection)
    try:
        index._client = QdrantClient(url=f"http://127.0.0.1:{free_port()}", timeout=2, check_compatibility=False)
        access = AccessFilter("acme", ("group:staff",), datetime.now(UTC))
        with pytest.raises(QdrantUnavailable, match="could not be reached") as raised:
            index.search(np.ones(4, dtype=np.float32), access, 5, 0.0)
        assert isinstance(raised.value, StoreUnavailable)
    finally:
        reachable.delete_collection(collection)
        reachable.close()


def _connections_to(port: int) -> set[int]:
    """Local ports of this process's established TCP connections to `port` on this host (/proc)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def test_searches_of_a_server_on_this_host_share_one_kept_alive_connection() -> None:
    """qdrant-client closes every connection to localhost/127.0.0.1 after one request (keep-alive off):
    a connect, an accept and a close per search. `connect` keeps them alive (answers asked uncompressed,
    so no delayed-ACK stall on a gzipped chunked answer): one connection serves every search."""
    require_service("qdrant")
    import numpy as np
    from conftest import DIM, NOW, make_passage, unique, unit

    from indexer.qdrant_server import QdrantVectorIndex
    from schemas.principal import AccessFilter

    port = int(QDRANT_URL.rsplit(":", 1)[1])
    index = QdrantVectorIndex(connect(QDRANT_URL), DIM, collection=unique("test_keepalive_"))
    try:
        index.upsert([make_passage("a", anchor="a-1")], np.stack([unit(1, 0)]))
        seen = []
        for _ in range(5):
            hits = index.search(unit(1, 0), AccessFilter("acme", ("group:staff",), NOW), 5, 0.0)
            assert [h.passage_id for h in hits] == ["doc.md@1#a-1"]
            seen.append(_connections_to(port))
        assert all(len(ports) == 1 for ports in seen), seen  # kept open after each search
        assert len(set().union(*seen)) == 1, seen  # and the same one every time
    finally:
        index.drop_all()
        index.close()


def test_other_hosts_keep_qdrant_clients_own_connection_options() -> None:
    from indexer.qdrant_connect import loopback_options

    assert loopback_options("http://qdrant.example:6333") == {}
    assert loopback_options("https://10.0.0.7:6333") == {}
    assert set(loopback_options("http://localhost:6333")) == {"limits", "headers"}
