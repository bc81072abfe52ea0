"""`ragsync audit verify` on an embedded home: an intact trail passes, a tampered one fails."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from conftest import NOW

from indexer.ports import DeletionRecord, PurgeRecord
from indexer.state import SqliteDeletionAudit
from ragsync.cli import main


def _record(i: int) -> DeletionRecord:
    return DeletionRecord(
        event_id=f"ev-{i}",
        tenant="acme",
        doc_id=f"drive:doc{i}.md",
        version=2,
        received_at=NOW,
        removed_at={"sqlite-fts5": NOW + timedelta(milliseconds=3)},
        cache_invalidated_at=NOW + timedelta(milliseconds=4),
        passages_removed=3,
    )


def _verify(home: Path, *extra: str) -> tuple[int, dict[str, object]]:
    env = {"RAGSYNC_HOME": str(home), "RAGSYNC_CONFIG": "/dev/null"}
    result = CliRunner().invoke(main, ["audit", "verify", "--json", *extra], env=env, catch_exceptions=False)
    return result.exit_code, json.loads(result.output)


def test_verify_passes_then_detects_an_edited_record(tmp_path: Path) -> None:
    home = tmp_path / "home"
    audit = SqliteDeletionAudit(home / "state.db")
    for i in range(3):
        audit.append(_record(i))
    audit.append_purge(PurgeRecord(store="sqlite-fts5", at=NOW, covers_seq=3))
    audit.close()

    code, report = _verify(home)
    assert code == 0 and report["ok"] is True and report["records"] == 4
    head = str(report["head"])
    assert head.startswith("4:")
    anchor = head
    code, report = _verify(home, "--anchor", anchor)
    assert code == 0 and report["anchors_checked"] == 1

    # Someone with write access to the file drops the append-only triggers and edits a record.
    conn = sqlite3.connect(home / "state.db")
    conn.execute("DROP TRIGGER audit_chain_no_update")
    conn.execute("UPDATE audit_chain SET body = replace(body, 'doc1.md', 'other.md') WHERE seq = 2")
    conn.commit()
    conn.close()
    code, report = _verify(home)
    assert code == 1 and report["ok"] is False
    assert [p["seq"] for p in report["problems"]] == [2]  # type: ignore[index, union-attr]


def test_verify_detects_a_rewritten_trail_against_an_anchor(tmp_path: Path) -> None:
    """Rewriting every hash after an edit fools the chain, not an anchor noted before."""
    from indexer.audit_chain import make_record

    home = tmp_path / "home"
    audit = SqliteDeletionAudit(home / "state.db")
    for i in range(2):
        audit.append(_record(i))
    audit.close()
    _, report = _verify(home)
    anchor = str(report["head"])

    conn = sqlite3.connect(home / "state.db")
    conn.execute("DROP TRIGGER audit_chain_no_update")
    rows = conn.execute("SELECT seq, kind, body, prev_hash FROM audit_chain ORDER BY seq").fetchall()
    prev = rows[0][3]
    for seq, kind, body, _ in rows:
        forged = make_record(seq, kind, json.loads(body.replace("doc0.md", "forged.md")), prev)
        conn.execute(
            "UPDATE audit_chain SET body = ?, prev_hash = ?, hash = ? WHERE seq = ?",
            (json.dumps(forged.body), forged.prev_hash, forged.hash, seq),
        )
        prev = forged.hash
    conn.execute("UPDATE meta SET value = ? WHERE key = 'audit_head'", (f"{rows[-1][0]}:{prev}",))
    conn.commit()
    conn.close()

    code, report = _verify(home)
    assert code == 0, "a consistent rewrite passes the chain check alone"
    code, report = _verify(home, "--anchor", anchor)
    assert code == 1 and "anchor" in str(report["problems"])


def test_an_anchor_in_other_digits_is_a_usage_error(tmp_path: Path) -> None:
    """'²' passes str.isdigit() and fails int(): it was a traceback instead of a usage error."""
    env = {"RAGSYNC_HOME": str(tmp_path / "home"), "RAGSYNC_CONFIG": "/dev/null"}
    result = CliRunner().invoke(main, ["audit", "verify", "--anchor", "²:" + "0" * 64], env=env)
    assert result.exit_code == 2 and "expected SEQ:SHA256" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_records_of_a_home_from_before_the_chain_are_chained_once(tmp_path: Path) -> None:
    from indexer.audit_chain import verify

    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE deletion_audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE,
            tenant TEXT NOT NULL, doc_id TEXT NOT NULL, version INTEGER NOT NULL, received_ms INTEGER NOT NULL,
            removed TEXT NOT NULL, cache_invalidated_ms INTEGER NOT NULL, passages_removed INTEGER NOT NULL);
        INSERT INTO deletion_audit(event_id, tenant, doc_id, version, received_ms, removed, cache_invalidated_ms,
            passages_removed) VALUES ('old-1', 'acme', 'a.md', 3, 1000, '{"sqlite-fts5": 1002}', 1003, 2),
            ('old-2', 'acme', 'b.md', 1, 2000, '{"sqlite-fts5": 2002}', 2003, 1);
        """
    )
    conn.commit()
    conn.close()
    audit = SqliteDeletionAudit(path)
    audit.append(_record(9))
    assert [r.event_id for r in audit.records()] == ["old-1", "old-2", "ev-9"]
    assert audit.records()[0].details == {"chained_later": True}
    assert verify(*audit.chain()) == []
    audit.close()
    again = SqliteDeletionAudit(path)  # opening again migrates nothing twice
    assert len(again.records()) == 3
    again.close()


