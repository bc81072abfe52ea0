"""Drive connector, connector state and scanner: what a scan emits, and what it must never emit."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.base import Skipped, SourceConnector, SourceDocument, content_metadata
from connectors.drive import DriveConnector, resolve_access
from connectors.scan import ScanReport, scan
from connectors.state import ConnectorState, DocRecord
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, doc_path, make_event_id

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TENANTS = ("acme", "globex", "t", "initech")
"""What the drive is declared to hold (tests/test_manifest_narrowing.py: what happens to any other)."""
ACME = (
    'tenant = "acme"\nread = ["group:staff"]\n\n[files."board.md"]\nread = ["group:board"]\n\n'
    '[folders."hr"]\nread = ["group:audit", "group:hr", "group:hr-leads", "user:ceo"]\n'
)

FILES = {
    "acme/.ragsync-acl.toml": ACME,
    "acme/policies/refunds.md": "---\neffective_from: 2026-01-01\n---\n# Refund policy\n\nWithin 30 days.\n",
    "acme/policies/.draft.md": "# hidden file\n",
    "acme/.hidden/secret.md": "# hidden folder\n",
    "acme/policies/image.png": "not a document",
    "acme/board.md": "# Board minutes\n\nSecret plans.\n",
    "acme/handbook/onboarding.html": (
        '<html><head><title>Onboarding</title><meta name="effective_from" content="2026-02-01T09:00:00+01:00">'
        "</head><body><h1>Welcome</h1><p>Laptops on day one.</p></body></html>"
    ),
    "acme/hr/.ragsync-acl.toml": 'read = ["group:hr", "user:ceo"]\n',
    "acme/hr/salaries.md": "Salary bands\n============\n\nSenior: 90,000.\n",
    "acme/hr/notes.txt": "plain notes\n",
    "globex/.ragsync-acl.toml": 'tenant = "globex"\nread = []\n',
    "globex/refunds.md": "# Refunds\n\nWithin 14 days.\n",
}


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def touch_later(path: Path) -> None:
    """Change mtime for sure, even on filesystems with coarse timestamps."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


