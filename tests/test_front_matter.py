"""YAML front matter (issue 13 item 7): valid YAML is read as YAML, dates keep the one parser's rules."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.base import content_metadata
from connectors.drive import DriveConnector
from connectors.front_matter import read_front_matter
from connectors.scan import scan
from connectors.state import ConnectorState
from schemas.events import Event, UpsertPayload

JAN_1 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ("effective_from: 2026-01-01  # new rules", JAN_1),  # the comment the regex read as part of the date
        ("effective_from: '2026-01-01'", JAN_1),
        ('effective_from: "2026-01-01"   # quoted, commented', JAN_1),
        ("Effective_From: 2026-01-01", JAN_1),  # keys are read case-insensitively, as before
        ("effective_from: 2026-01-01T09:00:00+01:00", datetime(2026, 1, 1, 8, tzinfo=UTC)),
        ("effective_from: 2026-01-01 09:30", datetime(2026, 1, 1, 9, 30, tzinfo=UTC)),  # no offset: UTC
        ("effective_from:", None),
        ("effective_from: ''", None),
        ("title: Refunds", None),
        ("tags: [policy, refunds]\nowner:\n  name: Ann\n  team: finance\neffective_from: 2026-01-01", JAN_1),
        ("effective_from: >-\n  2026-01-01", JAN_1),  # a folded scalar is still the same text
    ],
)
def test_valid_yaml_front_matter_gives_the_date(front: str, expected: datetime | None) -> None:
    meta = content_metadata("markdown", f"---\n{front}\n---\n# Refund policy\n\nWithin 30 days.\n")
    assert meta.effective_from == expected


@pytest.mark.parametrize(
    ("front", "message"),
    [
        ("effective_from: 2026-13-01", "invalid effective_from '2026-13-01': expected YYYY-MM-DD"),
        ("effective_from: 2026-1-5", "invalid effective_from '2026-1-5'"),  # YAML reads it, ragsync never did
        ("effective_from: next tuesday  # soon", "invalid effective_from 'next tuesday'"),
        ("effective_from: 20260101", "invalid effective_from 20260101"),  # numbers are not guessed at
        ("effective_from: true", "invalid effective_from True"),
        ("effective_from: [2026-01-01]", "invalid effective_from ['2026-01-01']"),
        ("effective_from: 0001-01-01T00:00:00+14:00", "effective_from '0001-01-01T00:00:00+14:00' is out of range"),
        ("effective_from: 2026-01-01\neffective_from: 2027-01-01", "key 'effective_from' is given twice"),
        ("effective_from: 2026-01-01\nEFFECTIVE_FROM: 2027-01-01", "key 'EFFECTIVE_FROM' is given twice"),
        ("title: [unclosed", "front matter is not valid YAML"),
        ("title: a\n  - b: c", "front matter is not valid YAML (line 3)"),
        ("- just\n- a list", "front matter must be `key: value` lines (YAML mapping), not a list"),
        ("!!python/object:os.system echo", "front matter is not valid YAML"),  # safe loading only
    ],
)
def test_unreadable_front_matter_is_an_error_naming_the_problem(front: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        content_metadata("markdown", f"---\n{front}\n---\n# Refund policy\n")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value), "one line, for the sync report"


def test_title_and_body() -> None:
    meta = content_metadata("markdown", '---\ntitle: "Refunds: the rules"  # shown in citations\n---\n# Heading\n')
    assert meta.title == "Refunds: the rules"
    assert content_metadata("markdown", "---\ntitle: 2026\n---\n# H\n").title == "2026"
    assert content_metadata("markdown", "---\ntitle: [a, b]\n---\n# From the heading\n").title == "From the heading"
    assert content_metadata("markdown", "---\n---\n# Empty block\n").title == "Empty block"
    empty = read_front_matter("---\n---\ntext\n---\nmore\n")
    assert empty.fields == {} and empty.body == "text\n---\nmore\n", "an empty block never reaches for a later ---"
    crlf = read_front_matter("\ufeff---\r\ntitle: Windows\r\n...\r\nbody\r\n")
    assert crlf.text("title") == "Windows" and crlf.body == "body\r\n"
    assert read_front_matter("no front matter\n---\nx: y\n---\n").fields == {}


async def test_a_commented_date_is_synced_and_a_broken_block_is_that_documents_error(tmp_path: Path) -> None:
    root = tmp_path / "drive"
    root.mkdir()
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (root / "rules.md").write_text("---\neffective_from: 2026-01-01  # new rules\n---\n# Rules\n\nNew rules.\n")
    (root / "broken.md").write_text("---\ntitle: [unclosed\neffective_from: 2026-01-01\n---\n# Broken\n")
    (root / "plain.md").write_text("# Plain\n\nNo front matter.\n")
    events: list[Event] = []
    report = await scan(DriveConnector(root, tenants=["acme"]), ConnectorState(tmp_path / "state.db"), events.append)
    payloads = {e.doc_id: e.payload for e in events}
    assert set(payloads) == {"drive:rules.md", "drive:plain.md"}
    rules = payloads["drive:rules.md"]
    assert isinstance(rules, UpsertPayload) and rules.effective_from == JAN_1 and rules.title == "Rules"
    [error] = report.errors
    assert error.startswith("broken.md: front matter is not valid YAML (line ")
