"""Profile wiring: which adapters serve the ports, the composition root every command starts from.

embedded: SQLite log, SQLite FTS5, qdrant-edge, in-process cache (generations in SQLite), deny
          set in-process plus SQLite, extractive model; everything under RAGSYNC_HOME, no servers
          (ragsync/embedded.py).
cluster:  Kafka, Elasticsearch, Qdrant, Redis, Anthropic (ragsync/cluster.py).

`Components` (ragsync/components.py) opens each port's adapter on first use. The names below that
moved out of this module (issue 21) are re-exported, so `from ragsync.wiring import ...` keeps working.
"""

from __future__ import annotations

from ragsync.cluster import build_cluster
from ragsync.components import AdapterFactory as AdapterFactory
from ragsync.components import Components as Components
from ragsync.components import anthropic_model as anthropic_model
from ragsync.components import build_embedder as build_embedder
from ragsync.components import field_weights as field_weights
from ragsync.embedded import EmbeddedAdapters as EmbeddedAdapters
from ragsync.embedded import build_embedded as build_embedded
from ragsync.settings import Settings
from ragsync.tokens import token_rules as token_rules
from ragsync.tokens import token_signer as token_signer
from ragsync.tokens import token_verifier as token_verifier


def build(settings: Settings, *, with_embedder: bool = True) -> Components:
    if settings.profile == "cluster":
        return build_cluster(settings, with_embedder=with_embedder)
    return build_embedded(settings, with_embedder=with_embedder)