class Harness:
    def __init__(self, root: Path, state_path: Path) -> None:
        self.root = root
        self.state = ConnectorState(state_path)
        self.events: list[Event] = []

    async def run(
        self,
        connector: SourceConnector | None = None,
        *,
        force: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[ScanReport, list[Event]]:
        before = len(self.events)
        report = await scan(
            connector or DriveConnector(self.root, tenants=TENANTS),
            self.state,
            self.events.append,
            now=lambda: NOW,
            force=force,
            progress=progress,
        )
        return report, self.events[before:]


@pytest.fixture
def drive(tmp_path: Path) -> Path:
    root = tmp_path / "drive"
    write(root, FILES)
    return root


@pytest.fixture
def harness(drive: Path, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(drive, tmp_path / "state" / "connectors.db")
    yield h
    h.state.close()


def by_doc(events: list[Event]) -> dict[str, Event]:
    return {doc_path(e.doc_id): e for e in events}


def upsert(event: Event) -> UpsertPayload:
    assert isinstance(event.payload, UpsertPayload)
    return event.payload


async def test_first_scan_emits_upserts_with_tenant_and_acl_from_manifests(harness: Harness, drive: Path) -> None:
    progress: list[int] = []
    report, events = await harness.run(progress=progress.append)
    assert report == ScanReport(upserts=6, errors=[], skipped=[Skipped("acme/policies/image.png", "unsupported type")])
    assert progress == [1] * 6
    assert [doc_path(e.doc_id) for e in events] == [
        "acme/board.md",
        "acme/handbook/onboarding.html",
        "acme/hr/notes.txt",
        "acme/hr/salaries.md",
        "acme/policies/refunds.md",
        "globex/refunds.md",
    ]
    docs = by_doc(events)
    assert all(e.kind is EventKind.UPSERT and e.version == 1 for e in events)
    assert all(e.source == "drive" and e.occurred_at == NOW for e in events)  # the folder's name
    assert all(e.doc_id == f"drive:{doc_path(e.doc_id)}" for e in events), "doc IDs are namespaced by source"

    access = {doc_path(e.doc_id): (e.tenant, upsert(e).acl) for e in events}
    assert access == {
        "acme/board.md": ("acme", ("group:board",)),  # per-file override
        "acme/handbook/onboarding.html": ("acme", ("group:staff",)),  # inherited from acme/
        "acme/hr/notes.txt": ("acme", ("group:hr", "user:ceo")),  # narrowed by hr/, tenant inherited
        "acme/hr/salaries.md": ("acme", ("group:hr", "user:ceo")),
        "acme/policies/refunds.md": ("acme", ("group:staff",)),
        "globex/refunds.md": ("globex", ()),  # read = [] : nobody reads
    }

    refunds = upsert(docs["acme/policies/refunds.md"])
    assert refunds.title == "Refund policy"
    assert refunds.content_type == "markdown"
    assert refunds.content == FILES["acme/policies/refunds.md"]
    assert refunds.effective_from == datetime(2026, 1, 1, tzinfo=UTC)
    assert refunds.source_url == "acme/policies/refunds.md", "relative to the root, never the server's path"
    assert len(refunds.content_hash) == 64

    onboarding = upsert(docs["acme/handbook/onboarding.html"])
    assert onboarding.title == "Onboarding"
    assert onboarding.content_type == "html"
    assert onboarding.effective_from == datetime(2026, 2, 1, 8, 0, tzinfo=UTC)

    assert upsert(docs["acme/hr/salaries.md"]).title == "Salary bands"  # setext heading
    assert upsert(docs["acme/hr/notes.txt"]).title == "notes"  # file stem
    assert upsert(docs["acme/hr/notes.txt"]).content_type == "text"
    assert upsert(docs["acme/hr/notes.txt"]).effective_from is None


async def test_second_scan_emits_nothing_and_reads_nothing(harness: Harness, drive: Path) -> None:
    await harness.run()
    reads: list[str] = []

    class Counting(DriveConnector):
        async def documents(self) -> AsyncIterator[SourceDocument]:
            async for doc in super().documents():

                async def fetch(doc: SourceDocument = doc) -> bytes:
                    reads.append(doc.doc_id)
                    return await doc.fetch()

                yield replace(doc, fetch=fetch)

    report, events = await harness.run(Counting(drive, tenants=TENANTS))
    assert events == []
    assert report == ScanReport(unchanged=6, skipped=[Skipped("acme/policies/image.png", "unsupported type")])
    assert reads == []


async def test_content_edit_emits_upsert_v2_and_touch_without_change_emits_nothing(
    harness: Harness, drive: Path
) -> None:
    await harness.run()
    (drive / "acme/policies/refunds.md").write_text(FILES["acme/policies/refunds.md"].replace("30", "45"))
    touch_later(drive / "acme/board.md")
    report, events = await harness.run()
    assert (report.upserts, report.unchanged, report.acl_changes) == (1, 5, 0)
    [event] = events
    assert (doc_path(event.doc_id), event.kind, event.version) == ("acme/policies/refunds.md", EventKind.UPSERT, 2)
    assert "Within 45 days." in upsert(event).content
    # The touched file was re-read once, found identical, and its new fingerprint stored.
    assert (await harness.run())[1] == []


async def test_manifest_acl_change_emits_acl_event_with_full_acl(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr-leads", "user:ceo", "group:audit"]\n')
    report, events = await harness.run()
    assert (report.upserts, report.acl_changes, report.deletes) == (0, 2, 0)
    assert sorted((doc_path(e.doc_id), e.kind, e.version) for e in events) == [
        ("acme/hr/notes.txt", EventKind.ACL, 2),
        ("acme/hr/salaries.md", EventKind.ACL, 2),
    ]
    for event in events:
        assert event.payload == AclPayload(acl=("group:audit", "group:hr-leads", "user:ceo"))
    assert (await harness.run())[1] == []


async def test_removed_file_emits_delete(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/hr/salaries.md").unlink()
    report, events = await harness.run()
    assert report.deletes == 1 and not report.deletes_skipped
    [event] = events
    assert (event.tenant, doc_path(event.doc_id), event.kind, event.version) == (
        "acme",
        "acme/hr/salaries.md",
        "delete",
        2,
    )
    assert isinstance(event.payload, DeletePayload)
    assert (await harness.run())[1] == [], "a delete is emitted once"


async def test_fetch_error_keeps_its_document_and_does_not_hold_back_deletes(harness: Harness, drive: Path) -> None:
    """Deletions are decided by the complete listing, and published before any content is read
    (issue 18): a listed file that cannot be fetched is seen, so it is never deleted, and it does not
    make another file's removal wait."""
    await harness.run()
    (drive / "globex/refunds.md").unlink()
    (drive / "acme/board.md").write_text("# Board minutes\n\nNew plans.\n")

    class Flaky(DriveConnector):
        async def documents(self) -> AsyncIterator[SourceDocument]:
            async for doc in super().documents():
                if doc.doc_id == "acme/board.md":

                    async def fail() -> bytes:
                        raise PermissionError("permission denied")

                    doc = replace(doc, fetch=fail)
                yield doc

    report, events = await harness.run(Flaky(drive, tenants=TENANTS))
    assert [(doc_path(e.doc_id), e.kind) for e in events] == [("globex/refunds.md", EventKind.DELETE)]
    assert not report.deletes_skipped and report.deletes == 1
    assert report.fetch_failed and not report.complete
    assert report.errors == ["acme/board.md: cannot read: permission denied"]

    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.kind) for e in events] == [("acme/board.md", EventKind.UPSERT)], (
        "the unreadable file is retried; the delete happened once"
    )
    assert report.complete


async def test_symlinks_are_skipped_and_reported_and_a_replaced_file_is_deleted(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/policies/refunds.md").unlink()
    (drive / "acme/policies/refunds.md").symlink_to(drive / "acme/hr/salaries.md")  # an HR file, staff ACL
    (drive / "acme/policies/missing.md").symlink_to(drive / "nowhere.md")
    (drive / "acme/folder.md").mkdir()  # a folder with a document-like name is just a folder
    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.kind) for e in events] == [("acme/policies/refunds.md", EventKind.DELETE)]
    assert report.errors == [] and not report.deletes_skipped
    assert [str(s) for s in report.skipped] == [
        "acme/policies/image.png: unsupported type",
        "acme/policies/missing.md: symlink (links are never followed)",
        "acme/policies/refunds.md: symlink (links are never followed)",
    ]


async def test_invalid_manifest_is_reported_by_name_and_blocks_its_files(harness: Harness, drive: Path) -> None:
    await harness.run()
    manifest = drive / "acme/hr/.ragsync-acl.toml"
    manifest.write_text('read = ["group:hr", "staff"]\n')
    (drive / "acme/hr/new.md").write_text("# New\n")
    report, events = await harness.run()
    assert sorted((doc_path(e.doc_id), e.kind, e.payload) for e in events) == [
        ("acme/hr/notes.txt", EventKind.ACL, AclPayload(acl=())),
        ("acme/hr/salaries.md", EventKind.ACL, AclPayload(acl=())),
    ], "what it governs is readable by nobody (never the old ACL); new.md is not emitted; nothing deleted"
    assert report.deletes_skipped and report.locked == 2
    [error] = report.errors
    assert str(manifest.resolve()) in error
    assert "invalid ACL entry 'staff'" in error

    manifest.write_text('reads = ["group:hr"]\n')
    report, _ = await harness.run()
    assert str(manifest.resolve()) in report.errors[0] and "reads" in report.errors[0]

    manifest.write_text("read = [\n")
    report, _ = await harness.run()
    assert str(manifest.resolve()) in report.errors[0] and "invalid ACL manifest" in report.errors[0]


async def test_file_without_tenant_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "d", {"loose.md": "# Loose\n", "t/.ragsync-acl.toml": 'tenant = "t"\n', "t/a.md": "a"})
    state = ConnectorState(tmp_path / "s.db")
    events: list[Event] = []
    report = await scan(DriveConnector(tmp_path / "d", tenants=TENANTS), state, events.append)
    state.close()
    assert [(e.tenant, doc_path(e.doc_id), upsert(e).acl) for e in events] == [("t", "t/a.md", ())]
    [error] = report.errors
    assert "loose.md" in error and "no tenant" in error
    assert report.deletes_skipped


