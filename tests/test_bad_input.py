"""Bad input (issue 8): each bad document is its own reported error or dead letter; nothing else is lost.

One drive scan holds a poisoned file of every kind beside good documents, and in the same scan a
revocation and a deletion; the event log also receives malformed records. Afterwards the good
documents answer, the revocation and the deletion are applied, every bad input is reported (sync
report) or dead-lettered (with a reason), and `ragsync verify` finds no drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import MODEL_PATH

from connectors.drive import DriveConnector
from query.tokens import issue_token
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.verify import verify
from ragsync.wiring import build
from schemas.principal import Principal
from streams.ports import TOPIC_ACL, TOPIC_DLQ, TOPIC_DOCUMENTS

LIMIT = 8 * 1024 * 1024

BAD_FILES: dict[str, bytes] = {
    "acme/binary.md": bytes(range(256)) * 4,
    "acme/latin1.md": "# Café\n\nCrème brûlée is served on Fridays.\n".encode("latin-1"),
    "acme/broken.html": b"<html><body><h1>Broken<div><p>unclosed <b>tags <table><tr><td>cell",
    "acme/impossible-date.md": b"---\neffective_from: 0001-01-01T00:00:00+14:00\n---\n# Old\n\nNever.\n",
    "acme/bad-month.md": b"---\neffective_from: 2026-13-45\n---\n# Bad\n\nNope.\n",
    "acme/one-line.txt": b"word. " * 50_000,  # a 300 KB single line of sentences
    "acme/huge.txt": b"x" * (LIMIT + 1024),  # above the configured limit (a 10 MB-class single line)
}
BAD_RECORDS: list[tuple[str, bytes]] = [
    (TOPIC_DOCUMENTS, b"{not json"),
    (TOPIC_DOCUMENTS, json.dumps({"kind": "rename", "doc_id": "drive:x"}).encode()),
    (TOPIC_ACL, json.dumps({"event_id": 5, "kind": "acl", "tenant": ["acme"], "version": "two"}).encode()),
    (TOPIC_DOCUMENTS, b"\xff\xfe\x00binary"),
]


def test_poisoned_files_and_records_among_good_ones_lose_nothing(tmp_path: Path) -> None:
    drive = tmp_path / "drive"
    good = {
        "acme/.ragsync-acl.toml": (
            b'tenant = "acme"\nread = ["group:staff"]\n[folders."hr"]\nread = ["group:hr", "group:hr-leads"]\n'
        ),
        "acme/hr/.ragsync-acl.toml": b'read = ["group:hr"]\n',
        "acme/hr/salaries.md": b"# Salaries\n\nThe senior band is 90,000 EUR.\n",
        "acme/refunds.md": b"# Refunds\n\nRefunds are paid within 14 days.\n",
        "acme/old.md": b"# Old\n\nThe fax number is 555-0100.\n",
    }
    for rel, data in good.items():
        (drive / rel).parent.mkdir(parents=True, exist_ok=True)
        (drive / rel).write_bytes(data)
    settings = Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="b" * 32)
    components = build(settings)
    try:
        first = sync_source(components, DriveConnector(drive, tenants=["acme"], max_bytes=LIMIT))
        assert first.scan.errors == [] and first.scan.upserts == 3

        for rel, data in BAD_FILES.items():
            (drive / rel).write_bytes(data)
        (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads"]\n')  # a revocation
        (drive / "acme/old.md").unlink()  # a deletion
        for topic, value in BAD_RECORDS:
            components.events.publish_raw(topic, "acme/drive:x", value)
        second = sync_source(components, DriveConnector(drive, tenants=["acme"], max_bytes=LIMIT))
        reported = " ".join(second.scan.errors) + " " + " ".join(f"{s.path}:{s.reason}" for s in second.scan.skipped)
        for rel in ("acme/binary.md", "acme/impossible-date.md", "acme/bad-month.md", "acme/huge.txt"):
            assert rel in reported, f"{rel} is reported per document: {reported}"
        assert second.scan.acl_changes == 1 and second.scan.deletes == 1, "the revocation and the deletion still go"
        assert second.stats is not None and second.stats.dead_lettered == len(BAD_RECORDS)
        letters = [json.loads(r.value) for r in components.events.poll(TOPIC_DLQ, "inspect", 100)]
        assert len(letters) == len(BAD_RECORDS) and all(letter["reason"] for letter in letters)

        worker = components.query_worker()
        hal = issue_token(settings.secret(), Principal(tenant="acme", user="hal", groups=("hr",)))
        ann = issue_token(settings.secret(), Principal(tenant="acme", user="ann", groups=("staff",)))
        assert not worker.ask_with_token(hal, "What is the senior salary band?").answered, "revoked"
        assert "14 days" in (worker.ask_with_token(ann, "How fast are refunds paid?").answer or "")
        assert not worker.ask_with_token(ann, "What is the fax number?").answered, "deleted"
        assert components.lexical.count("acme", "drive:acme/old.md") == 0
        latin = worker.ask_with_token(ann, "When is crème brûlée served?")
        assert "\ufffd" not in (latin.answer or ""), "never replacement characters"
        assert components.lexical.count("acme", "drive:acme/one-line.txt") > 0, "a long single line is indexed"

        report = verify(components)
        assert report.drift == [] and report.pending == [], report.as_dict()
    finally:
        components.close()
