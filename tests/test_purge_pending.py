"""A purge is pending only while a deletion is newer than the stores' last purge, and every audit write
is committed by the transaction that made it (issue 20): in-process, on the embedded profile.

Before the fix, each purge record raised the trail's tip, so a purge made itself pending again (an
idle owner purged in a loop), and a purge record outside a batch opened a transaction nobody
committed: other processes never saw it and state.db's write lock stayed held.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import NOW
from state_db import committed_records, writable
from test_indexing import delete, upsert

from indexer.audit_records import KIND_DELETION, KIND_PURGE
from indexer.ports import DeletionRecord, DocState, PurgeRecord
from indexer.state import SqliteDeletionAudit, SqliteDocStates, StateDb
from ragsync.maintenance import Maintenance
from ragsync.pipeline import apply_events
from ragsync.purge import Purger
from ragsync.settings import Settings
from ragsync.wiring import Components, build_embedded


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Components]:
    settings = Settings(home=tmp_path / "home", embed_model_path=tmp_path / "no-model", purge_max_delay_s=3600)
    components = build_embedded(settings, with_embedder=False)
    try:
        yield components
    finally:
        components.close()


def test_an_idle_owner_purges_once_per_deletion_and_holds_no_lock(home: Components) -> None:
    state_db = home.settings.home / "state.db"
    for i in range(3):
        home.events.publish(upsert(1, f"# Page {i}\n\nThe text of page {i}.", doc=f"t:p{i}.md"))
    apply_events(home)
    assert Purger(home).pending() == 0, "no deletion: nothing to purge"

    home.events.publish(delete(2, doc="t:p0.md"))
    home.events.publish(delete(2, doc="t:p1.md"))
    apply_events(home)  # applies, then idle maintenance purges
    links, head = home.audit.chain()
    kinds = [link.kind for link in links]
    assert kinds.count(KIND_DELETION) == 2 and kinds.count(KIND_PURGE) >= 2, kinds
    assert head == (links[-1].seq, links[-1].hash)
    assert Purger(home).pending() == 0, "purge records made the purge pending again"
    assert committed_records(state_db) == len(links), "the purge records are committed, seen by every process"
    assert writable(state_db), "state.db's write lock is held after the purge"

    # Idle: maintenance steps purge nothing more and write nothing.
    maintenance = Maintenance(home)
    for _ in range(50):
        maintenance.step()
    assert len(home.audit.chain()[0]) == len(links) == committed_records(state_db)
    assert writable(state_db)

    # The next deletion makes exactly the stores purge again, once.
    purger = Purger(home)
    home.events.publish(delete(2, doc="t:p2.md"))
    apply_events(home)
    assert purger.pending() == 0
    after = home.audit.chain()[0]
    new = after[len(links) :]
    assert new and new[0].kind == KIND_DELETION
    stores = [link.body["store"] for link in new[1:]]
    assert new[1:] and all(link.kind == KIND_PURGE for link in new[1:]) and len(stores) == len(set(stores))
    assert purger.run() == [], "nothing lags: no store purges, no record"
    assert len(home.audit.chain()[0]) == len(after) == committed_records(state_db)


def test_a_purge_record_commits_at_once_and_a_deletion_with_its_batch(tmp_path: Path) -> None:
    db = StateDb(tmp_path / "state.db", deferred=True)
    audit, docs = SqliteDeletionAudit(db), SqliteDocStates(db)
    try:
        audit.append_purge(PurgeRecord(store="lexical", at=NOW, covers_seq=0, details={}))
        assert committed_records(tmp_path / "state.db") == 1 and writable(tmp_path / "state.db")

        # A batch: the doc state and the deletion record are durable together, at the flush.
        docs.put(DocState(tenant="acme", doc_id="t:a.md", applied_version=2, deleted=True))
        audit.append(
            DeletionRecord(
                event_id="e1",
                tenant="acme",
                doc_id="t:a.md",
                version=2,
                received_at=NOW,
                removed_at={"lexical": NOW + timedelta(milliseconds=3)},
                cache_invalidated_at=NOW + timedelta(milliseconds=4),
                passages_removed=1,
            )
        )
        assert committed_records(tmp_path / "state.db") == 1
        assert len(audit.chain()[0]) == 1 and audit.latest(KIND_DELETION) == 0, "readers see what is committed"
        db.flush()
        assert committed_records(tmp_path / "state.db") == 2 and writable(tmp_path / "state.db")
        assert audit.latest(KIND_DELETION) == 2 and audit.latest(KIND_PURGE) == 1 and audit.tip() == 2
    finally:
        audit.close()
        docs.close()
