"""What `ragsync status` shows, computed by whoever has the stores open: the owner (over its API) or
the `status` command itself when nobody owns the home."""

from __future__ import annotations

from typing import Any

from ragsync.home_lock import OwnerInfo
from ragsync.maintenance import dense_gap
from ragsync.sync_history import SyncHistory
from ragsync.wiring import Components
from streams.embedded_worker import GROUP
from streams.ports import EVENT_TOPICS


def owner_summary(owner: OwnerInfo | None) -> dict[str, Any] | None:
    if owner is None:
        return None
    return {"pid": owner.pid, "command": owner.command, "api": owner.api, "since": owner.since, "host": owner.host}


def home_status(components: Components, owner: OwnerInfo | None, *, stores: bool = True) -> dict[str, Any]:
    """Owner, backlog per topic, dead letters, documents and passages per tenant, last sync per source
    and dense retrieval's state. `stores=False` leaves out what needs the stores' owner (vectors)."""
    settings = components.settings
    events = components.events
    info: dict[str, Any] = {
        "profile": settings.profile,
        "home": str(settings.home.resolve()),
        "owner": owner_summary(owner),
        "backlog": {t: events.lag(t, GROUP) for t in EVENT_TOPICS},
    }
    info["dead_letters"] = events.dead_letters()
    lexical = components.lexical
    info["lexical"] = lexical.name
    documents = components.docs.counts_by_tenant()
    passages = lexical.counts_by_tenant()
    tenants: dict[str, dict[str, int]] = {
        tenant: {"documents": documents.get(tenant, 0), "passages": passages.get(tenant, 0)}
        for tenant in sorted({*documents, *passages})
    }
    embedder = components.embedder if stores else None
    vector = components.vector if stores else None
    if vector is not None:
        for tenant, row in tenants.items():
            row["vectors"] = vector.count(tenant)
    info["tenants"] = tenants
    history = SyncHistory(settings.home / "connectors.db")
    try:
        info["sources"] = history.last_runs()
    finally:
        history.close()
    dense: dict[str, Any] = {"enabled": embedder is not None, "model": embedder.model_name if embedder else None}
    if not stores:
        dense["enabled"] = None  # only the owner knows whether its model is loaded
    elif vector is not None:
        gap = dense_gap(components)
        if gap is not None:
            dense.update(passages=gap.passages, vectors=gap.vectors, missing=gap.missing, complete=gap.missing == 0)
        indexed = vector.indexed()
        if indexed is not None:
            dense["hnsw_indexed_points"] = indexed[1]
    else:  # no model loaded: dense retrieval is off, and whatever the vectors are, they are not searched
        dense.update(passages=sum(passages.values()), complete=False)
    info["dense"] = dense
    info["vector"] = vector.name if vector is not None else None
    info["embedding_model"] = dense["model"]
    return info
