"""Doc IDs are namespaced by source: no source (a pusher, a second drive, a wiki) touches another's documents.

Regression for issue 8 item 6: two webhook pushes with `doc_id=acme/hr/salaries.md` used to re-ACL
the drive's own HR document (every version), because every store keyed documents by
(tenant, doc_id) for all sources alike.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from starlette.testclient import TestClient

from connectors.state import ConnectorState, SourceConflict
from connectors.webhook import signed_headers
from query.tokens import issue_token
from ragsync.cli import main
from ragsync.demo import TENANTS, build_drive
from ragsync.pipeline import sync_folder
from ragsync.server import server_app
from ragsync.settings import Settings
from ragsync.wiring import build
from schemas.events import (
    AclPayload,
    DeletePayload,
    Event,
    EventKind,
    UpsertPayload,
    make_event_id,
    split_doc_id,
    valid_source_name,
)
from schemas.principal import Principal
from streams.embedded_worker import EmbeddedWorker
from streams.ports import TOPIC_ACL, TOPIC_DLQ

HOOK_SECRET = "pusher-secret-0123456789"
SALARY_Q = "What is the salary band for a senior engineer?"


def _settings(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(home=tmp_path / "home", embed_model_path=None, session_secret="s", **extra)


def _ask(client: TestClient, principal: Principal, question: str) -> dict[str, Any]:
    token = issue_token("s", principal)
    response = client.post("/v1/ask", json={"question": question}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_pusher_cannot_re_acl_a_drive_document(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    settings = _settings(tmp_path, webhooks={"kb": {"secret": HOOK_SECRET, "tenants": ["acme"]}})
    components = build(settings)
    try:
        sync_folder(components, drive, tenants=TENANTS)
        before = components.docs.get("acme", "drive:acme/hr/salaries.md")
        assert before is not None and before.acl == ("group:hr",)
        client = TestClient(server_app(components))
        # The attack of the issue: the drive's path, and the drive's full ID, pushed twice, readable by staff.
        for doc_id in ("acme/hr/salaries.md", "drive:acme/hr/salaries.md"):
            for seq, content in enumerate(("# Salary bands\n\nPushed copy.\n", "# Salary bands\n\nPushed again.\n")):
                push = {"action": "upsert", "tenant": "acme", "doc_id": doc_id, "content": content, "sequence": seq}
                body = json.dumps({**push, "acl": ["group:staff"]}).encode()
                headers = signed_headers(HOOK_SECRET, body, int(time.time()))
                pushed = client.post("/v1/webhooks/kb", content=body, headers=headers)
                assert pushed.status_code == 202, pushed.text
        assert EmbeddedWorker(components.events, components.sink()).drain().applied == 4

        after = components.docs.get("acme", "drive:acme/hr/salaries.md")
        assert after is not None and (after.acl, after.applied_version) == (("group:hr",), before.applied_version)
        for pushed_id in ("kb:acme/hr/salaries.md", "kb:drive:acme/hr/salaries.md"):
            state = components.docs.get("acme", pushed_id)
            assert state is not None and state.acl == ("group:staff",), pushed_id
        ann = Principal(tenant="acme", user="ann", groups=("staff",))
        answer = _ask(client, ann, SALARY_Q)
        assert "90,000" not in json.dumps(answer), "staff never read the drive's HR document"
        assert all(split_doc_id(c["passage_id"])[0] == "kb" for c in answer.get("claims", []))
        hal = Principal(tenant="acme", user="hal", groups=("hr",))
        assert "90,000" in _ask(client, hal, SALARY_Q)["answer"], "the drive's own readers still read it"
    finally:
        components.close()


def test_the_indexer_dead_letters_an_event_outside_its_source_namespace(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    components = build(_settings(tmp_path))
    try:
        sync_folder(components, drive, tenants=TENANTS)
        forged = {
            "event_id": make_event_id("kb", "acme", "drive:acme/hr/salaries.md", 9, EventKind.ACL),
            "kind": "acl",
            "tenant": "acme",
            "doc_id": "drive:acme/hr/salaries.md",
            "version": 9,
            "source": "kb",
            "payload": AclPayload(acl=("group:staff",)).model_dump(mode="json"),
        }
        components.events.publish_raw(TOPIC_ACL, "acme/drive:acme/hr/salaries.md", json.dumps(forged).encode())
        stats = EmbeddedWorker(components.events, components.sink()).drain()
        assert (stats.dead_lettered, stats.applied) == (1, 0)
        [letter] = [json.loads(r.value) for r in components.events.poll(TOPIC_DLQ, "inspect", 10)]
        assert "source 'kb' does not own document 'drive:acme/hr/salaries.md'" in letter["reason"]
        state = components.docs.get("acme", "drive:acme/hr/salaries.md")
        assert state is not None and state.acl == ("group:hr",)
    finally:
        components.close()


@pytest.mark.parametrize(
    ("doc_id", "source"),
    [("acme/hr/salaries.md", "drive"), ("kb:x", "drive"), ("Drive:x", "Drive"), ("drive:", "drive")],
)
def test_an_event_must_be_namespaced_by_its_own_source(doc_id: str, source: str) -> None:
    with pytest.raises(ValueError, match=r"namespaced|does not own|source"):
        Event(
            event_id="e" * 16,
            kind=EventKind.ACL,
            tenant="acme",
            doc_id=doc_id,
            version=1,
            source=source,
            payload=AclPayload(acl=()),
        )


def _event(kind: EventKind, doc_id: str, event_id: str = "e" * 16) -> Event:
    payload = {
        EventKind.UPSERT: UpsertPayload(content="x", content_type="text", content_hash="h" * 8, acl=(), source_url=""),
        EventKind.ACL: AclPayload(acl=()),
        EventKind.DELETE: DeletePayload(),
    }[kind]
    return Event(event_id=event_id, kind=kind, tenant="acme", doc_id=doc_id, version=1, source="kb", payload=payload)


@pytest.mark.parametrize("char", ["\x00", "\n", "\r", "\x1b", "\x7f", "\x85", "\u2028"])
def test_ids_with_control_characters_are_refused_at_the_schema(char: str) -> None:
    """A doc ID with a newline or a NUL forged or cut every log line that named it (issue 18)."""
    with pytest.raises(
        ValidationError, match=f"doc_id contains the control character U\\+{ord(char):04X} at position 5"
    ):
        _event(EventKind.UPSERT, f"kb:ab{char}c")
    with pytest.raises(ValidationError, match="event_id"):
        _event(EventKind.DELETE, "kb:abc", event_id=f"{'e' * 16}{char}")
    with pytest.raises(ValidationError, match="acl"):
        AclPayload(acl=(f"group:staff{char}",))
    with pytest.raises(ValidationError, match="tenant"):
        Event.model_validate({**_event(EventKind.ACL, "kb:x").model_dump(), "tenant": f"acme{char}"})
    assert not valid_source_name(f"kb{char}") and not valid_source_name(f"{char}kb")
    with pytest.raises(ValueError, match="not namespaced"):
        split_doc_id(f"kb{char}:path")
    # A document indexed before the rule can still lose its readers and be deleted: never frozen.
    assert _event(EventKind.ACL, f"kb:ab{char}c").doc_id == f"kb:ab{char}c"
    assert _event(EventKind.DELETE, f"kb:ab{char}c").doc_id == f"kb:ab{char}c"


def test_a_manifest_entry_ending_in_a_newline_is_refused() -> None:
    """re.match's '$' matches before a final newline: "group:staff\\n" passed the manifest check."""
    from connectors.drive import parse_manifest

    with pytest.raises(ValueError, match=re.escape("invalid ACL entry 'group:staff\\n'")):
        parse_manifest('read = ["group:staff\\n"]\n', "m.toml")


