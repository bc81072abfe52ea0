"""Propagation records in Elasticsearch (PropagationLog): when each revocation or deletion reached
each copy, read back by `ragsync propagation` and the metrics. How the index is made and why no
write waits for a refresh: indexer.elastic_state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from indexer.combine import Combiner
from indexer.elastic_client import check_prefix, connect
from indexer.elastic_state import PAGE_SIZE, STORED_ONLY, create_index
from indexer.propagation import PropagationRecord, from_row, to_row
from schemas._time import to_epoch_ms


class ElasticPropagationLog:
    """PropagationLog in `<prefix>-propagation`: one document per event (`_id` = event_id), written
    with a bulk request per confirmation batch and no refresh wait (listings refresh first)."""

    def __init__(self, url: str, *, prefix: str = "ragsync") -> None:
        self._es = connect(url)
        self.prefix = check_prefix(prefix)
        self.index = f"{self.prefix}-propagation"
        create_index(
            self._es,
            self.index,
            self.prefix,
            "propagation",
            {
                "start_ms": {"type": "date", "format": "epoch_millis"},
                "kind": {"type": "keyword"},
                "event_id": {"type": "keyword"},
                "row": STORED_ONLY,
            },
        )
        self._writes: Combiner[list[PropagationRecord]] = Combiner(self._record_many, name="ragsync-es-propagation")

    def record(self, records: Sequence[PropagationRecord]) -> None:
        """Written with the records of the other appliers' confirmations queued meanwhile: one `_bulk`
        (indexer.combine); each applier used to hold its actor for a request of its own."""
        if records:
            self._writes.submit(list(records), object())

    def _record_many(self, batches: list[list[PropagationRecord]]) -> None:
        ops: list[dict[str, Any]] = []
        for r in (r for batch in batches for r in batch):
            ops.append({"index": {"_index": self.index, "_id": r.event_id}})
            ops.append(
                {
                    "start_ms": to_epoch_ms(r.start()),
                    "kind": r.kind,
                    "event_id": r.event_id,
                    "row": json.dumps(to_row(r)),
                }
            )
        response = self._es.bulk(operations=ops)
        if response.get("errors"):
            raise RuntimeError(f"propagation records not written: {response['items'][0]}")

    def records(self, since: datetime | None = None) -> list[PropagationRecord]:
        self._es.indices.refresh(index=self.index)
        query: dict[str, Any] = (
            {"range": {"start_ms": {"gte": to_epoch_ms(since)}}} if since is not None else {"match_all": {}}
        )
        out: list[PropagationRecord] = []
        after: list[Any] | None = None
        while True:
            response = self._es.search(
                index=self.index,
                query=query,
                size=PAGE_SIZE,
                sort=[{"start_ms": "asc"}, {"event_id": "asc"}],
                search_after=after,
            )
            hits = response["hits"]["hits"]
            out.extend(from_row(json.loads(h["_source"]["row"])) for h in hits)
            if len(hits) < PAGE_SIZE:
                return out
            after = hits[-1]["sort"]

    def drop_all(self) -> None:
        self._es.indices.delete(index=self.index, ignore_unavailable=True)

    def close(self) -> None:
        self._writes.close()
        self._es.close()
