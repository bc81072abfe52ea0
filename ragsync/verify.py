"""`ragsync verify`: reconcile every store against doc state, and doc state against connector state.

The write path promises that a document's passages, versions and ACLs are the same in every store,
that a deletion leaves nothing, and that what a connector published is what the indexer applied.
This checks each promise per document, from the stores' own contents (`inventory`, the entries the
permission filters match), never from a search:

- doc state vs each store: a live document's newest version holds exactly the passages doc state
  lists, no store holds a version newer than the applied content, and every passage of every
  version carries the document's current ACL (an old version with the old ACL would still answer
  `--as-of` for readers who lost access); a tombstoned document has no passage left anywhere; the
  vector store holds the same passages as the lexical store.
- connector state vs doc state: for every source this home's connectors know, the version, ACL and
  deletion a connector published are the ones applied; a live document no source publishes any
  more is an orphan.

A difference that the event backlog can still explain (events published, not yet applied) is
reported as pending, not drift: verify after the workers caught up. `reconcile` is pure; `verify`
gathers the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from connectors.state import DocRecord
from indexer.ports import DocState, StoredPassage
from schemas._time import to_epoch_ms
from schemas.events import qualify_doc_id, split_doc_id

PENDING_KINDS = frozenset({"behind", "missing"})
"""Drift kinds a backlog of unapplied events explains."""


@dataclass(frozen=True, slots=True)
class Finding:
    tenant: str
    doc_id: str
    kind: str  # acl | passages | version | tombstone | vectors | behind | missing | ahead | orphan | deletion
    store: str | None
    detail: str


@dataclass
class VerifyReport:
    documents: int = 0
    tombstones: int = 0
    passages: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    backlog: dict[str, int] = field(default_factory=dict)
    drift: list[Finding] = field(default_factory=list)
    pending: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.drift and not self.pending

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "documents": self.documents,
            "tombstones": self.tombstones,
            "passages": self.passages,
            "sources": self.sources,
            "backlog": self.backlog,
            "drift": [asdict(f) for f in self.drift],
            "pending": [asdict(f) for f in self.pending],
        }


def reconcile_stores(state: DocState, held: Mapping[str, Sequence[StoredPassage]]) -> list[Finding]:
    """What each store holds for one document against its doc state (pure)."""
    out: list[Finding] = []

    def found(kind: str, store: str | None, detail: str) -> None:
        out.append(Finding(state.tenant, state.doc_id, kind, store, detail))

    if state.deleted:
        for store, passages in held.items():
            if passages:
                found("tombstone", store, f"deleted at v{state.applied_version} but {len(passages)} passages remain")
        return out
    acl = tuple(sorted(set(state.acl)))
    # The grant instants the filters compare (states written before grants existed record none).
    since = tuple((e, to_epoch_ms(t)) for e, t in sorted(state.acl_since.items()) if e in acl)
    expected = set(state.passage_ids)
    for store, passages in held.items():
        dead = [p for p in passages if state.tombstone_version is not None and p.version <= state.tombstone_version]
        if dead:
            found("tombstone", store, f"{len(dead)} passages of versions deleted at v{state.tombstone_version} remain")
        wrong_acl = [p for p in passages if p.acl != acl or (state.acl_since and p.since != since)]
        if wrong_acl:
            first = wrong_acl[0]
            found(
                "acl",
                store,
                f"{len(wrong_acl)} passages carry another ACL or grant instants than {list(acl)}"
                f" (e.g. {first.passage_id}: {list(first.acl)})",
            )
        newer = [p for p in passages if state.content_version is None or p.version > state.content_version]
        if newer:
            found("version", store, f"{len(newer)} passages of versions never applied (e.g. {newer[0].passage_id})")
        if state.content_version is not None:
            latest = {p.passage_id for p in passages if p.version == state.content_version}
            missing, extra = sorted(expected - latest), sorted(latest - expected)
            if missing or extra:
                found(
                    "passages",
                    store,
                    f"v{state.content_version}: {len(missing)} missing, {len(extra)} unexpected"
                    f" (e.g. {(missing or extra)[0]})",
                )
    stores = list(held)
    if len(stores) > 1:
        first_ids = {p.passage_id for p in held[stores[0]]}
        for other in stores[1:]:
            ids = {p.passage_id for p in held[other]}
            if ids != first_ids:
                kind = "vectors" if not ids else "passages"
                n_absent, n_extra = len(first_ids - ids), len(ids - first_ids)
                found(kind, other, f"{n_absent} passages of {stores[0]} absent, {n_extra} extra")
    return out


def reconcile_source(
    source: str, records: Sequence[DocRecord], states: Mapping[tuple[str, str], DocState]
) -> list[Finding]:
    """What one source published (its connector state) against what the indexer applied (pure)."""
    out: list[Finding] = []
    published: set[tuple[str, str]] = set()
    for record in records:
        doc_id = qualify_doc_id(source, record.doc_id)
        published.add((record.tenant, doc_id))
        state = states.get((record.tenant, doc_id))

        def found(kind: str, detail: str, tenant: str = record.tenant, doc: str = doc_id) -> None:
            out.append(Finding(tenant, doc, kind, None, detail))

        if state is None:
            if not record.deleted:
                found("missing", f"published v{record.version}, never applied")
            continue
        if state.applied_version < record.version:
            found("behind", f"published v{record.version}, applied v{state.applied_version}")
        elif state.applied_version > record.version:
            found("ahead", f"applied v{state.applied_version}, but {source} published only up to v{record.version}")
        elif record.deleted != state.deleted:
            kind = "deletion" if record.deleted else "ahead"
            found(kind, f"{source} says deleted={record.deleted}, doc state says deleted={state.deleted}")
        elif not record.deleted and tuple(sorted(record.acl)) != tuple(sorted(state.acl)):
            found("acl", f"{source} published ACL {list(record.acl)}, applied {list(state.acl)}")
    for (tenant, doc_id), state in states.items():
        try:
            owner, _ = split_doc_id(doc_id)
        except ValueError:
            continue
        if owner == source and not state.deleted and (tenant, doc_id) not in published:
            out.append(Finding(tenant, doc_id, "orphan", None, f"live, but {source} publishes no such document"))
    return out


def indexer_group(settings: Any) -> str:
    """The indexer's consumer group: the embedded worker's, or the Faust app id of the deployment."""
    return f"{settings.kafka_topic_prefix}indexer" if settings.profile == "cluster" else "ragsync-indexer"


def verify(components: Any, *, tenant: str | None = None) -> VerifyReport:
    """Gather doc state, every store's inventory, connector state and the backlog; reconcile them."""
    from connectors.state import ConnectorState
    from streams.ports import EVENT_TOPICS

    report = VerifyReport()
    settings = components.settings
    group = indexer_group(settings)
    report.backlog = {topic: components.events.lag(topic, group) for topic in EVENT_TOPICS}
    states = [s for s in components.docs.states() if tenant is None or s.tenant == tenant]
    by_key = {(s.tenant, s.doc_id): s for s in states}
    stores: list[Any] = [components.lexical]
    if components.vector is not None:
        stores.append(components.vector)
    findings: list[Finding] = []
    for state in states:
        held = {store.name: store.inventory(state.tenant, state.doc_id) for store in stores}
        for name, passages in held.items():
            report.passages[name] = report.passages.get(name, 0) + len(passages)
        if state.deleted:
            report.tombstones += 1
        else:
            report.documents += 1
        findings.extend(reconcile_stores(state, held))
    connectors = ConnectorState(settings.home / "connectors.db")
    try:
        report.sources = connectors.sources()
        for source in report.sources:
            records = [r for r in connectors.records(source) if tenant is None or r.tenant == tenant]
            findings.extend(reconcile_source(source, records, by_key))
    finally:
        connectors.close()
    waiting = sum(report.backlog.values()) > 0
    for finding in findings:
        (report.pending if waiting and finding.kind in PENDING_KINDS else report.drift).append(finding)
    return report
