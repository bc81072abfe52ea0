"""What a person meets on the command line: plain, unwrapped messages, documented exit codes,
validated token inputs, and `ragsync dlq` over a real embedded home."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import MODEL_PATH

from ragsync.cli import main
from ragsync.demo import build_drive
from schemas.events import Event, EventKind, UpsertPayload, make_event_id
from streams.ports import TOPIC_DLQ, TOPIC_DOCUMENTS, Record, dead_letter_value
from streams.sqlite_log import SqliteEventLog


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "cli-test",
        "RAGSYNC_CONFIG": os.devnull,
    }


def invoke(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def ok(env: dict[str, str], *args: str) -> Result:
    result = invoke(env, *args)
    assert result.exit_code == 0, result.output
    return result


# ---- messages -----------------------------------------------------------------------------------


def test_markup_characters_print_as_themselves_and_long_lines_stay_whole(env: dict[str, str], tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    # A folder "[bold]odd[" holding "] name…": the document ID holds the markup "[bold]" and "[/]".
    name = "[bold]odd[/] name, long enough that a hard wrap at eighty columns would have cut it in two.md"
    (drive / "acme" / "[bold]odd[").mkdir()
    (drive / "acme" / name).write_text("---\neffective_from: not a date [/]\n---\n# Odd\n\nText.\n")

    result = invoke(env, "sync", str(drive), "--tenant", "acme,globex")

    assert result.exit_code == 3, result.output  # synced, with one document's error
    (line,) = [x for x in result.output.splitlines() if "read error" in x]
    assert f"acme/{name}" in line and "[/]" in line and len(line) > 120


def test_tables_never_parse_markup(env: dict[str, str], tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    (drive / "acme" / "[bold]pay[").mkdir()
    (drive / "acme" / "[bold]pay[/].md").write_text("# Pay\n\nPaid monthly.\n")
    ok(env, "sync", str(drive), "--tenant", "acme,globex")
    (drive / "acme" / "[bold]pay[/].md").unlink()
    ok(env, "sync", str(drive), "--tenant", "acme,globex")

    result = ok(env, "audit", "deletions")

    assert "acme/[bold]pay[/].md" in result.output


def test_exit_codes_are_documented_in_help(env: dict[str, str]) -> None:
    top = ok(env, "--help").output
    assert "3 sync finished with per-document read errors" in " ".join(top.split())
    for command in (["sync"], ["ask"], ["token", "issue"], ["audit", "deletions"], ["dlq"], ["eval"], ["serve"]):
        assert "Exit status" in ok(env, *command, "--help").output, command


# ---- token issue --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["--ttl", "-5"], "-5 is not a lifetime: give seconds from 1 to", id="negative-ttl"),
        pytest.param(["--ttl", "0"], "0 is not a lifetime", id="zero-ttl"),
        pytest.param(["--ttl", "99999999999"], "is not a lifetime", id="huge-ttl"),
        pytest.param(["--tenant", "bad tenant/../"], "'bad tenant/../' is not a tenant name", id="tenant"),
        pytest.param(["--user", "ann smith"], "'ann smith' is not a user name", id="user"),
        pytest.param(["--groups", "staff,h r"], "'h r' is not a group name", id="group"),
        # re.match's '$' also matches before a final newline: these were tracebacks from Principal.
        pytest.param(["--tenant", "acme\n"], "'acme\\n' is not a tenant name", id="tenant-newline"),
        pytest.param(["--user", "ann\n"], "'ann\\n' is not a user name", id="user-newline"),
    ],
)
def test_token_issue_validates_its_inputs(env: dict[str, str], args: list[str], says: str) -> None:
    base = {"--tenant": "acme", "--user": "ann", "--groups": "staff"}
    argv = ["token", "issue"]
    for flag, value in base.items():
        if flag not in args:
            argv += [flag, value]
    result = invoke(env, *argv, *args)

    assert result.exit_code == 2
    assert says in result.output and "Traceback" not in result.output
    assert not any(len(part) > 20 and part.count(".") == 1 for part in result.output.split()), "no token printed"


def test_token_issue_prints_a_token_that_asks(env: dict[str, str], tmp_path: Path) -> None:
    build_drive(tmp_path / "drive")
    ok(env, "sync", str(tmp_path / "drive"), "--tenant", "acme,globex")
    token = ok(env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff", "--ttl", "60")

    answer = json.loads(
        ok(env, "ask", "How many days to request a refund?", "--token", token.output.strip(), "--json").output
    )

    assert answer["answered"] is True


# ---- dlq ----------------------------------------------------------------------------------------

REPLAYED_TEXT = "Replayed documents are indexed once the worker is fixed."


def replayable_upsert() -> Event:
    return Event(
        event_id=make_event_id("test", "acme", "test:kb/replayed.md", 1, EventKind.UPSERT),
        kind=EventKind.UPSERT,
        tenant="acme",
        doc_id="test:kb/replayed.md",
        version=1,
        source="test",
        payload=UpsertPayload(
            content=f"# Replays\n\n{REPLAYED_TEXT}\n",
            content_type="markdown",
            content_hash="0" * 16,
            acl=("group:staff",),
            source_url="file:///kb/replayed.md",
        ),
    )


def dead_letter(events: SqliteEventLog, value: bytes, reason: str, offset: int) -> None:
    original = Record(TOPIC_DOCUMENTS, 0, offset, "acme/test:kb/replayed.md", value)
    events.publish_raw(TOPIC_DLQ, original.key, dead_letter_value(original, reason))


def as_json(result: Result) -> Any:
    return json.loads(result.output)


def test_dlq_list_show_replay(env: dict[str, str], tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    ok(env, "sync", str(drive), "--tenant", "acme,globex")
    events = SqliteEventLog(tmp_path / "home" / "events.db")
    try:
        dead_letter(events, replayable_upsert().model_dump_json().encode(), "store unavailable: TimeoutError", 41)
        dead_letter(events, b'{"kind": "ups', "too large (value truncated from 20000000 bytes)", 42)
    finally:
        events.close()

    listed = as_json(ok(env, "dlq", "list", "--json"))
    assert [(d["id"], d["origin"], d["replayable"]) for d in listed] == [
        ("0:0", "documents 0:41", True),
        ("0:1", "documents 0:42", False),
    ]
    assert listed[0]["reason"] == "store unavailable: TimeoutError"
    shown = ok(env, "dlq", "show", "0:0").output
    assert "reason: store unavailable: TimeoutError" in shown and REPLAYED_TEXT in shown
    assert invoke(env, "dlq", "show", "9:9").exit_code == 2

    replay = invoke(env, "dlq", "replay", "--json")

    assert replay.exit_code == 1  # stopped at the truncated one
    report = json.loads(replay.output.split("\nerror:")[0])
    assert report["replayed"] == ["0:0"] and report["stuck"]["id"] == "0:1"
    assert [d["id"] for d in as_json(ok(env, "dlq", "list", "--json"))] == ["0:1"]
    ok(env, "sync", str(drive), "--tenant", "acme,globex")  # the embedded profile applies the replayed event
    token = ok(env, "token", "issue", "--tenant", "acme", "--user", "ann", "--groups", "staff").output.strip()
    answer = as_json(ok(env, "ask", "When are replayed documents indexed?", "--token", token, "--json"))
    assert answer["answered"] is True and answer["claims"][0]["passage_id"].startswith("test:kb/replayed.md@1")


def test_dlq_list_on_a_clean_home(env: dict[str, str], tmp_path: Path) -> None:
    build_drive(tmp_path / "drive")
    ok(env, "sync", str(tmp_path / "drive"), "--tenant", "acme,globex")

    result = ok(env, "dlq", "list")

    assert result.output.strip() == "no pending dead letters"
