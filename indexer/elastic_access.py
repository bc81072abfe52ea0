"""The writes of the Elasticsearch adapter's access round (indexer.elastic): ACL changes and deletions
of documents, by `_id`, with no search inside the round.

Why: the adapter's one access writer (indexer.combine) was busy back to back on a loaded machine, and
a third of each round was the search that listed the passages of the documents whose ACL changed
(bench/README.md "Thirteenth round"). Each caller now lists its own document's passages before it
submits (in its own applier thread, so the listings of concurrent appliers run side by side instead
of one after the other inside the writer), and the round is one `_bulk` of updates and deletes by
`_id`, refreshed once.

Fail closed: a listing made before the round can miss a passage the round's own search would have
found: one written between the caller's listing and the round by a writer that does not hold the
document's key (another worker during a rebalance, a crashed attempt's redelivery on another worker).
So the caller, after its write returned, lists the document's passages that are not among those it
wrote (`ElasticLexicalIndex._settle`); any it finds are written in another round, until none is left.
That check runs after the round, so every passage the round's search could have seen is either in the
first listing or seen by the check: a change never reaches fewer passages than with the search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from indexer.payload import iso, since_text


@dataclass(frozen=True)
class AclWrite:
    tenant: str
    doc_id: str
    ids: tuple[str, ...]
    """The `_id`s of the passages to update (every version of the document its caller listed)."""
    acl: tuple[str, ...]
    since: dict[str, datetime]


@dataclass(frozen=True)
class DocDelete:
    tenant: str
    doc_id: str
    ids: tuple[str, ...]
    """The `_id`s of the passages to delete."""


AccessWrite = AclWrite | DocDelete


def acl_doc(write: AclWrite) -> dict[str, Any]:
    """The partial document an ACL change writes to each passage: entries and their grant instants."""
    return {
        "acl": list(write.acl),
        "acl_since": since_text(write.since),
        "acl_entries_since": {e: iso(t) for e, t in sorted(write.since.items())},
    }


def round_ops(
    alias: Callable[[str], str], writes: Sequence[AccessWrite]
) -> tuple[list[dict[str, Any]], dict[str, list[AclWrite]]]:
    """The `_bulk` operations of one round, and which writes update each `_id` (to retry a conflict).

    Two tenants may hold the same `_id` (passage IDs name the document, not the tenant), so an `_id`
    maps to every update of it in the round; retrying both on a conflict is harmless (idempotent). Pure."""
    ops: list[dict[str, Any]] = []
    owners: dict[str, list[AclWrite]] = {}
    for w in writes:
        index = alias(w.tenant)
        if isinstance(w, DocDelete):
            ops.extend({"delete": {"_index": index, "_id": i}} for i in w.ids)
            continue
        doc = acl_doc(w)
        for i in w.ids:
            owners.setdefault(i, []).append(w)
            ops.append({"update": {"_index": index, "_id": i, "retry_on_conflict": 3}})
            ops.append({"doc": doc})
    return ops, owners


def conflicted(owners: dict[str, list[AclWrite]], conflicts: Sequence[dict[str, Any]]) -> list[AccessWrite]:
    """The ACL writes to make again after a round: each with only its `_id`s that still conflicted. Pure."""
    again: dict[int, tuple[AclWrite, list[str]]] = {}
    for conflict in conflicts:
        for w in owners[conflict["_id"]]:  # only updates conflict: a delete of a gone passage is a 404
            again.setdefault(id(w), (w, []))[1].append(conflict["_id"])
    return [replace(w, ids=tuple(dict.fromkeys(ids))) for w, ids in again.values()]
