"""What one evaluation runs against: the ports and settings of any profile, shared by the runner and the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.ports import DocStateStore, Embedder, LexicalIndex, VectorIndex
from query.ports import Model, Reranker
from query.retrieval import RetrievalSettings, Retriever
from query.worker import WorkerSettings

if TYPE_CHECKING:
    from ragsync.components import Components


@dataclass
class EvalContext:
    """The ports and settings one evaluation runs against (any profile)."""

    lexical: LexicalIndex
    vector: VectorIndex | None
    embedder: Embedder | None
    docs: DocStateStore
    model: Model
    retrieval: RetrievalSettings
    worker: WorkerSettings
    reranker: Reranker | None = None
    retriever: Retriever | None = None
    """The retriever to evaluate; None: one built from the ports and settings above (no result cache)."""

    @classmethod
    def from_components(cls, components: Components) -> EvalContext:
        base = components.query_worker()
        return cls(
            lexical=components.lexical,
            vector=components.vector,
            embedder=components.embedder,
            docs=components.docs,
            model=base.model,
            retrieval=base.retriever.settings,
            worker=base.settings,
            reranker=base.retriever.reranker,
        )

    @property
    def dense_enabled(self) -> bool:
        return self.vector is not None and self.embedder is not None
