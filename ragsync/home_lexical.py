"""Which lexical engine an embedded home's passages are indexed with, and which one a home is given.

Both engines keep the text, the grants and the exact access check in SQLite (`lexical.db`); they
differ in the candidate stage: FTS5 tables inside the file, or Tantivy shards beside it
(`lexical.db.tantivy`, indexer.tantivy_lexical). Opening a home with the other engine rebuilds that
engine's index from SQLite and removes the first one's (minutes at a million passages), so a home
never changes engine because a default changed:

- a home stamped (`lexical-engine.json`) keeps the engine it names;
- a home with a lexical file and no stamp predates stamps: the engine its files show
  (indexer.sqlite_fts_schema.text_index_in; FTS5 was the default then);
- a new home (no lexical file) gets NEW_HOME_ENGINE, Tantivy: it answers bm25 at a million passages
  in 9-18 ms CPU p95 against FTS5's 22-176 ms, and only it meets the fused latency goals (<= 20 ms at
  100k, <= 60 ms at 1M), with the same recall@10 on the five evaluation sets; it costs 0.002 of mean
  fused MRR and one grounded answer in 150 (bench/README.md, "Eighth round"), within a set's noise.
  Existing homes keep their engine.

`lexical_engine` set explicitly (settings file or RAGSYNC_LEXICAL_ENGINE) wins: a home recorded with
the other engine is switched, with a warning naming both, and stamped with the new one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Literal

from indexer.sqlite_fts_schema import text_index_in
from schemas.errors import StoreUnavailable

log = logging.getLogger(__name__)

LexicalEngine = Literal["fts5", "tantivy"]
ENGINES: dict[str, LexicalEngine] = {"fts5": "fts5", "tantivy": "tantivy"}
LEXICAL_DB = "lexical.db"
"""The embedded lexical store's SQLite file in the home (both engines)."""
LEXICAL_ENGINE_STAMP = "lexical-engine.json"
NEW_HOME_ENGINE: LexicalEngine = "tantivy"
"""The engine a home without a lexical file is given when `lexical_engine` is not set."""


def recorded_engine(home: Path) -> LexicalEngine | None:
    """The engine the home's lexical file was built with: its stamp, else what the file and its side
    index show (a home from before stamps); None for a home without a lexical file."""
    stamp = home / LEXICAL_ENGINE_STAMP
    try:
        recorded = json.loads(stamp.read_text()).get("engine")
    except FileNotFoundError:
        return text_index_in(home / LEXICAL_DB)  # a home from before stamps, or a new one (None)
    except (OSError, ValueError, AttributeError) as exc:
        raise StoreUnavailable(f"{stamp} is unreadable ({exc}): restore it, or set lexical_engine") from exc
    engine = ENGINES.get(recorded) if isinstance(recorded, str) else None
    if engine is not None:
        return engine
    raise StoreUnavailable(f"{stamp} names no known lexical engine ({recorded!r}): restore it, or set lexical_engine")


def home_engine(home: Path, configured: LexicalEngine | None) -> LexicalEngine:
    """The engine to open the home's lexical store with: the configured one, else the home's own, else
    NEW_HOME_ENGINE. Warns when a configured engine switches a home built with the other."""
    if configured is None:
        return recorded_engine(home) or NEW_HOME_ENGINE
    try:
        recorded = recorded_engine(home)
    except StoreUnavailable:  # a broken stamp: the configured engine is written over it
        recorded = None
    if recorded is not None and recorded != configured:
        log.warning(
            "%s was indexed with the lexical engine %s; lexical_engine = %s rebuilds its lexical index from"
            " the passages SQLite holds and removes the %s one (unset lexical_engine to keep %s)",
            home,
            recorded,
            configured,
            recorded,
            recorded,
        )
    return configured


def stamp_engine(home: Path, engine: LexicalEngine) -> None:
    """Record the engine the home's lexical store was opened with (once it opened), if it is not recorded."""
    stamp = home / LEXICAL_ENGINE_STAMP
    try:
        if json.loads(stamp.read_text()).get("engine") == engine:
            return
    except (OSError, ValueError, AttributeError):
        pass  # missing, or unreadable and overruled by a configured engine: written now
    partial = stamp.with_suffix(".partial")
    partial.write_text(json.dumps({"engine": engine}) + "\n")
    os.replace(partial, stamp)
