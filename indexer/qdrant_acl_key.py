"""The tenant-qualified ACL keys of a Qdrant collection (indexer.payload.TENANT_ACL): the collection's
marker, and the migration of a collection written before the keys existed.

The Qdrant server adapter searches with the keyed permission filter (indexer.qdrant_filters) only on a
collection carrying the marker, read when it opens the collection. A collection it creates is marked at
creation (it is empty and every write of this code carries the keys); an older collection keeps the
tenant + ACL filter until `migrate` has given every point its keys and then marked it.

Why the migration cannot widen access. Each write sets `tacl` by filter, atomically with the check
(Qdrant applies a shard's updates one at a time): on the points of one tenant whose `acl` holds every
entry of a set S and exactly |S| values, it writes the keys of (tenant, S), so a point never receives a
key for another tenant or for an entry its `acl` lacks at that moment, whatever a concurrent writer does.
An ACL change of this code rewrites `acl` and `tacl` in one payload write (indexer.payload.acl_payload),
so one after the migration's write replaces its keys. The marker is written only after a full scan found
every point's keys equal to those of its tenant and `acl` (a point found otherwise is fixed by the same
checked write, and the scan repeats).

What it needs: every writer of the collection runs this code (an older writer changes `acl` without
`tacl`). Run it once the workers are upgraded.

What it costs on the server: Qdrant moves every point it changes out of an optimized (indexed) segment
into an appendable one (copy on write), so the optimizer indexes the whole collection again afterwards;
until then searches of a broad filter scan more vectors. Measured: bench/README "Tenant-qualified ACL keys".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient, models

from indexer.payload import TENANT_ACL, tenant_acl_keys
from indexer.qdrant_filters import match

MARKER = "ragsync_tenant_acl_key"
"""The collection's metadata key: 1 when every point holds its `tacl` keys."""
MARKER_VERSION = 1


def marked(client: QdrantClient, collection: str) -> bool:
    metadata = client.get_collection(collection).config.metadata or {}
    return metadata.get(MARKER) == MARKER_VERSION


def exactly(tenant: str, acl: Sequence[str], *extra: models.Condition) -> models.Filter:
    """The tenant's points whose `acl` holds every entry of `acl` and as many values (the same list, when
    its entries are distinct; never one missing an entry of it)."""
    must: list[models.Condition] = [match("tenant", tenant)]
    must += [match("acl", e) for e in sorted(set(acl))]
    must.append(models.FieldCondition(key="acl", values_count=models.ValuesCount(gte=len(acl), lte=len(acl))))
    return models.Filter(must=[*must, *extra])


def set_keys(client: QdrantClient, collection: str, tenant: str, acl: Sequence[str], *extra: models.Condition) -> None:
    """Give the points `exactly(tenant, acl)` admits (and `extra`) the keys of (tenant, acl), in one checked
    write. An empty `acl` is left alone: no key to give, and `exactly` cannot single such points out."""
    if not acl:
        return
    flt = exactly(tenant, acl, *extra)
    client.set_payload(collection, payload={TENANT_ACL: tenant_acl_keys(tenant, acl)}, points=flt, wait=True)


def _no_keys() -> models.IsEmptyCondition:
    return models.IsEmptyCondition(is_empty=models.PayloadField(key=TENANT_ACL))


def _pending() -> models.Filter:
    """Points with ACL entries and no keys."""
    return models.Filter(
        must=[_no_keys()],
        must_not=[models.IsEmptyCondition(is_empty=models.PayloadField(key="acl"))],
    )


@dataclass
class Migration:
    points: int = 0
    """Points in the collection when the scan began."""
    by_filter: int = 0
    """Checked writes, one per (tenant, ACL) found without keys."""
    fixed: int = 0
    """Points the full scan found with keys other than their tenant and ACL's, written one by one."""
    scans: int = 0
    marked: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _acl(payload: dict[str, Any]) -> list[str]:
    value = payload.get("acl") or []
    return [str(e) for e in value] if isinstance(value, list) else [str(value)]


def migrate(
    client: QdrantClient,
    collection: str,
    *,
    page: int = 1000,
    progress: Callable[[str, int, int], None] | None = None,
    max_scans: int = 3,
) -> Migration:
    """Give every point its keys, check all of them, then mark the collection (module docstring).
    `progress(phase, done, total)` after each page. Marks nothing unless a full scan found nothing to fix."""
    report = Migration(points=int(client.count(collection, exact=True).count))
    schema = client.get_collection(collection).payload_schema
    if TENANT_ACL not in schema:
        client.create_payload_index(collection, TENANT_ACL, field_schema=models.PayloadSchemaType.KEYWORD, wait=True)
    # 1. By (tenant, ACL): the points still without keys, a page at a time; each combination is one write.
    done: set[tuple[str, tuple[str, ...]]] = set()
    while True:
        points, _ = client.scroll(
            collection, scroll_filter=_pending(), limit=page, with_payload=["tenant", "acl"], with_vectors=False
        )
        combos = {(str((p.payload or {}).get("tenant")), tuple(_acl(dict(p.payload or {})))) for p in points}
        new = combos - done
        if not new:  # nothing left, or only points the combination writes did not admit: the scan fixes them
            break
        for tenant, acl in sorted(new):
            set_keys(client, collection, tenant, acl, _no_keys())
            report.by_filter += 1
        done |= new
        if progress:
            progress("by ACL", report.by_filter, len(done))
    # 2. Every point, checked; one checked write per point found wrong; the marker once a scan found none.
    for _ in range(max_scans):
        report.scans += 1
        wrong = 0
        seen = 0
        offset: models.ExtendedPointId | None = None
        while True:
            points, offset = client.scroll(
                collection,
                limit=page,
                offset=offset,
                with_payload=["tenant", "acl", TENANT_ACL],
                with_vectors=False,
            )
            for p in points:
                payload = dict(p.payload or {})
                owner, entries = str(payload.get("tenant")), _acl(payload)
                keys = payload.get(TENANT_ACL) or []
                if sorted(keys if isinstance(keys, list) else [keys]) != tenant_acl_keys(owner, entries):
                    wrong += 1
                    _fix(client, collection, p.id, owner, entries)
            seen += len(points)
            if progress:
                progress(f"check {report.scans}", seen, report.points)
            if offset is None or not points:
                break
        report.fixed += wrong
        if wrong == 0:
            client.update_collection(collection, metadata={MARKER: MARKER_VERSION})
            report.marked = True
            return report
    return report


def _fix(client: QdrantClient, collection: str, point: models.ExtendedPointId, tenant: str, acl: list[str]) -> None:
    """One point's keys, checked against its ACL as read; with no ACL, no keys (removing any it holds)."""
    here = models.HasIdCondition(has_id=[point])
    if acl:
        set_keys(client, collection, tenant, acl, here)
        return
    empty = models.Filter(
        must=[here, match("tenant", tenant), models.IsEmptyCondition(is_empty=models.PayloadField(key="acl"))]
    )
    client.set_payload(collection, payload={TENANT_ACL: []}, points=empty, wait=True)