async def test_a_chain_intersects_and_refuses_a_switch_of_tenant() -> None:
    from connectors.access import ChainError
    from connectors.drive import Manifest

    chain = [("", Manifest(tenant="acme", read=("group:staff",))), ("sub", Manifest(tenant="globex"))]
    with pytest.raises(ChainError, match="tenant 'globex' differs from 'acme'"):
        resolve_access(chain, "sub/x.md")
    chain = [("", Manifest(read=("group:staff",))), ("sub", Manifest(tenant="globex"))]
    assert resolve_access(chain, "sub/x.md") == ("globex", ("group:staff",)), "the first tenant named"
    chain = [("", Manifest(tenant="acme", read=("group:a", "group:b"))), ("sub", Manifest(tenant="acme"))]
    assert resolve_access(chain, "sub/x.md") == ("acme", ("group:a", "group:b"))
    chain = [
        ("", Manifest(tenant="acme", read=("group:a",), files={"sub/x.md": {"read": ["user:u"]}})),  # type: ignore[dict-item]
        ("sub", Manifest(read=("group:b",))),
    ]
    with pytest.raises(ChainError, match=r"grants group:b to sub/x\.md, which the manifests above allow only user:u"):
        resolve_access(chain, "sub/x.md")
    assert resolve_access(chain[:1], "sub/x.md") == ("acme", ("user:u",))
    with pytest.raises(ChainError):
        resolve_access(chain, "sub/y.md")  # group:b is no more granted to y.md than to x.md
    chain = [("", Manifest(tenant="acme", read=("group:a", "group:b"))), ("sub", Manifest(read=("group:b",)))]
    assert resolve_access(chain, "sub/x.md") == ("acme", ("group:b",)), "narrowed"