def test_audit_propagation_reports_percentiles_and_events_over_the_bound(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from indexer.propagation import PropagationRecord, SqlitePropagationLog
    from ragsync.propagation_metrics import PropagationMetrics
    from ragsync.server import new_registry
    from schemas._time import utcnow

    home = tmp_path / "home"
    log = SqlitePropagationLog(home / "propagation.db")
    start = utcnow()
    registry = new_registry()
    metrics = PropagationMetrics(registry, bound_s=2.0)
    records = []
    for i, converge_ms in enumerate((40, 60, 80, 5000)):
        at = start + timedelta(seconds=i)
        r = PropagationRecord(
            event_id=f"p{i}",
            kind="acl" if i % 2 == 0 else "delete",
            tenant="acme",
            doc_id=f"drive:d{i}.md",
            version=2,
            occurred_at=at,
            published_at=at,
            consumed_at=at + timedelta(milliseconds=5),
            applied_at={"sqlite-fts5": at + timedelta(milliseconds=20)},
            cache_invalidated_at=at + timedelta(milliseconds=25),
            converged_at=at + timedelta(milliseconds=converge_ms),
        )
        records.append(r)
        metrics.observe(r)
    log.record(records)
    log.close()

    env = {"RAGSYNC_HOME": str(home), "RAGSYNC_CONFIG": "/dev/null"}
    result = CliRunner().invoke(main, ["audit", "propagation", "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 1, "one event is over the 2 s bound"
    report = json.loads(result.output)
    assert report["events"] == 4 and report["bound_s"] == 2.0
    assert report["by_copy"]["effective"]["p50"] == 0.005
    assert report["by_copy"]["converged"]["max"] == 5.0 and report["by_copy"]["acl/converged"]["count"] == 2
    assert [e["event_id"] for e in report["over_bound"]] == ["p3"]
    later = (start + timedelta(seconds=1)).isoformat()
    result = CliRunner().invoke(main, ["audit", "propagation", "--since", later, "--json"], env=env)
    assert json.loads(result.output)["events"] == 3

    text = generate_latest(registry).decode()
    assert 'ragsync_propagation_seconds_count{copy="converged",kind="acl"} 2.0' in text
    assert 'ragsync_propagation_over_bound_total{kind="delete"} 1.0' in text
