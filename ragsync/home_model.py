"""Which embedding model a home's vectors were made with, and which one a home is given.

Vectors of two models (or of one model at two precisions, MiniLM and its int8 export) are not
comparable: a home whose model changed under it would rank questions embedded by one model against
passages embedded by the other, silently. So the first model to open a home stamps it
(`embedding-model.json`), any other is refused, and the default model is chosen per home:

- a home stamped with a model keeps that model (the full-precision MiniLM of homes built before the
  int8 default, from wherever it is found);
- a home with vectors but no stamp predates stamps, when the only default was the full-precision
  MiniLM: it is treated as stamped with it;
- a new home of the embedded profile gets the default, the int8 MiniLM, when it has been fetched
  (`ragsync model fetch all-minilm-l6-v2-q`; bench/README.md measures it), else the full-precision one.

The cluster profile has no home stamp (its vectors live in a shared Qdrant collection), so its default
stays the full-precision MiniLM; the int8 model is used there only when configured explicitly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from schemas.errors import StoreUnavailable

EMBEDDING_MODEL_STAMP = "embedding-model.json"
FULL_PRECISION = "sentence-transformers/all-MiniLM-L6-v2"
"""fastembed's name for MiniLM, and the identity of its full-precision vectors (the previous default)."""
DEFAULT_INT8_KEY = "all-minilm-l6-v2-q"
"""The catalogue entry (ragsync.model_fetch) a new embedded home uses by default when it is fetched."""
VECTORS_DIR = "vectors"
"""The embedded profile's vector store folder: a home that has one holds vectors."""


def recorded_model(home: Path) -> str | None:
    """The model the home's vectors were made with: its stamp, the full-precision MiniLM for a home
    with vectors and no stamp (it predates stamps), None for a home without vectors."""
    stamp = home / EMBEDDING_MODEL_STAMP
    try:
        recorded = json.loads(stamp.read_text()).get("model")
    except FileNotFoundError:
        return FULL_PRECISION if (home / VECTORS_DIR).exists() else None
    except (OSError, ValueError, AttributeError) as exc:
        raise StoreUnavailable(f"{stamp} is unreadable ({exc}): restore it or rebuild the home") from exc
    if not isinstance(recorded, str) or not recorded:
        raise StoreUnavailable(f"{stamp} names no model: restore it or rebuild the home")
    return recorded


def default_variant_path(home: Path, profile: str) -> Path | None:
    """The fetched int8 MiniLM when this home should use it with nothing configured, else None (the
    full-precision model is looked for as before). An unreadable stamp is None here and refused at open."""
    from ragsync.model_fetch import CATALOG, default_dir, fetched

    try:
        recorded = recorded_model(home)
    except StoreUnavailable:
        return None
    model = CATALOG[DEFAULT_INT8_KEY]
    wanted = recorded == f"{FULL_PRECISION}#{model.variant}" or (recorded is None and profile == "embedded")
    dest = default_dir(model.key)
    return dest if wanted and fetched(model, dest) else None


def _how_to_keep(recorded: str) -> str:
    """What makes the home's own model available again, or how to re-embed into a new home."""
    from ragsync.model_fetch import CATALOG

    for model in CATALOG.values():
        if model.variant and recorded == f"{model.fastembed_name}#{model.variant}":
            return (
                f"`ragsync model fetch {model.key}` (then found with nothing set) or set embed_model_path to it;"
                " or re-embed into a new home: RAGSYNC_HOME=<new home> ragsync sync <sources>"
            )
    return (
        f"configure {recorded!r} again (unset embed_model_path, or set embed_model_path / embed_model_name to it);"
        " or re-embed into a new home: RAGSYNC_HOME=<new home> ragsync sync <sources>"
    )


def stamp_home_model(home: Path, model: str) -> None:
    """Refuse a home whose vectors another embedding model made; stamp a home that has no stamp yet."""
    recorded = recorded_model(home)
    stamp = home / EMBEDDING_MODEL_STAMP
    if recorded is not None and recorded != model:
        raise StoreUnavailable(
            f"the home {home} holds vectors of the embedding model {recorded!r}, not of the configured {model!r}:"
            f" {_how_to_keep(recorded)}"
        )
    if stamp.exists():
        return
    home.mkdir(parents=True, exist_ok=True)
    partial = stamp.with_suffix(".partial")
    partial.write_text(json.dumps({"model": model}) + "\n")
    os.replace(partial, stamp)
