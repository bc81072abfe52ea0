"""The Qdrant server adapter's filters (indexer.qdrant_server): a document's points, validity at an
instant, and the permission filter in its two forms.

The permission filter's first condition says whose points and which entries. Two forms:
- `tenant` (a keyword index with `is_tenant=True`) and `acl` matching any of the asker's entries: two
  indexed conditions. At a selective ACL Qdrant takes the ACL index as the primary condition and checks
  the tenant point by point over its candidates (bench/README, "Tenth round": 56 ms against 23 ms for
  the ACL clause alone, 1M passages, 1 % filter).
- `tacl` (indexer.payload.TENANT_ACL) matching any of the asker's tenant-qualified keys: one indexed
  condition for both. Every key of a point carries the point's own tenant (the key is built from the
  tenant beside the entries, by indexer.payload.acl_payload), so a key of the asker's tenant admits only
  that tenant's points. Used only on a collection marked as holding the keys on every point
  (indexer.qdrant_acl_key): on a point written before the keys existed it matches nothing.
"""

from __future__ import annotations

from qdrant_client import models

from indexer.payload import TENANT_ACL, iso, tenant_acl_keys
from schemas._time import to_epoch_ms
from schemas.principal import AccessFilter, since_key


def match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def open_at(at: str) -> models.Filter:
    """No `superseded_on` (missing or null), or one strictly after the instant."""
    return models.Filter(
        should=[
            models.IsEmptyCondition(is_empty=models.PayloadField(key="superseded_on")),
            models.FieldCondition(key="superseded_on", range=models.DatetimeRange(gt=at)),
        ]
    )


def doc_filter(tenant: str, doc_id: str, *extra: models.Condition) -> models.Filter:
    return models.Filter(must=[match("tenant", tenant), match("doc_id", doc_id), *extra])


def access_filter(access: AccessFilter, *, instants: bool = True, keyed: bool = False) -> models.Filter:
    """Tenant, validity and an entry granted as of the instant (schemas.principal.grants_allow): an
    entry matches unless its grant instant (`acl_since.<key>`, absent: from the beginning) is later.

    `keyed`: tenant and entries as one condition on `tacl` (the module's docstring); only for a
    collection whose every point holds its keys.

    `instants=False` leaves the grant instants out, so every condition left is on an indexed field:
    the instants are keyed by entry (no payload index can hold them) and Qdrant reads each candidate
    point's payload to check them (`granted_as_of` checks them on the hits instead: QdrantVectorIndex.search)."""
    as_of = iso(access.as_of)
    keys = models.MatchAny(any=tenant_acl_keys(access.tenant, access.entries))
    who: list[models.Condition] = (
        [models.FieldCondition(key=TENANT_ACL, match=keys)]
        if keyed
        else [
            match("tenant", access.tenant),
            models.FieldCondition(key="acl", match=models.MatchAny(any=list(access.entries))),
        ]
    )
    must: list[models.Condition] = [
        *who,
        models.FieldCondition(key="effective_from", range=models.DatetimeRange(lte=as_of)),
        open_at(as_of),
    ]
    if instants:
        as_of_ms = float(to_epoch_ms(access.as_of))
        granted: list[models.Condition] = [
            models.Filter(
                must=[match("acl", entry)],
                must_not=[models.FieldCondition(key=f"acl_since.{since_key(entry)}", range=models.Range(gt=as_of_ms))],
            )
            for entry in access.entries
        ]
        must.append(models.Filter(should=granted))
    return models.Filter(must=must)
