"""Erasure on request, retention of superseded versions, and the event log's side of a deletion."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import MODEL_PATH
from test_deletion_physical import KEEP_WORDS, V1_WORDS, V2_WORDS, found_in, v1, v2
from test_indexing import upsert

from ragsync.cli import main
from streams.erasure import RollSchedule, marker_value, parse_marker
from streams.sqlite_log import SqliteEventLog


def test_sqlite_log_erases_up_to_the_deleted_version_and_the_dead_letters(tmp_path: Path) -> None:
    log = SqliteEventLog(tmp_path / "events.db")
    for version in (1, 2):
        log.publish(upsert(version, f"text {V1_WORDS[version]}"))
    log.publish(upsert(4, f"re-created {V2_WORDS[0]}"))  # after the deletion at 3
    log.publish(upsert(1, "another document", doc="t:other.md"))
    log.publish_raw("dlq", "acme/t:p.md", json.dumps({"value": V1_WORDS[0]}).encode())
    assert log.remnants("acme", "t:p.md", 3) == {"documents": 2, "dlq": 1}
    assert log.erase_document("acme", "t:p.md", 3) == 3
    assert log.erase_document("acme", "t:p.md", 3) == 0, "idempotent"
    assert log.remnants("acme", "t:p.md", 3) == {"documents": 0, "dlq": 0}
    kept = [r for r in log.poll("documents", "g", 10)]
    assert [bool(r.value) for r in kept] == [False, False, True, True], "v4 and the other document stay"
    assert kept[0].key == "acme/t:p.md" and kept[0].timestamp_ms is not None
    assert log.compact_document("acme", "t:other.md", 1) == 0
    log.publish(upsert(2, "another document, v2", doc="t:other.md"))
    assert log.compact_document("acme", "t:other.md", 2) == 1, "a newer upsert supersedes the older's content"
    assert log.purge()["checkpoint_complete"] is True
    log.close()
    assert found_in(tmp_path, (V1_WORDS[1], V1_WORDS[2])) == {}
    assert found_in(tmp_path, (V2_WORDS[0],))


def test_erase_markers_and_roll_schedule() -> None:
    marker = parse_marker("acme/t:p.md", marker_value(7))
    assert marker is not None and (marker.tenant, marker.doc_id, marker.up_to_version) == ("acme", "t:p.md", 7)
    assert parse_marker("acme/t:p.md", upsert(1, "x").model_dump_json().encode()) is None
    assert parse_marker("acme/t:p.md", b"") is None and parse_marker("nokey", marker_value(1)) is None
    rolls = RollSchedule(segment_ms=10_000)
    rolls.tombstoned("documents", 2, now=100.0)
    rolls.tombstoned("documents", 2, now=105.0)  # the earliest due time stands
    rolls.tombstoned("dlq", 0, now=101.0)
    assert rolls.due(now=109.0) == []
    assert rolls.due(now=110.6) == [("documents", 2)]
    assert rolls.due(now=120.0) == [("dlq", 0)] and len(rolls) == 0


def test_retention_deletes_superseded_versions_older_than_the_setting(tmp_path: Path) -> None:
    from indexer.sqlite_fts import SqliteLexicalIndex
    from ragsync.purge import RETENTION, Purger
    from ragsync.settings import Settings
    from ragsync.wiring import build_embedded

    settings = Settings(home=tmp_path / "home", embed_model_path=tmp_path / "no-model")
    components = build_embedded(settings, with_embedder=False)
    try:
        sink = components.sink()
        old = upsert(1, "# Old\n\nThe first wording of the page.")
        sink.apply(old)
        new = upsert(2, "# New\n\nThe second wording of the page.", effective=old.occurred_at + timedelta(days=3))
        sink.apply(new)
        sink.flush()  # the batch is durable, as the worker makes it before any maintenance
        lexical = components.lexical
        assert isinstance(lexical, SqliteLexicalIndex)
        assert {p.version for p in lexical.doc_passages("acme", "t:p.md")} == {1, 2}
        purger = Purger(components)
        assert purger.expire_superseded(days=100_000) == 0, "superseded too recently"
        assert purger.expire_superseded(days=0) == 1
        assert {p.version for p in lexical.doc_passages("acme", "t:p.md")} == {2}
        (record,) = components.audit.purges(RETENTION)
        assert record.details["passages"] == 1
    finally:
        components.close()


def run(env: dict[str, str], *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def test_erase_removes_every_version_and_purges_at_once(tmp_path: Path) -> None:
    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "erase-test-secret-0123456789abcdef",
        "RAGSYNC_CONFIG": "/dev/null",
        "RAGSYNC_PURGE_MAX_DELAY_S": "3600",
    }
    home = Path(env["RAGSYNC_HOME"])
    drive = tmp_path / "drive"
    (drive / "acme/ops").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (drive / "acme/ops/plan.md").write_text(v1())
    (drive / "acme/ops/keep.md").write_text(f"# Keep\n\n{KEEP_WORDS[0]} stays.\n")
    run(env, "sync", str(drive), "--tenant", "acme", "--json")
    (drive / "acme/ops/plan.md").write_text(v2())
    run(env, "sync", str(drive), "--tenant", "acme", "--json")

    out = json.loads(run(env, "erase", "--tenant", "acme", "acme/ops/plan.md", "--json").output)
    assert out["erased"] is True and out["doc_id"] == "drive:acme/ops/plan.md" and out["version"] == 3
    cert = json.loads(run(env, "audit", "deletion", "acme/ops/plan.md", "--json").output)
    assert cert["complete"] and cert["deletion"]["erase"] is True and cert["deletion"]["versions_removed"] == [1, 2]
    assert found_in(home, V1_WORDS + V2_WORDS) == {}, "purged at once, not on schedule"

    # The file is still at the source: the next sync indexes it again, after the erasure's version.
    report = json.loads(run(env, "sync", str(drive), "--tenant", "acme", "--json").output)
    assert report["upserts"] == 1
    verified = json.loads(run(env, "audit", "verify", "--json").output)
    assert verified["ok"] is True
    run(env, "erase", "--tenant", "acme", "acme/ops/nothing.md", code=2)


DEAD_WORDS = ("quorvintaxqxq", "blemmorathqxq")


def test_erase_covers_a_dead_letter_above_the_erasure_s_version(tmp_path: Path) -> None:
    """A dead-lettered upsert claiming a version above the erasure's kept its text in events.db after
    `ragsync erase`, and the certificate did not count it (issue 18): the erasure's version comes from
    what the indexer and the connector know, and neither knows a record that was never applied."""
    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "erase-test-secret-0123456789abcdef",
        "RAGSYNC_CONFIG": "/dev/null",
    }
    home = Path(env["RAGSYNC_HOME"])
    drive = tmp_path / "drive"
    (drive / "acme/ops").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (drive / "acme/ops/plan.md").write_text(v1())
    run(env, "sync", str(drive), "--tenant", "acme", "--json")
    body = {  # no content_hash: invalid, so the indexer dead-letters it
        "event_id": "e" * 32,
        "kind": "upsert",
        "tenant": "acme",
        "doc_id": "drive:acme/ops/plan.md",
        "version": 9,
        "source": "drive",
        "payload": {"kind": "upsert", "content": f"{DEAD_WORDS[0]} {DEAD_WORDS[1]}", "content_type": "markdown"},
    }
    log = SqliteEventLog(home / "events.db")
    log.publish_raw("documents", "acme/drive:acme/ops/plan.md", json.dumps(body).encode())
    log.close()
    run(env, "sync", str(drive), "--tenant", "acme", "--json")  # applies the pending record: dead-lettered
    assert [letter["key"] for letter in json.loads(run(env, "dlq", "list", "--json").output)] == [
        "acme/drive:acme/ops/plan.md"
    ]
    assert found_in(home, DEAD_WORDS)

    out = json.loads(run(env, "erase", "--tenant", "acme", "acme/ops/plan.md", "--json").output)
    assert out["erased"] is True and out["version"] == 2, "below the dead letter's claimed version 9"
    cert = json.loads(run(env, "audit", "deletion", "acme/ops/plan.md", "--json").output)
    log_copies = {c["copy"]: c["remnants"] for c in cert["copies"] if c["copy"] in ("event log", "dead-letter topic")}
    assert log_copies == {"event log": 0, "dead-letter topic": 0} and cert["complete"], cert
    assert found_in(home, DEAD_WORDS + V1_WORDS) == {}, "no version's text is left in any file of the home"


def test_an_erasure_spares_a_re_creation_published_after_it(tmp_path: Path) -> None:
    log = SqliteEventLog(tmp_path / "events.db")
    log.publish(upsert(1, f"text {V1_WORDS[0]}"))
    log.publish_raw("documents", "acme/t:p.md", json.dumps({"version": 7, "value": V1_WORDS[1]}).encode())
    log.publish_raw("dlq", "acme/t:p.md", json.dumps({"value": V1_WORDS[2]}).encode())
    (erased_at,) = [r.timestamp_ms for r in log.poll("documents", "g", 10)][-1:]
    assert erased_at is not None
    time.sleep(0.01)
    log.publish(upsert(8, f"re-created {V2_WORDS[0]}"))  # after the erasure was published
    assert log.remnants("acme", "t:p.md") == {"documents": 3, "dlq": 1}
    assert log.erase_document("acme", "t:p.md", 2, published_by_ms=erased_at) == 3, "v1, the 'v7' and the dlq"
    assert log.remnants("acme", "t:p.md") == {"documents": 1, "dlq": 0}
    assert [bool(r.value) for r in log.poll("documents", "h", 10)] == [False, False, True], "v8 stays"
    log.close()
