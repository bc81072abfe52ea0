"""The deletion audit in Elasticsearch (DeletionAudit): append-only and hash-chained like the SQLite
one (indexer.audit_chain), so an edited or removed record is detectable. Records are created, never
updated, and each carries the hash of the one before it. How the index is made and why no write
waits for a refresh: indexer.elastic_state."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ConflictError, NotFoundError

from indexer.audit_chain import GENESIS, ChainRecord, canonical, make_record
from indexer.audit_records import KIND_DELETION, KIND_PURGE, deletion_body, deletion_of, purge_body, purge_of
from indexer.elastic_audit_blocks import BLOCK_FIELDS, blocks, chain_document, links_of
from indexer.elastic_client import check_prefix, connect
from indexer.elastic_state import PAGE_SIZE, STORED_ONLY, create_index
from indexer.ports import DeletionRecord, PurgeRecord
from schemas._time import from_epoch_ms


@dataclass
class _Waiting:
    """An append waiting for its link (see ElasticDeletionAudit._append)."""

    kind: str
    body: dict[str, Any]
    fields: dict[str, str | None]
    done: threading.Event = field(default_factory=threading.Event)
    seq: int = 0
    error: Exception | None = None


class ElasticDeletionAudit:
    """DeletionAudit in Elasticsearch, hash-chained like the SQLite one (indexer.audit_chain).

    `<prefix>-audit-chain` holds one create-only document per record, `_id` = the zero-padded
    sequence number, so two workers appending at once race for the same `_id`: the loser gets a
    409, reads the winner's record (a real-time GET, no refresh) and links after it. That makes the
    chain one total order across every worker without a lock. `<prefix>-audit-meta` holds the
    chain head (`head`: the last seq and hash, only ever moved forward, so removing records from
    the end is detected too) and a marker per recorded event (`event:<id>`: a redelivered deletion
    adds nothing). The marker is written after the chain record, so a crash in between can at
    worst record an event twice, never lose it. There is no update or delete method.

    Blocks: the writer thread creates the links queued meanwhile with ONE create, a block document
    whose `_id` is its first seq and whose `links` hold consecutive records (`last_seq` the last),
    each still hash-linked to the one before. A block is one document, so it takes its numbers all
    or nothing: a `_bulk` of one create per record would not, since a create after a lost race
    would succeed and name a predecessor that was never stored, breaking the chain for good. A
    lone link keeps the one-record layout. Readers flatten blocks (`chain`, `records`, `purges`),
    so `verify` sees the same records either way, and editing a record inside a block is caught.
    """

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-audit-chain"
        self.meta_index = f"{self.prefix}-audit-meta"
        self._lock = threading.Lock()
        """The chain lock: held for the create of a link only."""
        self._tip: tuple[int, str] | None = None
        self._head_lock = threading.Lock()
        self._pending = threading.Condition()
        """Guards the queue of appends for the writer thread (`_write_links`) and wakes it."""
        self._queue: list[_Waiting] = []
        self._writer: threading.Thread | None = None
        self._closed = False
        self._head_written = 0
        self._head_version: tuple[int, int] | None = None
        """The head's (seq_no, primary_term) as this process last wrote or read it (`_advance_head`)."""
        """The highest seq this process moved the head to (or found it at)."""
        create_index(
            self._es,
            self.index,
            self.prefix,
            "audit-chain",
            {
                "seq": {"type": "long"},
                "kind": {"type": "keyword"},
                "event_id": {"type": "keyword"},
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "store": {"type": "keyword"},
                "body": STORED_ONLY,
                "prev_hash": STORED_ONLY,
                "hash": STORED_ONLY,
                **BLOCK_FIELDS,
            },
        )
        # Indexes made before blocks lack their two fields (the mapping is strict): adding is idempotent.
        self._es.indices.put_mapping(index=self.index, properties=BLOCK_FIELDS)
        create_index(
            self._es, self.meta_index, self.prefix, "audit-meta", {"seq": {"type": "long"}, "hash": STORED_ONLY}
        )
        self._chain_unchained()

    def _chain_unchained(self) -> None:
        """Clusters written before the chain kept `<prefix>-deletion-audit` documents: chain them once.

        Idempotent (the event markers skip what is chained already), so several workers starting at
        once are harmless; the old index is left in place for the operator to delete.
        """
        old = f"{self.prefix}-deletion-audit"
        if not self._es.indices.exists(index=old) or self._es.exists(index=self.meta_index, id="migrated"):
            return
        response = self._es.search(index=old, size=10_000, query={"match_all": {}})
        sources = sorted((h["_source"] for h in response["hits"]["hits"]), key=lambda d: int(d["received_at"]))
        for src in sources:
            self.append(
                DeletionRecord(
                    event_id=src["event_id"],
                    tenant=src["tenant"],
                    doc_id=src["doc_id"],
                    version=int(src["version"]),
                    received_at=from_epoch_ms(int(src["received_at"])),
                    removed_at={k: from_epoch_ms(int(v)) for k, v in (src.get("removed_at") or {}).items()},
                    cache_invalidated_at=from_epoch_ms(int(src["cache_invalidated_at"])),
                    passages_removed=int(src["passages_removed"]),
                    details={"chained_later": True},
                )
            )
        with contextlib.suppress(ConflictError):
            self._es.create(index=self.meta_index, id="migrated", document={"seq": self.tip()})

    @staticmethod
    def _id(seq: int) -> str:
        return f"{seq:012d}"

    def _last_at(self, seq: int) -> ChainRecord | None:
        """The last record of the document that starts at `seq` (a real-time GET), None if there is none."""
        try:
            src = self._es.get(index=self.index, id=self._id(seq))["_source"]
        except NotFoundError:
            return None
        return links_of(src)[-1][0]

    def _record(self, seq: int) -> ChainRecord | None:
        """Record `seq` wherever it is: a document of its own, else inside a block (a search)."""
        try:
            src = self._es.get(index=self.index, id=self._id(seq))["_source"]
        except NotFoundError:
            self._es.indices.refresh(index=self.index)
            query = {"bool": {"filter": [{"range": {"seq": {"lte": seq}}}, {"range": {"last_seq": {"gte": seq}}}]}}
            hits = self._es.search(index=self.index, size=1, query=query)["hits"]["hits"]
            if not hits:
                return None
            src = hits[0]["_source"]
        return next((link for link, _ in links_of(src) if link.seq == seq), None)

    def _current_tip(self, *, walk: bool = True) -> tuple[int, str]:
        """The last record: from memory, else the head, then forward by real-time GETs until one is missing.

        `walk=False` trusts the tip in memory: the next create is conditional (create-only `_id`), so
        a record another worker appended meanwhile shows up as a 409 and the caller walks then.
        """
        if self._tip is not None and not walk:
            return self._tip
        if self._tip is None:
            head = self.head()
            seq, digest = head if head is not None else (0, GENESIS)
            if seq > 0:
                found = self._record(seq)
                if found is None:  # the head is ahead of the records: trust the records, verify reports it
                    seq, digest = 0, GENESIS
            self._tip = (seq, digest)
        seq, digest = self._tip
        while (nxt := self._last_at(seq + 1)) is not None:
            seq, digest = nxt.seq, nxt.hash
        self._tip = (seq, digest)
        return self._tip

    def _append(self, kind: str, body: dict[str, Any], **fields: str | None) -> int:
        """Queue the next link for the chain's writer thread and wait until it and the head are
        durable; returns its seq.

        Links are created one after the other (each names the hash of the one before), and every
        deletion of this worker appends here. Under a lock, the 24 appliers of a loaded machine
        spent their time handing it to each other, one OS wake-up at a time (py-spy: 67 of 80 audit
        samples waiting for the lock, 4 in the create); handing a group commit's lead on cost the
        same wake-ups. So one writer thread creates every queued link back to back, moves the head
        once per batch, then wakes the appenders together: no deletion is acknowledged before its
        evidence is durable, and none waits for another's wake-up.
        """
        mine = _Waiting(kind, body, fields)
        with self._pending:
            if self._closed:
                raise RuntimeError("the deletion audit is closed")
            self._queue.append(mine)
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_links, name="ragsync-audit-chain", daemon=True)
                self._writer.start()
            self._pending.notify()
        mine.done.wait()
        if mine.error is not None:
            raise mine.error
        return mine.seq

    def _write_links(self) -> None:
        """The writer thread: each turn, the links of every queued append, then the head, then wake them."""
        while True:
            with self._pending:
                while not self._queue and not self._closed:
                    self._pending.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            created: list[_Waiting] = []
            with self._lock:
                for block in blocks(batch, lambda item: len(canonical(item.body))):
                    try:
                        self._create_links(block)
                        created.extend(block)
                    except Exception:
                        # One create for the block failed: each record alone, so a record that cannot
                        # be created fails its own append only (its caller retries); the others go on.
                        for item in block:
                            try:
                                self._create_links([item])
                                created.append(item)
                            except Exception as exc:
                                item.error = exc
            if created:
                try:
                    markers = {f"event:{i.fields['event_id']}": i.seq for i in created if i.fields.get("event_id")}
                    self._head_to(max(item.seq for item in created), markers)
                except Exception as exc:  # the links exist, the head did not move: their callers retry
                    for item in created:
                        item.error = exc
            for item in batch:
                item.done.set()

    def _create_links(self, items: list[_Waiting]) -> None:
        """Create the items' links after the tip with one create (the chain lock held) and set their
        seqs. The create is conditional (create-only `_id` = the first seq): a record another worker
        appended meanwhile is a 409, and then the chain is walked and every link of the block is
        made again after it (a block is one document: none of its records was stored)."""
        walk = False
        while True:
            seq, prev = self._current_tip(walk=walk)
            links: list[tuple[ChainRecord, dict[str, str | None]]] = []
            for item in items:
                link = make_record(seq + 1 + len(links), item.kind, item.body, prev)
                links.append((link, item.fields))
                prev = link.hash
            first, last = links[0][0], links[-1][0]
            try:
                self._es.create(index=self.index, id=self._id(first.seq), document=chain_document(links))
            except ConflictError:
                walk = True  # another worker took this seq: link after its record
                continue
            self._tip = (last.seq, last.hash)
            for item, (link, _) in zip(items, links, strict=True):
                item.seq = link.seq
            return

    def _head_to(self, seq: int, markers: dict[str, int]) -> None:
        """Move the head to at least `seq` (created already): to the newest link created, once for
        every link created since the last move. The head only ever moves forward. The deletions'
        event markers (`event:<id>` -> seq) go in the same request, after their records."""
        with self._head_lock:
            tip = self._tip  # the newest link created (set after its create returned; only moves forward)
            if self._head_written >= seq or tip is None:
                self._advance_head(None, markers)
                return
            self._advance_head(tip, markers)
            self._head_written = tip[0]

    def _advance_head(self, tip: tuple[int, str] | None, markers: dict[str, int]) -> None:
        """One `_bulk` to the meta index: the head's conditional update and the markers' creates.

        The head is compare-and-set on the version this process last wrote or read (`_head_version`),
        so moving it costs no read while this worker is the only one moving it; a 409 (another worker
        moved it) reads it and tries again, only ever forward. A marker that exists stays (409)."""
        ops: list[dict[str, Any]] = []
        for marker, at in markers.items():
            ops += [{"create": {"_index": self.meta_index, "_id": marker}}, {"seq": at}]
        for _ in range(10):
            head_op: list[dict[str, Any]] = []
            if tip is not None:
                if self._head_version is None:
                    try:
                        current = self._es.get(index=self.meta_index, id="head")
                    except NotFoundError:
                        current = None
                    if current is not None and int(current["_source"]["seq"]) >= tip[0]:
                        tip = None  # another worker moved it past this one's records
                    elif current is not None:
                        self._head_version = (int(current["_seq_no"]), int(current["_primary_term"]))
                if tip is not None:
                    cas = (
                        {"if_seq_no": self._head_version[0], "if_primary_term": self._head_version[1]}
                        if self._head_version is not None
                        else {}
                    )
                    action = "index" if self._head_version is not None else "create"
                    head_op = [
                        {action: {"_index": self.meta_index, "_id": "head", **cas}},
                        {"seq": tip[0], "hash": tip[1]},
                    ]
            if not head_op and not ops:
                return
            response = self._es.bulk(operations=[*head_op, *ops]).body
            items = response.get("items", [])
            ops = []  # the markers are sent once: created, or there already (409)
            for item in items[1 if head_op else 0 :]:
                ((_, result),) = item.items()
                if int(result.get("status", 200)) not in (200, 201, 409):
                    raise RuntimeError(f"audit event marker not written: {result.get('error')}")
            if not head_op:
                return
            ((_, result),) = items[0].items()
            if int(result.get("status", 200)) < 300:
                self._head_version = (int(result["_seq_no"]), int(result["_primary_term"]))
                return
            if int(result.get("status", 0)) != 409:
                raise RuntimeError(f"audit chain head not moved: {result.get('error')}")
            self._head_version = None  # another worker moved it: read it and try again

    def head(self) -> tuple[int, str] | None:
        try:
            src = self._es.get(index=self.meta_index, id="head")["_source"]
        except NotFoundError:
            return None
        return int(src["seq"]), str(src["hash"])

    def append(self, record: DeletionRecord) -> None:
        if self._es.exists(index=self.meta_index, id=f"event:{record.event_id}"):
            return  # a redelivered event: the first record stands, unchanged
        # its event marker is written with the head, after the record (`_advance_head`)
        self._append(
            KIND_DELETION, deletion_body(record), event_id=record.event_id, tenant=record.tenant, doc_id=record.doc_id
        )

    def append_purge(self, record: PurgeRecord) -> None:
        self._append(KIND_PURGE, purge_body(record), store=record.store)

    def _search(self, filters: list[dict[str, Any]]) -> list[ChainRecord]:
        """The records of the documents the filters select, flattened; a block matches a term filter if
        any of its records does, so its records are filtered again by their own fields."""
        wanted = {k: v for f in filters if "term" in f for k, v in f["term"].items()}
        # Appends do not wait for a refresh (a deletion must not wait a refresh interval for its
        # evidence; the chain itself is read by real-time GETs): listings refresh first instead.
        self._es.indices.refresh(index=self.index)
        out: list[ChainRecord] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query={"bool": {"filter": filters}} if filters else {"match_all": {}},
                size=PAGE_SIZE,
                sort=[{"seq": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            for h in hits:
                out.extend(
                    link
                    for link, fields in links_of(h["_source"])
                    if all(fields.get(k) == v if k != "kind" else link.kind == v for k, v in wanted.items())
                )
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def records(self, tenant: str | None = None) -> list[DeletionRecord]:
        filters: list[dict[str, Any]] = [{"term": {"kind": KIND_DELETION}}]
        if tenant is not None:
            filters.append({"term": {"tenant": tenant}})
        return [deletion_of(link) for link in self._search(filters)]

    def purges(self, store: str | None = None) -> list[PurgeRecord]:
        filters: list[dict[str, Any]] = [{"term": {"kind": KIND_PURGE}}]
        if store is not None:
            filters.append({"term": {"store": store}})
        return [purge_of(link) for link in self._search(filters)]

    def tip(self) -> int:
        with self._lock:
            return self._current_tip()[0]

    def latest(self, kind: str) -> int:
        self._es.indices.refresh(index=self.index)
        hits = self._es.search(index=self.index, size=1, query={"term": {"kind": kind}}, sort=[{"seq": "desc"}])
        found = hits["hits"]["hits"]
        if not found:
            return 0
        return max((link.seq for link, _ in links_of(found[0]["_source"]) if link.kind == kind), default=0)

    def chain(self) -> tuple[list[ChainRecord], tuple[int, str] | None]:
        """The head first, then the records up to it: one consistent trail while workers append (a
        record is created before the head moves to it), so every reader counts the same records."""
        head = self.head()
        if head is None:
            return self._search([]), head
        return [r for r in self._search([{"range": {"seq": {"lte": head[0]}}}]) if r.seq <= head[0]], head

    def drop_all(self) -> None:
        """Delete this prefix's audit indexes (tests only: production audits are never dropped)."""
        old = f"{self.prefix}-deletion-audit"
        for index in (self.index, self.meta_index, old):
            self._es.indices.delete(index=index, ignore_unavailable=True)

    def close(self) -> None:
        """Let the writer finish the links queued, then close the client."""
        with self._pending:
            self._closed = True
            self._pending.notify()
            writer = self._writer
        if writer is not None:
            writer.join(60)
        self._es.close()
