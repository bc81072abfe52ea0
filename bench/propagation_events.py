"""What both harnesses of bench/propagation.py share: the targets and backlog they publish, the
probe of one revocation or deletion, and the summary of its timings."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.propagation import percentile  # noqa: E402
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, make_event_id  # noqa: E402
from schemas.principal import Principal  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SERVED_EVERY = 5
RETRY_S = 0.05
"""A probe's first query RETRY_S after its event's publish, and again RETRY_S after each query that
still returned the document: the resolution of `effective` (plus the query's own time)."""
COSTS: dict[str, list[float]] = {}
"""Seconds each probe check took (the probe's own cost, reported beside the figures)."""
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH", ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx"))
if not (MODEL / "model.onnx").is_file():
    MODEL = Path("/work/shared/models/all-MiniLM-L6-v2-onnx")
TENANT = "bench"
SOURCE = "bench"
STAFF = Principal(tenant=TENANT, user="probe", groups=("staff",))
OPEN_ACL = ("group:staff",)
CLOSED_ACL = ("group:board",)


def word(kind: str, i: int) -> str:
    return f"probe{kind}{i:04d}qxq"


def upsert(doc_id: str, version: int, content: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, version, EventKind.UPSERT),
        kind=EventKind.UPSERT,
        tenant=TENANT,
        doc_id=doc_id,
        version=version,
        source=SOURCE,
        payload=UpsertPayload(
            title="",
            content=content,
            content_type="markdown",
            content_hash=f"{abs(hash(content)):016x}",
            acl=OPEN_ACL,
            source_url=doc_id,
        ),
    )


def revocation(doc_id: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, 2, EventKind.ACL),
        kind=EventKind.ACL,
        tenant=TENANT,
        doc_id=doc_id,
        version=2,
        source=SOURCE,
        payload=AclPayload(acl=CLOSED_ACL),
    )


def deletion(doc_id: str) -> Event:
    return Event(
        event_id=make_event_id(SOURCE, TENANT, doc_id, 2, EventKind.DELETE),
        kind=EventKind.DELETE,
        tenant=TENANT,
        doc_id=doc_id,
        version=2,
        source=SOURCE,
        payload=DeletePayload(reason="bench"),
    )


def target_doc(kind: str, i: int) -> str:
    return f"{SOURCE}:{kind}/target-{i:04d}.md"


def target_content(kind: str, i: int) -> str:
    return f"# Target {kind} {i}\n\nThis page names {word(kind, i)} once, for the probe to find it.\n"


def backlog_content(i: int) -> str:
    body = " ".join(f"Backlog page {i} line {n} talks about shipping, invoices and the night shift." for n in range(6))
    return f"# Backlog {i}\n\n{body}\n"


@dataclass
class Probe:
    kind: str  # "revocation" | "deletion"
    index: int
    doc_id: str
    event: Event
    published: float = 0.0  # monotonic
    seq: int = 0
    served: float | None = None
    """Embedded, every SERVED_EVERY-th probe: when serve's own answer (a traced ask) stopped citing it."""
    effective: float | None = None
    effective_query_began: float | None = None
    """When the query that first no longer returned the document was sent (effective is when it answered)."""
    first_query_began: float | None = None
    """When the probe's first query was sent (due RETRY_S after publish; later when every prober was busy)."""
    converged: float | None = None
    generation: int = 0
    ids: list[str] = field(default_factory=list)
    done: dict[str, float] = field(default_factory=dict)
    """Seconds from publish until each store or cache check first held."""


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 4),
        "p99": round(percentile(values, 99), 4),
        "max": round(max(values), 4) if values else 0.0,
    }