async def test_manifest_move_to_other_tenant_is_delete_then_upsert(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/.ragsync-acl.toml").write_text(ACME.replace('tenant = "acme"', 'tenant = "initech"'))
    report, events = await harness.run()
    moved = ["acme/board.md", "acme/handbook/onboarding.html", "acme/hr/notes.txt", "acme/hr/salaries.md"]
    moved.append("acme/policies/refunds.md")
    # The listing pass first (every deletion, before any content is read), then the content pass.
    expected = [(EventKind.DELETE, "acme", path, 2) for path in moved]
    expected += [(EventKind.UPSERT, "initech", path, 1) for path in moved]
    assert [(e.kind, e.tenant, doc_path(e.doc_id), e.version) for e in events] == expected
    assert (report.deletes, report.upserts, report.errors) == (5, 5, [])
    assert (await harness.run())[1] == []


async def test_versions_are_monotonic_through_edit_acl_delete_and_return(harness: Harness, drive: Path) -> None:
    path = drive / "acme/board.md"
    history: list[tuple[str, int]] = []
    for step in ("create", "edit", "acl", "delete", "restore"):
        if step == "edit":
            path.write_text("# Board minutes\n\nRevised.\n")
        elif step == "acl":
            (drive / "acme/.ragsync-acl.toml").write_text(
                ACME.replace('read = ["group:board"]', 'read = ["group:board", "user:chair"]')
            )
        elif step == "delete":
            path.unlink()
            (drive / "acme/.ragsync-acl.toml").write_text(
                ACME.replace('[files."board.md"]\nread = ["group:board"]\n', "")
            )
        elif step == "restore":
            path.write_text("# Board minutes\n\nRevised.\n")
        _, events = await harness.run()
        history += [(e.kind.value, e.version) for e in events if doc_path(e.doc_id) == "acme/board.md"]
    assert history == [("upsert", 1), ("upsert", 2), ("acl", 3), ("delete", 4), ("upsert", 5)]


async def test_event_ids_are_deterministic(drive: Path, tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        h = Harness(drive, tmp_path / name / "state.db")
        runs.append([e.event_id for e in (await h.run())[1]])
        h.state.close()
    assert runs[0] == runs[1] and len(set(runs[0])) == 6
    assert runs[0][0] == make_event_id("drive", "acme", "drive:acme/board.md", 1, EventKind.UPSERT)


async def test_failed_publish_leaves_state_so_the_next_run_retries(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/board.md").write_text("# Board\n\nchanged\n")
    failed: list[Event] = []

    def broken(event: Event) -> None:
        failed.append(event)
        raise ConnectionError("log unavailable")

    with pytest.raises(ConnectionError):
        await scan(DriveConnector(drive, tenants=TENANTS), harness.state, broken, now=lambda: NOW)
    _, events = await harness.run()
    # The same change again, under the next version: the failed event may have reached the log
    # (a lost acknowledgement), and one version must never name two events (tests/test_publish_failure.py).
    [retried] = events
    [lost] = failed
    assert (retried.doc_id, retried.kind, retried.version) == (lost.doc_id, lost.kind, lost.version + 1)
    assert retried.payload == lost.payload


async def test_force_reemits_every_document(harness: Harness) -> None:
    await harness.run()
    report, events = await harness.run(force=True)
    assert report.upserts == 6 and {e.version for e in events} == {2}
    assert all(e.kind is EventKind.UPSERT for e in events)


async def test_invalid_effective_date_is_reported_and_keeps_the_old_version(harness: Harness, drive: Path) -> None:
    await harness.run()
    path = drive / "acme/policies/refunds.md"
    path.write_text("---\neffective_from: 2026-13-01\n---\n# Refund policy\n\nWithin 60 days.\n")
    report, events = await harness.run()
    assert events == [] and report.deletes == 0 and not report.deletes_skipped
    [error] = report.errors
    assert "acme/policies/refunds.md" in error and "2026-13-01" in error


def test_content_metadata_forms() -> None:
    md = '---\ntitle: "Given"\neffective_from: 2026-05-01T10:30:00Z\n---\n# Heading\n'
    meta = content_metadata("markdown", md)
    assert meta.title == "Given" and meta.effective_from == datetime(2026, 5, 1, 10, 30, tzinfo=UTC)
    meta = content_metadata("markdown", "---\neffective_from: '2026-05-01 10:30'\n---\nText\n\n## Sub\n")
    assert meta.title == "Sub" and meta.effective_from == datetime(2026, 5, 1, 10, 30, tzinfo=UTC)
    assert content_metadata("markdown", "```\n# not a heading\n```\n").title is None
    html = '<h1>Title<a class="headerlink">¶</a></h1><meta name="effective_from" content="2026-07-01">'
    assert content_metadata("html", html).title == "Title"
    assert content_metadata("text", "# x").title is None


# ------------------------------------------------------------- one document, one error (issue 8 items 2, 3)


async def test_out_of_range_date_is_that_documents_error_and_the_scan_goes_on(harness: Harness, drive: Path) -> None:
    """Was an OverflowError that stopped every later sync, and every revocation and deletion with it."""
    await harness.run()
    (drive / "acme/policies/refunds.md").write_text(
        "---\neffective_from: 0001-01-01T00:00:00+14:00\n---\n# Refund policy\n\nWithin 90 days.\n"
    )
    (drive / "globex/refunds.md").unlink()
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["user:ceo"]\n')
    report, events = await harness.run()
    assert sorted((doc_path(e.doc_id), e.kind) for e in events) == [
        ("acme/hr/notes.txt", EventKind.ACL),
        ("acme/hr/salaries.md", EventKind.ACL),
        ("globex/refunds.md", EventKind.DELETE),
    ]
    [error] = report.errors
    assert error.startswith("acme/policies/refunds.md: effective_from '0001-01-01T00:00:00+14:00' is out of range")
    assert not report.deletes_skipped


async def test_an_unexpected_failure_on_one_document_is_reported_not_raised(
    harness: Harness, drive: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    formats = importlib.import_module("connectors.formats")  # where a fetched file's content is read
    real = formats.content_metadata

    def fragile(content_type: str, text: str) -> object:
        if "Secret plans" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(content_type, text)  # type: ignore[arg-type]

    monkeypatch.setattr(formats, "content_metadata", fragile)
    report, events = await harness.run()
    assert len(events) == 5 and "acme/board.md" not in by_doc(events)
    assert report.errors == ["acme/board.md: cannot index: RecursionError: maximum recursion depth exceeded"]


async def test_a_file_named_with_a_control_character_is_that_files_error(harness: Harness, drive: Path) -> None:
    """Its name would be a doc ID with a newline in every log line: refused by the event schema, as for
    every connector, reported on one line, and the rest of the scan goes on."""
    write(drive, {"acme/policies/a\nWARNING b.md": "# Oops\n\nA file name with a newline.\n"})
    report, events = await harness.run()
    assert len(events) == 6 and not any("\n" in e.doc_id for e in events)
    [error] = report.errors
    assert error.startswith("'acme/policies/a\\nWARNING b.md': invalid document: 1 error(s): doc_id contains")
    assert (
        error.endswith(
            ": doc_id contains the control character U+000A at position 21: IDs appear in log lines and cannot hold one"
        )
        and "\n" not in error
    )
    assert not report.deletes_skipped


async def test_a_document_named_before_the_rule_can_still_be_revoked_and_deleted(harness: Harness, drive: Path) -> None:
    """Indexed before control characters were refused: its ACL changes and its deletion still flow."""
    name = "acme/policies/a\nb.md"
    write(drive, {name: "# Old\n\nIndexed before the rule.\n"})
    harness.state.put("drive", DocRecord("acme", name, 1, "0" * 64, ("group:hr", "group:staff"), "old", deleted=False))
    report, events = await harness.run()
    [acl] = [e for e in events if e.doc_id == f"drive:{name}"]
    assert acl.kind is EventKind.ACL and acl.payload == AclPayload(acl=("group:staff",)), "the revocation flows"
    (drive / name).unlink()
    report, events = await harness.run()
    assert [(e.kind, e.doc_id) for e in events] == [(EventKind.DELETE, f"drive:{name}")] and report.deletes == 1


async def test_acl_change_is_applied_when_the_same_edit_breaks_the_content(harness: Harness, drive: Path) -> None:
    """Issue 8 item 3: the revocation was dropped with the unreadable content; old readers kept reading."""
    await harness.run()
    path = drive / "acme/hr/salaries.md"
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr"]\n')
    path.write_text("---\neffective_from: next tuesday\n---\n# Salary bands\n\nSenior: 95,000.\n")
    report, events = await harness.run()
    by = by_doc(events)
    assert set(by) == {"acme/hr/notes.txt", "acme/hr/salaries.md"}
    assert by["acme/hr/salaries.md"].kind is EventKind.ACL and by["acme/hr/salaries.md"].version == 2
    assert by["acme/hr/salaries.md"].payload == AclPayload(acl=("group:hr",))
    [error] = report.errors
    assert "acme/hr/salaries.md" in error and "next tuesday" in error

    report, events = await harness.run()
    assert events == [] and len(report.errors) == 1, "still broken: reported again, nothing re-emitted"

    path.write_text("# Salary bands\n\nSenior: 95,000.\n")
    report, events = await harness.run()
    [fixed] = events
    assert (fixed.kind, fixed.version, upsert(fixed).acl) == (EventKind.UPSERT, 3, ("group:hr",))
    assert "95,000" in upsert(fixed).content and report.errors == []


async def test_acl_change_is_narrowed_at_once_and_widened_only_with_content_read(harness: Harness, drive: Path) -> None:
    """board.md moves from the board's readers to all staff while its text changes, and the new
    text cannot be read: the board keeps no access it lost (the old readers that the new ACL drops go
    at once), but staff do not get the old minutes either: a wider ACL waits for the content it was
    written for (issue 18, fail closed)."""
    await harness.run()
    (drive / "acme/.ragsync-acl.toml").write_text(ACME.replace('[files."board.md"]\nread = ["group:board"]\n', ""))

    class Unreadable(DriveConnector):
        async def documents(self) -> AsyncIterator[SourceDocument]:
            async for doc in super().documents():
                if doc.doc_id == "acme/board.md":

                    async def fail() -> bytes:
                        raise PermissionError("permission denied")

                    doc = replace(doc, fetch=fail)
                yield doc

    (drive / "acme/board.md").write_text("# Board minutes\n\nChanged.\n")
    report, events = await harness.run(Unreadable(drive, tenants=TENANTS))
    [event] = events
    assert (doc_path(event.doc_id), event.kind) == ("acme/board.md", EventKind.ACL)
    assert event.payload == AclPayload(acl=()), "only the readers both ACLs admit: nobody"
    assert report.errors == ["acme/board.md: cannot read: permission denied"] and not report.complete
    report, events = await harness.run(Unreadable(drive, tenants=TENANTS))
    assert events == [] and len(report.errors) == 1, "still unreadable: still nobody, reported again"
    _, events = await harness.run()
    assert [(e.kind, "Changed." in upsert(e).content, upsert(e).acl) for e in events] == [
        (EventKind.UPSERT, True, ("group:staff",))
    ]


async def test_a_widened_acl_on_unchanged_content_is_applied_in_the_listing_pass(harness: Harness, drive: Path) -> None:
    await harness.run()
    # board.md: staff (the [files] rule goes; the rest of the manifest stays)
    (drive / "acme/.ragsync-acl.toml").write_text(ACME.replace('[files."board.md"]\nread = ["group:board"]\n\n', ""))
    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.payload) for e in events] == [("acme/board.md", AclPayload(acl=("group:staff",)))]
    assert (report.acl_changes, report.upserts) == (1, 0)


# ------------------------------------------------------------------ links and the home are never read (issue 8 item 1)


async def test_links_to_anything_are_never_read(harness: Harness, drive: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "session.secret").write_text("CANARY-SECRET")
    outside = tmp_path / "passwd"
    outside.write_text("root:x:0:0:CANARY-PASSWD")
    (drive / "acme/policies/secret.md").symlink_to(home / "session.secret")
    (drive / "acme/policies/passwd.txt").symlink_to(outside)
    (drive / "acme/policies/hr-link.md").symlink_to(drive / "acme/hr/salaries.md")
    (drive / "acme/policies/hr-folder").symlink_to(drive / "acme/hr", target_is_directory=True)
    (drive / "acme/policies/globex").symlink_to(drive / "globex", target_is_directory=True)
    report, events = await harness.run(DriveConnector(drive, tenants=TENANTS, refuse=[home]))
    assert len(events) == 6, "only the six real files"
    assert all("CANARY" not in upsert(e).content and "Senior" not in upsert(e).content for e in events[:3])
    links = {s.path for s in report.skipped if s.reason == "symlink"}
    assert links == {f"acme/policies/{n}" for n in ("secret.md", "passwd.txt", "hr-link.md", "hr-folder", "globex")}
    assert report.errors == []


async def test_a_hard_link_to_a_file_of_the_home_is_skipped(harness: Harness, drive: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "session.secret").write_text("CANARY-SECRET")
    os.link(home / "session.secret", drive / "acme/policies/secret.md")
    report, events = await harness.run(DriveConnector(drive, tenants=TENANTS, refuse=[home]))
    assert "acme/policies/secret.md" not in by_doc(events)
    assert Skipped("acme/policies/secret.md", "inside the ragsync home", "a hard link to a file of the home") in (
        report.skipped
    )


@pytest.mark.parametrize("where", ["root inside the home", "root contains the home", "root is the home"])
async def test_a_root_inside_or_around_the_home_is_refused(tmp_path: Path, where: str) -> None:
    if where == "root inside the home":
        home, root = tmp_path / "home", tmp_path / "home" / "drive"
    elif where == "root contains the home":
        home, root = tmp_path / "drive" / ".ragsync", tmp_path / "drive"
    else:
        home = root = tmp_path / "drive"
    write(root, {".ragsync-acl.toml": 'tenant = "t"\n', "a.md": "# A\n"})
    home.mkdir(parents=True, exist_ok=True)
    state = ConnectorState(tmp_path / "s.db")
    events: list[Event] = []
    report = await scan(DriveConnector(root, tenants=TENANTS, refuse=[home]), state, events.append)
    state.close()
    assert events == [] and report.deletes_skipped
    [error] = report.errors
    assert "refusing to sync" in error and str(home.resolve()) in error


async def test_a_link_swapped_in_after_the_listing_is_not_followed(drive: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("CANARY")
    docs = [d async for d in DriveConnector(drive, tenants=TENANTS).documents()]
    board = next(d for d in docs if d.doc_id == "acme/board.md")
    (drive / "acme/board.md").unlink()
    (drive / "acme/board.md").symlink_to(secret)
    with pytest.raises(OSError):
        await board.fetch()
    refunds = next(d for d in docs if d.doc_id == "acme/policies/refunds.md")
    (drive / "acme/policies/refunds.md").unlink()
    os.link(secret, drive / "acme/policies/refunds.md")  # another file (inode) at the listed path
    with pytest.raises(OSError, match="replaced since it was listed"):
        await refunds.fetch()


def test_source_url_maps_to_url_base_and_never_shows_the_server_path(drive: Path) -> None:
    import asyncio

    async def urls(connector: DriveConnector) -> dict[str, str]:
        return {d.doc_id: d.source_url async for d in connector.documents()}

    based = asyncio.run(urls(DriveConnector(drive, tenants=TENANTS, url_base="https://drive.example/share/")))
    assert based["acme/hr/salaries.md"] == "https://drive.example/share/acme/hr/salaries.md"
    write(drive, {"acme/Q&A 2026 #1.md": "# QA\n"})
    assert asyncio.run(urls(DriveConnector(drive, tenants=TENANTS, url_base="https://d.example")))[
        "acme/Q&A 2026 #1.md"
    ] == ("https://d.example/acme/Q%26A%202026%20%231.md")
    plain = asyncio.run(urls(DriveConnector(drive, tenants=TENANTS)))
    assert plain["acme/hr/salaries.md"] == "acme/hr/salaries.md"
    assert not any(str(drive) in url for url in plain.values())


# ------------------------------------------------------------------ manifest rules fail closed (issue 8 item 4)


async def test_a_files_key_matching_no_file_is_an_error_and_locks_the_folder(harness: Harness, drive: Path) -> None:
    """Was: `Salaries.md` silently fell back to the folder's wider read (staff read the salaries)."""
    write(drive, {"acme/hr/.ragsync-acl.toml": 'read = ["group:hr"]\n[files."Salaries.md"]\nread = ["user:ceo"]\n'})
    report, events = await harness.run()
    assert "acme/hr/salaries.md" not in by_doc(events), "never published under the folder's read"
    [error] = report.errors
    assert "[files] 'Salaries.md' matches no document; did you mean 'salaries.md'?" in error
    assert str((drive / "acme/hr/.ragsync-acl.toml").resolve()) in error

    (drive / "acme/hr/.ragsync-acl.toml").write_text(
        'read = ["group:hr"]\n[files."salaries.md"]\nread = ["user:ceo"]\n'
    )
    report, events = await harness.run()
    assert upsert(by_doc(events)["acme/hr/salaries.md"]).acl == ("user:ceo",) and report.errors == []


async def test_renaming_a_restricted_file_locks_it_instead_of_opening_it(harness: Harness, drive: Path) -> None:
    await harness.run()
    (drive / "acme/board.md").rename(drive / "acme/board-2026.md")
    report, events = await harness.run()
    assert "acme/board-2026.md" not in {doc_path(e.doc_id) for e in events if e.kind is EventKind.UPSERT}
    assert all(e.payload == AclPayload(acl=()) for e in events if e.kind is EventKind.ACL)
    assert {doc_path(e.doc_id) for e in events} >= {"acme/handbook/onboarding.html", "acme/policies/refunds.md"}
    assert report.deletes_skipped and "'board.md' matches no document" in report.errors[0]


async def test_names_are_compared_in_nfc_and_globs_match_per_segment(harness: Harness, drive: Path) -> None:
    import unicodedata

    nfd = unicodedata.normalize("NFD", "résumé.md")
    write(
        drive,
        {
            f"acme/hr/{nfd}": "# CV\n",
            "acme/hr/old/x.md": "# Old\n",
            "acme/hr/.ragsync-acl.toml": (
                'read = ["group:hr"]\n[files."résumé.md"]\nread = ["group:audit"]\n'  # NFC key, NFD file
                '[files."*.txt"]\nread = ["user:ceo"]\n'
            ),
        },
    )
    report, events = await harness.run()
    assert report.errors == []
    acl = {doc_path(e.doc_id): upsert(e).acl for e in events}
    assert acl[f"acme/hr/{nfd}"] == ("group:audit",)
    assert acl["acme/hr/notes.txt"] == ("user:ceo",), "a glob"
    assert acl["acme/hr/old/x.md"] == ("group:hr",), "* never crosses a folder"
    assert acl["acme/hr/salaries.md"] == ("group:hr",)


async def test_globs_that_disagree_lock_the_document(harness: Harness, drive: Path) -> None:
    write(
        drive,
        {"acme/hr/.ragsync-acl.toml": '[files."*.md"]\nread = ["group:hr"]\n[files."sal*"]\nread = ["group:all"]\n'},
    )
    report, events = await harness.run()
    assert "acme/hr/salaries.md" not in by_doc(events)
    assert any("all match 'salaries.md' with different readers" in e for e in report.errors)


def test_manifest_entries_with_markup_characters_are_clean_errors(tmp_path: Path) -> None:
    from connectors.drive import parse_manifest

    with pytest.raises(ValueError) as caught:
        parse_manifest('read = ["[/]"]\n', "m.toml")
    assert (
        str(caught.value)
        == "m.toml: invalid ACL manifest: read: invalid ACL entry '[/]' (expected 'group:<name>' or 'user:<id>')"
    )


async def test_url_base_from_the_root_manifest(harness: Harness, drive: Path) -> None:
    write(drive, {".ragsync-acl.toml": 'url_base = "https://files.example/acme"\n'})
    _, events = await harness.run()
    assert upsert(by_doc(events)["acme/board.md"]).source_url == "https://files.example/acme/acme/board.md"
    write(drive, {"acme/hr/.ragsync-acl.toml": 'read = ["group:hr"]\nurl_base = "https://x.example"\n'})
    report, _ = await harness.run(DriveConnector(drive, tenants=TENANTS, url_base="https://argument.example"))
    assert any("url_base is only read from the root manifest" in e for e in report.errors)


# ------------------------------------------------------------------ revocations never wait for content (issue 18)


async def test_revocations_moves_and_deletions_are_published_before_any_content_is_read(
    harness: Harness, drive: Path
) -> None:
    """One slow file held back every revocation of its scan (210 s with serve running): now what the
    listing decides is published, and flushed, before the first byte of content is fetched."""
    await harness.run()
    (drive / "acme/hr/.ragsync-acl.toml").write_text('read = ["group:hr"]\n')  # the CEO loses both HR files
    (drive / "acme/hr/salaries.md").write_text("Salary bands\n============\n\nSenior: 95,000.\n")  # and it changed
    (drive / "globex/.ragsync-acl.toml").write_text('tenant = "initech"\nread = []\n')  # globex/ moves tenant
    (drive / "acme/policies/refunds.md").unlink()
    (drive / "acme/board.md").write_text("# Board minutes\n\nNew plans.\n")
    log: list[tuple[str, str, str]] = []

    class Watched(DriveConnector):
        async def documents(self) -> AsyncIterator[SourceDocument]:
            async for doc in super().documents():

                async def fetch(doc: SourceDocument = doc) -> bytes:
                    log.append(("fetch", "", doc.doc_id))
                    return await doc.fetch()

                yield replace(doc, fetch=fetch)

    def publish_many(batch: Sequence[Event]) -> None:
        log.extend(("publish", e.kind.value, doc_path(e.doc_id)) for e in batch)
        harness.events.extend(batch)

    report = await scan(
        Watched(drive, tenants=TENANTS),
        harness.state,
        harness.events.append,
        now=lambda: NOW,
        publish_many=publish_many,
    )
    first_fetch = next(i for i, entry in enumerate(log) if entry[0] == "fetch")
    assert sorted(log[:first_fetch]) == [
        ("publish", "acl", "acme/hr/notes.txt"),
        ("publish", "acl", "acme/hr/salaries.md"),
        ("publish", "delete", "acme/policies/refunds.md"),
        ("publish", "delete", "globex/refunds.md"),
    ], "every revocation, move and deletion before any content"
    assert {entry[2] for entry in log[first_fetch:] if entry[0] == "fetch"} == {
        "acme/board.md",
        "acme/hr/salaries.md",
        "globex/refunds.md",
    }
    events = by_doc(harness.events[-7:])
    assert events["acme/hr/salaries.md"].kind is EventKind.UPSERT and upsert(events["acme/hr/salaries.md"]).acl == (
        "group:hr",
    )
    assert (report.acl_changes, report.deletes, report.upserts, report.errors) == (2, 2, 3, [])
