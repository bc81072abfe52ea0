"""Git wiki connector: a real repository, real commits, the unchanged scanner on top."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connectors.base import Skipped, SourceDocument
from connectors.git_wiki import GitWikiConnector
from connectors.scan import ScanReport, scan
from connectors.state import ConnectorState
from schemas.events import AclPayload, DeletePayload, Event, EventKind, UpsertPayload, doc_path

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TENANTS = ("acme", "globex")
"""What the wiki is declared to hold (tests/test_manifest_narrowing.py: what happens to any other)."""
ACME = (
    'tenant = "acme"\nread = ["group:staff"]\n\n[files."board.md"]\nread = ["group:board"]\n\n'
    '[folders."hr"]\nread = ["group:hr", "group:hr-leads", "user:ceo"]\n'
)

PAGES = {
    "acme/.ragsync-acl.toml": ACME,
    "acme/board.md": "# Board minutes\n\nSecret plans.\n",
    "acme/policies/refunds.md": "---\neffective_from: 2026-01-01\n---\n# Refund policy\n\nWithin 30 days.\n",
    "acme/policies/.draft.md": "# hidden page\n",
    "acme/.github/notes.md": "# hidden folder\n",
    "acme/logo.png": "not a page",
    "acme/hr/.ragsync-acl.toml": 'read = ["group:hr", "user:ceo"]\n',
    "acme/hr/salaries.md": "Salary bands\n============\n\nSenior: 90,000.\n",
    "acme/hr/handbook.html": "<html><head><title>HR handbook</title></head><body><h1>HR</h1></body></html>",
    "globex/.ragsync-acl.toml": 'tenant = "globex"\nread = []\n',
    "globex/faq.txt": "plain FAQ\n",
}


@pytest.fixture(autouse=True)
def hermetic_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No user or system git config (signing, hooks, default branch) leaks into the tests."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key, value in {"NAME": "Wiki Bot", "EMAIL": "bot@example.com", "DATE": "2026-02-01T10:00:00Z"}.items():
        monkeypatch.setenv(f"GIT_AUTHOR_{key}", value)
        monkeypatch.setenv(f"GIT_COMMITTER_{key}", value)


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        done = subprocess.run(["git", "-C", str(self.root), *args], check=True, capture_output=True, text=True)
        return done.stdout.strip()

    def write(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def commit(self, files: dict[str, str] | None = None, message: str = "edit") -> str:
        if files:
            self.write(files)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


class Harness:
    def __init__(self, repo: Repo, state_path: Path) -> None:
        self.repo = repo
        self.state = ConnectorState(state_path)
        self.events: list[Event] = []
        self.fetched: list[str] = []

    def connector(self, **kwargs: Any) -> GitWikiConnector:
        fetched = self.fetched

        class Counting(GitWikiConnector):
            """Records every content fetch: the proof that unchanged pages are never read."""

            async def documents(self) -> AsyncIterator[SourceDocument]:
                async for doc in super().documents():

                    async def fetch(doc: SourceDocument = doc) -> bytes:
                        fetched.append(doc.doc_id)
                        return await doc.fetch()

                    yield replace(doc, fetch=fetch)

        return Counting(self.repo.root, **{"tenants": TENANTS, **kwargs})

    async def run(self, connector: GitWikiConnector | None = None, **kwargs: Any) -> tuple[ScanReport, list[Event]]:
        before = len(self.events)
        self.fetched.clear()
        report = await scan(connector or self.connector(**kwargs), self.state, self.events.append, now=lambda: NOW)
        return report, self.events[before:]


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path / "wiki")
    r.commit(PAGES, "initial import")
    return r


@pytest.fixture
def harness(repo: Repo, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(repo, tmp_path / "state" / "connectors.db")
    yield h
    h.state.close()


def upsert(event: Event) -> UpsertPayload:
    assert isinstance(event.payload, UpsertPayload)
    return event.payload


async def test_first_scan_emits_upserts_with_tenant_and_acl_from_committed_manifests(
    harness: Harness, repo: Repo
) -> None:
    report, events = await harness.run()
    assert [(e.kind, e.tenant, doc_path(e.doc_id), e.version, upsert(e).acl) for e in events] == [
        (EventKind.UPSERT, "acme", "acme/board.md", 1, ("group:board",)),
        (EventKind.UPSERT, "acme", "acme/hr/handbook.html", 1, ("group:hr", "user:ceo")),
        (EventKind.UPSERT, "acme", "acme/hr/salaries.md", 1, ("group:hr", "user:ceo")),
        (EventKind.UPSERT, "acme", "acme/policies/refunds.md", 1, ("group:staff",)),
        (EventKind.UPSERT, "globex", "globex/faq.txt", 1, ()),
    ], "hidden pages and folders, other extensions and manifests are not documents"
    assert report == ScanReport(upserts=5, errors=[], skipped=[Skipped("acme/logo.png", "unsupported type")])

    source = repo.root.name  # the repository's name namespaces its doc IDs
    assert all(e.source == source and e.occurred_at == NOW for e in events)
    assert all(e.doc_id == f"{source}:{doc_path(e.doc_id)}" for e in events)
    head = repo.git("rev-parse", "HEAD")
    refunds = upsert(events[3])
    assert refunds.content == PAGES["acme/policies/refunds.md"]
    assert refunds.title == "Refund policy"
    assert refunds.effective_from == datetime(2026, 1, 1, tzinfo=UTC), "stated in the content"
    assert refunds.source_url == f"git+file://{repo.root.resolve()}#{head}:acme/policies/refunds.md"
    assert upsert(events[1]).title == "HR handbook" and upsert(events[1]).content_type == "html"
    faq = upsert(events[4])
    assert (faq.title, faq.content_type, faq.effective_from) == ("faq", "text", None), "commit time is not a date"


async def test_unchanged_pages_are_never_fetched(harness: Harness, repo: Repo) -> None:
    await harness.run()
    assert len(harness.fetched) == 5
    report, events = await harness.run()
    assert events == [] and harness.fetched == []
    assert report.unchanged == 5

    repo.commit({"acme/board.md": "# Board minutes\n\nNew plans.\n"}, "board: new plans")
    report, events = await harness.run()
    assert harness.fetched == ["acme/board.md"], "only the page whose blob changed is read"
    [event] = events
    assert (event.kind, doc_path(event.doc_id), event.version) == (EventKind.UPSERT, "acme/board.md", 2)
    assert upsert(event).content == "# Board minutes\n\nNew plans.\n"
    assert (report.upserts, report.unchanged) == (1, 4)


async def test_work_tree_edits_are_invisible_until_committed(harness: Harness, repo: Repo) -> None:
    await harness.run()
    repo.write({"acme/board.md": "# uncommitted\n"})
    assert (await harness.run())[1] == []
    repo.commit()
    [event] = (await harness.run())[1]
    assert upsert(event).content == "# uncommitted\n"


async def test_manifest_change_emits_acl_events(harness: Harness, repo: Repo) -> None:
    await harness.run()
    repo.commit({"acme/hr/.ragsync-acl.toml": 'read = ["group:hr-leads", "user:ceo"]\n'}, "hr: leads only")
    report, events = await harness.run()
    assert sorted((doc_path(e.doc_id), e.kind, e.version) for e in events) == [
        ("acme/hr/handbook.html", EventKind.ACL, 2),
        ("acme/hr/salaries.md", EventKind.ACL, 2),
    ]
    assert all(e.payload == AclPayload(acl=("group:hr-leads", "user:ceo")) for e in events)
    assert (report.upserts, report.acl_changes, report.deletes) == (0, 2, 0)
    assert (await harness.run())[1] == []


async def test_git_rm_emits_delete(harness: Harness, repo: Repo) -> None:
    await harness.run()
    repo.git("rm", "-q", "acme/hr/salaries.md")
    repo.commit(message="remove salaries")
    report, events = await harness.run()
    [event] = events
    assert (event.kind, event.tenant, doc_path(event.doc_id), event.version) == (
        EventKind.DELETE,
        "acme",
        "acme/hr/salaries.md",
        2,
    )
    assert isinstance(event.payload, DeletePayload)
    assert report.deletes == 1
    assert (await harness.run())[1] == [], "a delete is emitted once"


async def test_bad_ref_reports_an_error_and_deletes_nothing(harness: Harness, repo: Repo) -> None:
    await harness.run()
    report, events = await harness.run(ref="no-such-branch")
    assert events == [] and report.deletes == 0 and report.deletes_skipped
    [error] = report.errors
    assert "cannot resolve ref 'no-such-branch'" in error and str(repo.root.resolve()) in error

    report, events = await harness.run(connector=GitWikiConnector(repo.root.parent / "missing", tenants=TENANTS))
    assert events == [] and report.deletes_skipped and "cannot resolve ref 'HEAD'" in report.errors[0]


async def test_other_refs_and_branch_switch_emit_only_differences(harness: Harness, repo: Repo) -> None:
    first = repo.git("rev-parse", "HEAD")
    repo.commit({"acme/board.md": "# Board minutes\n\nv2\n"})
    _, events = await harness.run(ref=first)
    assert len(events) == 5 and "Secret plans." in upsert(events[0]).content
    _, events = await harness.run(ref="main")
    assert [(doc_path(e.doc_id), e.version) for e in events] == [("acme/board.md", 2)]


async def test_unreadable_blob_is_a_fetch_error_and_does_not_hold_back_deletes(harness: Harness, repo: Repo) -> None:
    """The tree at the ref is the listing: complete, so a page removed from it is deleted in the
    listing pass, before any blob is read (issue 18); a page whose blob is missing is seen, kept and
    reported."""
    await harness.run()
    repo.git("rm", "-q", "globex/faq.txt")
    repo.commit({"acme/board.md": "# Board minutes\n\nA unique revision 7f3a.\n"}, "edit + remove")
    blob = repo.git("rev-parse", "HEAD:acme/board.md")
    (repo.root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # a corrupt / partial clone

    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.kind) for e in events] == [("globex/faq.txt", EventKind.DELETE)]
    assert not report.deletes_skipped and report.fetch_failed and not report.complete
    [error] = report.errors
    assert error.startswith("acme/board.md: cannot read:")

    repo.write({"acme/board.md": "# Board minutes\n\nA unique revision 7f3a.\n"})
    repo.git("hash-object", "-w", "acme/board.md")  # the object is back
    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.kind) for e in events] == [("acme/board.md", EventKind.UPSERT)], (
        "the unreadable page is retried; the delete happened once"
    )
    assert report.complete


async def test_broken_manifest_is_reported_by_name_and_blocks_its_pages(harness: Harness, repo: Repo) -> None:
    await harness.run()
    repo.git("rm", "-q", "acme/hr/salaries.md")
    repo.commit({"acme/hr/.ragsync-acl.toml": 'reads = ["group:hr"]\n', "acme/hr/new.md": "# New\n"}, "typo")
    report, events = await harness.run()
    assert [(doc_path(e.doc_id), e.kind, e.payload) for e in events] == [
        ("acme/hr/handbook.html", EventKind.ACL, AclPayload(acl=())),
        ("acme/hr/salaries.md", EventKind.ACL, AclPayload(acl=())),  # removed, not deleted yet: locked too
    ], "what it governs is readable by nobody (never the old ACL); new.md is not emitted; nothing deleted"
    assert report.deletes_skipped
    [error] = report.errors
    assert f"{repo.root.resolve()}@HEAD:acme/hr/.ragsync-acl.toml" in error
    assert "invalid ACL manifest" in error and "reads" in error

    repo.commit({"acme/hr/.ragsync-acl.toml": 'read = ["group:hr", "staff"]\n'})
    report, _ = await harness.run()
    assert "invalid ACL entry 'staff'" in report.errors[0]


async def test_symlinked_manifest_is_broken_and_symlinked_pages_are_skipped(harness: Harness, repo: Repo) -> None:
    await harness.run()
    (repo.root / "globex/.ragsync-acl.toml").unlink()
    (repo.root / "globex/.ragsync-acl.toml").symlink_to("../acme/.ragsync-acl.toml")
    (repo.root / "acme/link.md").symlink_to("board.md")
    repo.commit()
    report, events = await harness.run()
    assert events == [] and report.deletes_skipped
    [error] = report.errors
    assert "globex/.ragsync-acl.toml" in error and "not a regular file" in error


async def test_subdir_bare_clone_and_url_template(harness: Harness, repo: Repo, tmp_path: Path) -> None:
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(bare)], check=True)
    connector = GitWikiConnector(
        bare, tenants=TENANTS, ref="main", subdir="/acme/", url_template="https://wiki.example/{doc_id}"
    )
    assert (connector.name, connector.location) == ("mirror", f"git:{bare.resolve()}:acme")
    docs = [d async for d in connector.documents()]
    assert connector.errors == []
    assert [(d.doc_id, d.tenant, d.acl) for d in docs] == [
        ("board.md", "acme", ("group:board",)),  # the [files] entry is relative to the manifest's folder
        ("hr/handbook.html", "acme", ("group:hr", "user:ceo")),
        ("hr/salaries.md", "acme", ("group:hr", "user:ceo")),
        ("policies/refunds.md", "acme", ("group:staff",)),
    ]
    assert docs[0].source_url == "https://wiki.example/board.md"
    assert docs[0].fingerprint == repo.git("rev-parse", "HEAD:acme/board.md"), "the blob SHA"
    assert await docs[0].fetch() == PAGES["acme/board.md"].encode()

    missing = GitWikiConnector(bare, tenants=TENANTS, subdir="nowhere")
    assert [d async for d in missing.documents()] == []
    assert "subdir 'nowhere' is not a folder" in missing.errors[0], "a typo must not look like an empty wiki"


async def test_page_without_tenant_is_an_error_and_blocks_deletes(harness: Harness, repo: Repo) -> None:
    await harness.run()
    repo.git("rm", "-q", "globex/faq.txt")
    repo.commit({"README.md": "# Wiki\n"}, "a page outside every tenant")
    report, events = await harness.run()
    assert events == [] and report.deletes_skipped
    [error] = report.errors
    assert f"{repo.root.resolve()}@HEAD:README.md: no tenant" in error


def test_constructor_rejects_unsafe_arguments(tmp_path: Path) -> None:
    unsafe: list[dict[str, Any]] = [
        {"ref": "--output=/tmp/x"},
        {"ref": ""},
        {"subdir": "../etc"},
        {"url_template": "{x}"},
        {"tenants": ["not a tenant"]},
    ]
    for kwargs in unsafe:
        with pytest.raises(ValueError):
            GitWikiConnector(tmp_path, **{"tenants": TENANTS, **kwargs})
    path_with_space = GitWikiConnector(tmp_path / "my wiki", tenants=TENANTS)
    assert path_with_space.name == "my-wiki"
    assert path_with_space.location == f"git:{(tmp_path / 'my wiki').resolve()}:"


async def test_a_files_key_matching_no_page_is_an_error_and_locks_its_pages(harness: Harness, repo: Repo) -> None:
    await harness.run()
    manifest = 'tenant = "acme"\nread = ["group:staff"]\n[files."Board.md"]\nread = ["group:board"]\n'
    repo.commit({"acme/.ragsync-acl.toml": manifest})
    report, events = await harness.run()
    assert {doc_path(e.doc_id) for e in events} == {
        "acme/board.md",
        "acme/policies/refunds.md",
        "acme/hr/salaries.md",
        "acme/hr/handbook.html",
    }, "every page below the manifest"
    assert all(e.payload == AclPayload(acl=()) for e in events), "locked, never opened to staff"
    assert "[files] 'Board.md' matches no document; did you mean 'board.md'?" in report.errors[0]
