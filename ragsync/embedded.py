"""The embedded profile's adapters: everything under RAGSYNC_HOME, no servers.

SQLite log, SQLite FTS5, qdrant-edge, in-process cache (generations in SQLite), deny set in-process
plus SQLite, extractive model. The cluster profile's are in ragsync/cluster.py.
"""

from __future__ import annotations

from typing import Any

from indexer.cache import InProcessCache
from indexer.deny import DenySet
from indexer.ports import Cache, DeletionAudit, DocStateStore, Embedder, LexicalIndex, VectorIndex
from indexer.propagation import PropagationLog
from ragsync.components import Components, build_embedder, field_weights, stamp_home_model
from ragsync.home import secure_home
from ragsync.home_lexical import LEXICAL_DB, home_engine, stamp_engine
from ragsync.settings import Settings
from streams.ports import EventLog

EVENTS_DB = "events.db"
"""The embedded log's file in the home (streams.sqlite_log); the owner watches it to wake its readers."""


class EmbeddedAdapters:
    """Everything under RAGSYNC_HOME: SQLite files and the qdrant-edge shard.

    The stores are opened for batched writes (`deferred`): the embedded worker flushes them once
    per applied batch, before it commits the batch's offsets. Doc states, the deletion audit and
    the cache generations share one connection to state.db, so one commit covers them.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.home
        secure_home(self.home)  # 0700, and every file the stores create in it 0600
        self._state: Any = None

    def _state_db(self) -> Any:
        from indexer.state import StateDb

        if self._state is None:
            self._state = StateDb(self.home / "state.db", deferred=True)
        return self._state

    def events(self) -> EventLog:
        from streams.sqlite_log import SqliteEventLog

        return SqliteEventLog(self.home / EVENTS_DB)

    def lexical(self) -> LexicalIndex:
        """The home's own engine (ragsync.home_lexical): a new home gets Tantivy, an existing one keeps
        the engine it was built with unless `lexical_engine` says otherwise."""
        from indexer.sqlite_fts import SqliteLexicalIndex

        engine = home_engine(self.home, self.settings.lexical_engine)
        kind = SqliteLexicalIndex
        if engine == "tantivy":
            from indexer.tantivy_lexical import TantivyLexicalIndex

            kind = TantivyLexicalIndex
        index = kind(
            self.home / LEXICAL_DB,
            field_weights(self.settings),
            deferred=True,
            analyzer=self.settings.lexical_analyzer,
        )
        stamp_engine(self.home, engine)
        return index

    def embedder(self) -> Embedder | None:
        embedder = build_embedder(self.settings)
        if embedder is not None:
            stamp_home_model(self.home, embedder.model_name)
        return embedder

    def vector(self, dim: int) -> VectorIndex:
        from indexer.qdrant_edge import EdgeVectorIndex

        return EdgeVectorIndex(self.home / "vectors", dim, sentences=self.settings.sentence_vectors)

    def cache(self) -> Cache:
        from indexer.state import SqliteGenerations

        return InProcessCache(generations=SqliteGenerations(self._state_db()))

    def docs(self) -> DocStateStore:
        from indexer.state import SqliteDocStates

        return SqliteDocStates(self._state_db())

    def audit(self) -> DeletionAudit:
        from indexer.state import SqliteDeletionAudit

        return SqliteDeletionAudit(self._state_db())

    def deny(self) -> DenySet:
        from indexer.deny import SqliteDenySet

        return SqliteDenySet(self.home / "deny.db")

    def propagation(self) -> PropagationLog:
        from indexer.propagation import SqlitePropagationLog

        return SqlitePropagationLog(self.home / "propagation.db")


def build_embedded(settings: Settings, *, with_embedder: bool = True) -> Components:
    return Components(settings, EmbeddedAdapters(settings), with_embedder=with_embedder)
