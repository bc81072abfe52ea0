"""The audit trail's hash chain: each record carries the hash of the one before it. Pure functions.

A record's hash is sha256 over its sequence number, kind, body and the previous record's hash, in
one canonical JSON form (sorted keys, no whitespace), so editing any field of any record, removing
a record from the middle, or reordering records breaks every later link; removing records from the
end is caught by the chain head kept beside the records (and, against someone who can rewrite the
head as well, by an anchor: a `seq:hash` an auditor noted earlier, see `ragsync audit verify
--anchor`). Bodies hold IDs, versions, instants and counts, never document text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64
"""The previous hash of the first record."""


@dataclass(frozen=True, slots=True)
class ChainRecord:
    seq: int
    kind: str
    body: Mapping[str, Any]
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class ChainProblem:
    seq: int
    problem: str


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def link_hash(seq: int, kind: str, body: Mapping[str, Any], prev_hash: str) -> str:
    material = canonical({"seq": seq, "kind": kind, "body": body, "prev": prev_hash})
    return hashlib.sha256(material.encode()).hexdigest()


def make_record(seq: int, kind: str, body: Mapping[str, Any], prev_hash: str) -> ChainRecord:
    # Normalise through JSON so the hash covers exactly what a store gives back.
    normal: dict[str, Any] = json.loads(canonical(dict(body)))
    return ChainRecord(seq, kind, normal, prev_hash, link_hash(seq, kind, normal, prev_hash))


def verify(
    records: Sequence[ChainRecord], head: tuple[int, str] | None = None, anchors: Sequence[tuple[int, str]] = ()
) -> list[ChainProblem]:
    """Every problem found, first to last; an empty list means the chain is intact.

    `records` in ascending seq order, as stored; `head` the (seq, hash) kept beside them.
    """
    problems: list[ChainProblem] = []
    expected_prev = GENESIS
    expected_seq = 1
    by_seq: dict[int, ChainRecord] = {}
    for record in records:
        by_seq[record.seq] = record
        if record.seq != expected_seq:
            what = "missing" if record.seq > expected_seq else "out of order or duplicated"
            problems.append(ChainProblem(record.seq, f"record(s) {what} before seq {record.seq}"))
        if record.prev_hash != expected_prev:
            problems.append(
                ChainProblem(record.seq, "previous-hash link broken (a record before it was changed or removed)")
            )
        if link_hash(record.seq, record.kind, record.body, record.prev_hash) != record.hash:
            problems.append(ChainProblem(record.seq, "record edited: its hash does not match its content"))
        expected_prev = record.hash
        expected_seq = record.seq + 1
    last = records[-1] if records else None
    if head is not None:
        head_seq, head_hash = head
        if last is None or last.seq != head_seq or last.hash != head_hash:
            tip = f"{last.seq}:{last.hash[:12]}" if last else "no records"
            problems.append(
                ChainProblem(head_seq, f"chain head {head_seq}:{head_hash[:12]} does not match the last record ({tip})")
            )
    for seq, digest in anchors:
        found = by_seq.get(seq)
        if found is None:
            problems.append(ChainProblem(seq, "anchored record is missing"))
        elif found.hash != digest:
            problems.append(ChainProblem(seq, "anchored record's hash differs from the anchor"))
    return problems