def _cli(tmp_path: Path, *args: str) -> Any:
    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_EMBED_MODEL_PATH": str(tmp_path / "none"),
        "RAGSYNC_SESSION_SECRET": "s",
        "RAGSYNC_CONFIG": "/dev/null",
    }
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_two_drives_with_one_name_are_refused_until_one_is_renamed(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "docs", tmp_path / "b" / "docs"
    build_drive(first)
    build_drive(second)
    (second / "acme/hr/salaries.md").write_text("# Salary bands\n\nA second drive's copy.\n")
    assert _cli(tmp_path, "sync", str(first), "--tenant", "acme,globex", "--json").exit_code == 0
    refused = _cli(tmp_path, "sync", str(second), "--tenant", "acme,globex", "--json")
    assert refused.exit_code == 2
    assert f"source name 'docs' already belongs to drive:{first.resolve()}" in refused.output
    assert "--source" in refused.output

    renamed = _cli(tmp_path, "sync", str(second), "--tenant", "acme,globex", "--source", "docs-b", "--json")
    assert renamed.exit_code == 0 and json.loads(renamed.output)["upserts"] == 4
    assert json.loads(_cli(tmp_path, "sync", str(first), "--tenant", "acme,globex", "--json").output)["upserts"] == 0, (
        "first drive untouched"
    )
    components = build(_settings(tmp_path), with_embedder=False)
    try:
        assert components.lexical.count("acme", "docs:acme/hr/salaries.md") >= 1
        assert components.lexical.count("acme", "docs-b:acme/hr/salaries.md") >= 1
    finally:
        components.close()
    bad = _cli(tmp_path, "sync", str(second), "--tenant", "acme,globex", "--source", "Not Valid")
    assert bad.exit_code == 2 and "invalid source name" in bad.output


def test_a_webhook_cannot_take_a_drive_s_name(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    build_drive(drive)
    settings = _settings(tmp_path, webhooks={"drive": {"secret": HOOK_SECRET, "tenants": ["acme"]}})
    components = build(settings)
    try:
        sync_folder(components, drive, tenants=TENANTS)
        with pytest.raises(SourceConflict, match="source name 'drive' already belongs to drive:"):
            server_app(components)
    finally:
        components.close()


def test_a_home_from_before_namespacing_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ConnectorState(home / "connectors.db").close()
    with sqlite3.connect(home / "connectors.db") as db:
        db.execute(
            "INSERT INTO connector_docs VALUES ('drive:/srv/docs', 'acme', 'a.md', 1, 'h', '[]', 'f', 0)",
        )
    drive = tmp_path / "drive"
    build_drive(drive)
    result = _cli(tmp_path, "sync", str(drive), "--tenant", "acme,globex")
    assert result.exit_code == 2 and "before doc IDs were namespaced by source" in result.output
