"""A deleted document leaves no text behind, on the embedded profile, through the real CLI.

One document goes through two versions, a dead letter and a cached answer, then is deleted at the
source. Afterwards: its certificate shows zero remnants in every copy, a raw byte scan of every file
under the home finds none of its words (FTS5 terms included: the scan also looks for each word's
tail, which an FTS5 leaf stores verbatim after the prefix it shares with the previous term), the
audit trail verifies, and no log line or trace of the whole run held a word of it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import EMBEDDED_LEXICAL, MODEL_PATH

from ragsync.cli import main

# Words no dictionary, path or heading holds; each ends in "qxq", which the Porter stemmer keeps.
V1_WORDS = ("zorbulantqxq", "frimblethwqxq", "glarnvexiqxq")
V2_WORDS = ("plinkodrumqxq", "vostrenmalqxq")
KEEP_WORDS = ("keptwordyqxq",)
DOC = "acme/ops/plan.md"


def v1() -> str:
    return (
        "# Operations plan\n\n"
        f"The night shift rotates every {V1_WORDS[0]} week. Spare parts come from {V1_WORDS[1]} depot.\n\n"
        f"## Escalation\n\nCall the duty manager, then the {V1_WORDS[2]} desk.\n"
    )


def v2() -> str:
    return v1().replace("Spare parts", f"Spare {V2_WORDS[0]} parts") + f"\nNew supplier: {V2_WORDS[1]}.\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "deletion-test-secret-0123456789abcdef",
        "RAGSYNC_CONFIG": "/dev/null",
    }


def run(env: dict[str, str], *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(main, ["-vv", *args], env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def found_in(home: Path, words: tuple[str, ...]) -> dict[str, list[str]]:
    """Every file under the home holding a word or the last 7 characters of one, raw bytes."""
    probes = {w: (w.encode(), w[-7:].encode()) for w in words}
    hits: dict[str, list[str]] = {}
    for path in home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for word, needles in probes.items():
                if any(n in data for n in needles):
                    hits.setdefault(word, []).append(str(path.relative_to(home)))
    return hits


def test_deleted_document_leaves_no_text_behind(tmp_path: Path, env: dict[str, str], caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="ragsync.trace")  # an earlier CLI run may have quietened it
    home = Path(env["RAGSYNC_HOME"])
    drive = tmp_path / "drive"
    (drive / "acme/ops").mkdir(parents=True)
    (drive / "acme/.ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (drive / DOC).write_text(v1())
    (drive / "acme/ops/keep.md").write_text(f"# Keep\n\nThis page stays: {KEEP_WORDS[0]} lives on.\n")
    report = json.loads(run(env, "sync", str(drive), "--tenant", "acme", "--json").output)
    assert report["upserts"] == 2 and report["dense"] is True

    # A dead letter carrying the document's words under its key.
    from streams.sqlite_log import SqliteEventLog

    log = SqliteEventLog(home / "events.db")
    log.publish_raw("documents", f"acme/drive:{DOC}", f'{{"broken": "{V1_WORDS[0]} {V1_WORDS[1]}"}}'.encode())
    log.close()

    token = run(env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff").output.strip()
    question = "Who does the night shift call?"

    def retrieved() -> list[str]:
        traced = json.loads(run(env, "ask", question, "--token", token, "--json", "--show-trace").output)
        return [i for s in traced["trace"]["searches"] for i in s["selected_ids"] if i.startswith(f"drive:{DOC}@")]

    assert retrieved(), "the document answers the question (and the answer is cached)"

    (drive / DOC).write_text(v2())
    assert json.loads(run(env, "sync", str(drive), "--tenant", "acme", "--json").output)["upserts"] == 1
    assert found_in(home, V1_WORDS + V2_WORDS), "before the deletion the words are on disk"

    (drive / DOC).unlink()
    report = json.loads(run(env, "sync", str(drive), "--tenant", "acme", "--json").output)
    assert report["deletes"] == 1
    assert retrieved() == []

    cert = json.loads(run(env, "audit", "deletion", DOC, "--json").output)
    by_copy = {c["copy"]: c for c in cert["copies"]}
    assert cert["remnants"] == 0 and cert["unchecked"] == [] and cert["complete"], by_copy
    assert set(by_copy) >= {
        EMBEDDED_LEXICAL,
        "qdrant-edge",
        "embedding-cache",
        "result cache",
        "deny set",
        "event log",
        "dead-letter topic",
        "connector state",
        "document state",
    }
    for store in (EMBEDDED_LEXICAL, "qdrant-edge", "event log", "embedding-cache"):
        assert by_copy[store]["removed_physically_at"], f"{store} purged: {by_copy[store]}"
    assert by_copy[EMBEDDED_LEXICAL]["removed_logically_at"] and by_copy[EMBEDDED_LEXICAL]["unmerged_indexes"] == 0
    assert cert["deletion"]["versions_removed"] == [1, 2] and cert["audit_trail"]["intact"]

    assert found_in(home, V1_WORDS + V2_WORDS) == {}, "a raw scan of the home finds no word of the document"
    assert found_in(home, KEEP_WORDS), "the scan does find a live document's words"

    verified = json.loads(run(env, "audit", "verify", "--json").output)
    assert verified["ok"] is True

    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert not [w for w in V1_WORDS + V2_WORDS if w in logged], "logs and traces hold IDs, not text"
    assert "ragsync.trace" in {r.name for r in caplog.records}, "the traces were logged (and checked)"
