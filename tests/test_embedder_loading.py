"""Where the embedding model comes from: a local folder, fastembed's own cache by model name, or
(neither) BM25 only with one warning per process, however many components ask."""

from __future__ import annotations

import http.server
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import MODEL_PATH, free_port

from indexer.embedder import DEFAULT_MODEL_NAME, FastEmbedder, ModelUnavailable, forget_loaded_models, hub_reachable
from indexer.embedder import load_embedder as load

REPO = Path(__file__).resolve().parents[1]
MODEL_FILES = ("config.json", "model.onnx", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture(autouse=True)
def fresh_loader() -> Iterator[None]:
    forget_loaded_models()
    yield
    forget_loaded_models()


@pytest.fixture
def unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> str:
    from huggingface_hub import constants

    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    return endpoint


def fastembed_cache_with_minilm(root: Path) -> Path:
    """fastembed's cache layout for the model, as a download leaves it (hub snapshot of Qdrant's ONNX repo)."""
    repo = root / "models--Qdrant--all-MiniLM-L6-v2-onnx"
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    for name in MODEL_FILES:
        (snapshot / name).symlink_to(MODEL_PATH / name)
    return root


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "indexer.embedder" and r.levelno >= logging.WARNING]


def test_by_name_from_fastembeds_own_cache_without_network(tmp_path: Path, unreachable_hub: str) -> None:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.skip(f"no embedding model at {MODEL_PATH}")
    cache = fastembed_cache_with_minilm(tmp_path / "fastembed")

    embedder = FastEmbedder(None, DEFAULT_MODEL_NAME, cache_dir=cache, download=False)

    assert embedder.dim == 384 and "fastembed cache" in embedder.source
    by_path = FastEmbedder(MODEL_PATH)
    assert float(embedder.embed(["refund window"])[0] @ by_path.embed(["refund window"])[0]) > 0.999


def test_neither_path_nor_hub_warns_once_per_process(
    tmp_path: Path, unreachable_hub: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    results = [load(None, DEFAULT_MODEL_NAME, cache_dir=tmp_path / "empty-cache") for _ in range(11)]

    assert results == [None] * 11
    (warning,) = warnings_of(caplog)
    assert "not in fastembed's cache" in warning and "model hub is unreachable" in warning
    assert "RAGSYNC_EMBED_MODEL_PATH" in warning and "BM25 only" in warning


def test_a_missing_local_folder_warns_once_and_never_goes_to_the_hub(
    tmp_path: Path, unreachable_hub: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    assert load(tmp_path / "nope") is None and load(tmp_path / "nope") is None

    (warning,) = warnings_of(caplog)
    assert f"no model.onnx under {tmp_path / 'nope'}" in warning and "hub" not in warning


def test_downloads_off_never_probe_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def probe(repo: str, timeout_s: float = 0) -> str | None:
        raise AssertionError("probed the hub with downloads off")

    monkeypatch.setattr("indexer.embedder.hub_reachable", probe)

    with pytest.raises(ModelUnavailable, match="downloads are off"):
        FastEmbedder(None, DEFAULT_MODEL_NAME, cache_dir=tmp_path / "empty", download=False)


def test_an_unknown_model_name_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"did you mean sentence-transformers/all-MiniLM-L6-v2\?"):
        FastEmbedder(None, "sentence-transformers/all-MiniLM-L6", cache_dir=tmp_path)


def test_hub_probe(unreachable_hub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_reachable("Qdrant/all-MiniLM-L6-v2-onnx", timeout_s=2) is not None

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(200 if self.path == "/api/models/Qdrant/all-MiniLM-L6-v2-onnx" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub_reachable("Qdrant/all-MiniLM-L6-v2-onnx") is None
        assert "HTTP 404" in (hub_reachable("Qdrant/other") or "")
    finally:
        server.shutdown()


def test_the_demo_without_a_model_warns_exactly_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSYNC_")}
    env.update(
        RAGSYNC_EMBED_MODEL_PATH=str(tmp_path / "no-model"),
        RAGSYNC_CONFIG=os.devnull,
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, "-m", "ragsync.cli", "demo", "--dir", str(tmp_path / "demo")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("Embedding model unavailable") == 1, done.stderr


def test_the_query_prefix_goes_before_questions_and_never_before_passages() -> None:
    """BGE and E5 were trained with an instruction before queries; passages must stay as indexed."""
    prefix = "Represent this sentence for searching relevant passages: "
    plain = FastEmbedder(MODEL_PATH)
    prefixed = load(MODEL_PATH, query_prefix=prefix)
    assert prefixed is not None and prefixed is not load(MODEL_PATH)  # a different choice, loaded apart
    question = "How do I undo the last commit?"
    assert np.allclose(prefixed.embed([question]), plain.embed([question]), atol=1e-5)
    assert np.allclose(prefixed.embed_query(question), plain.embed([prefix + question])[0], atol=1e-5)
    assert not np.allclose(prefixed.embed_query(question), plain.embed_query(question), atol=1e-3)
