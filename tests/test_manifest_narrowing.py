"""Manifests narrow, never widen; a source owns its tenants (issue 18 item 2): adversarial manifests.

The finding: acme/.ragsync-acl.toml says `[files."shared/secret.md"] read = ["group:hr"]`; a writer of
acme/shared/ adds `read = ["group:staff"]` there and the HR-only file became staff-readable (the
nearest `read` won), or `tenant = "globex"` and the folder's files left acme for globex.

Every case starts from a synced tree, lets a writer of one folder change what they can write, and
syncs again through the real connector (drive folder and git wiki alike) and scanner. A case that
tries to widen, to switch tenant or to hide a manifest must lock the folder of the offending manifest
(its indexed documents get an ACL event with no readers, new ones are not published), report it in
one line naming the manifest, and change nothing else. Positive controls show the legitimate ways:
narrowing, and a parent granting a subfolder more with `[folders]`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from manifest_trees import KINDS, Entry, Link, Tree, manifest_text

from connectors.scan import scan
from connectors.state import ConnectorState
from schemas.events import AclPayload, Event, EventKind, doc_path

TENANTS = ("acme", "globex")


def acme(**folders: list[str]) -> str:
    """acme's own manifest (its writer decides for all of acme/), with `[folders]` grants when given.

    The base grants no `[folders]`, so the widening cases also run on the code before this fix."""
    board = ["group:board", "group:staff"]
    files = {"shared/secret.md": ["group:hr"], "vault/*.md": board, "vault/deep/*.md": board}
    return manifest_text(tenant="acme", read=["group:staff"], files=files, folders=folders)


BASE: dict[str, Entry] = {
    "acme/.ragsync-acl.toml": acme(),
    "acme/intro.md": "# Intro\n",
    "acme/shared/secret.md": "# Secret\n\nHR only.\n",
    "acme/shared/plan.md": "# Plan\n",
    "acme/shared/résumé.md": "# CV\n",
    "acme/vault/minutes.md": "# Minutes\n",
    "acme/vault/deep/notes.md": "# Notes\n",
    "globex/.ragsync-acl.toml": manifest_text(tenant="globex", read=["group:staff"]),
    "globex/faq.md": "# FAQ\n",
}
BASE_ACL: dict[str, tuple[str, ...]] = {
    "acme/intro.md": ("group:staff",),
    "acme/shared/secret.md": ("group:hr",),
    "acme/shared/plan.md": ("group:staff",),
    "acme/shared/résumé.md": ("group:staff",),
    "acme/vault/minutes.md": ("group:board", "group:staff"),
    "acme/vault/deep/notes.md": ("group:board", "group:staff"),
    "globex/faq.md": ("group:staff",),
}
SHARED = {"acme/shared/secret.md", "acme/shared/plan.md", "acme/shared/résumé.md"}
VAULT = {"acme/vault/minutes.md", "acme/vault/deep/notes.md"}
NFD_CAFE = unicodedata.normalize("NFD", "café")
NFD_RESUME = unicodedata.normalize("NFD", "résumé.md")


@dataclass(frozen=True)
class Case:
    name: str
    change: dict[str, Entry]
    locked: set[str] = field(default_factory=set)  # documents readable by nobody afterwards (new ones too)
    errors: tuple[str, ...] = ()  # each in one error line, with `manifest` named in it
    manifest: str = "acme/shared/.ragsync-acl.toml"
    acl: dict[str, tuple[str, ...]] = field(default_factory=dict)  # legitimate changes (and new documents)

    def __str__(self) -> str:
        return self.name


def m(**kwargs: object) -> str:
    return manifest_text(**kwargs)  # type: ignore[arg-type]


CASES = [
    # --- widening readers
    Case(
        "the finding: a nested read overrides a [files] rule above",
        {"acme/shared/.ragsync-acl.toml": m(read=["group:staff"])},
        SHARED,
        ("grants group:staff to acme/shared/secret.md, which the manifests above allow only group:hr",),
    ),
    Case(
        "a nested read adds a group",
        {"acme/vault/.ragsync-acl.toml": m(read=["group:board", "group:contractors", "group:staff"])},
        VAULT,
        ("grants group:contractors to acme/vault/",),
        "acme/vault/.ragsync-acl.toml",
    ),
    Case(
        "a nested read names a user",
        {"acme/shared/.ragsync-acl.toml": m(read=["user:mallory"])},
        SHARED,
        ("user:mallory",),
    ),
    Case(
        "an entry spelled in another case is another reader",
        {"acme/shared/.ragsync-acl.toml": m(read=["group:Staff"])},
        SHARED,
        ("grants group:Staff",),
    ),
    Case(
        "a nested [files] rule widens the restricted file",
        {"acme/shared/.ragsync-acl.toml": m(files={"secret.md": ["group:hr", "group:staff"]})},
        SHARED,
        ("grants group:staff to acme/shared/secret.md",),
    ),
    Case(
        "a nested [files] glob widens",
        {"acme/shared/.ragsync-acl.toml": m(files={"*.md": ["group:hr"]})},
        SHARED,
        ("grants group:hr to acme/shared/plan.md, which the manifests above allow only group:staff",),
    ),
    Case(
        "a nested [files] key reaches two folders down",
        {"acme/vault/.ragsync-acl.toml": m(files={"deep/notes.md": ["user:mallory"]})},
        VAULT,
        ("grants user:mallory to acme/vault/deep/notes.md",),
        "acme/vault/.ragsync-acl.toml",
    ),
    Case(
        "a nested [folders] rule widens a subfolder",
        {"acme/vault/.ragsync-acl.toml": m(folders={"deep": ["group:auditors", "group:board"]})},
        VAULT,
        ("grants group:auditors to acme/vault/deep/notes.md",),
        "acme/vault/.ragsync-acl.toml",
    ),
    Case(
        "a deeper manifest widens what the middle one narrowed",
        {
            "acme/vault/.ragsync-acl.toml": m(read=["group:board"]),
            "acme/vault/deep/.ragsync-acl.toml": m(read=["group:staff"]),
        },
        {"acme/vault/deep/notes.md"},
        ("grants group:staff to acme/vault/deep/notes.md, which the manifests above allow only group:board",),
        "acme/vault/deep/.ragsync-acl.toml",
        {"acme/vault/minutes.md": ("group:board",)},
    ),
    Case(
        "a grant below read = []",
        {
            "acme/shared/.ragsync-acl.toml": m(read=[]),
            "acme/shared/inner/.ragsync-acl.toml": m(read=["group:staff"]),
            "acme/shared/inner/x.md": "# X\n",
        },
        {"acme/shared/inner/x.md"},
        ("allow only nobody",),
        "acme/shared/inner/.ragsync-acl.toml",
        {"acme/shared/secret.md": (), "acme/shared/plan.md": (), "acme/shared/résumé.md": ()},
    ),
    Case(
        "an NFD [files] key widens an NFC file",
        {"acme/shared/.ragsync-acl.toml": m(files={NFD_RESUME: ["group:staff", "user:mallory"]})},
        SHARED,
        ("grants user:mallory to acme/shared/résumé.md",),
    ),
    Case(
        "a manifest in an NFD-named folder widens what the NFC [folders] key above grants",
        {
            "acme/.ragsync-acl.toml": acme(café=["group:chefs"]),
            f"acme/{NFD_CAFE}/menu.md": "# Menu\n",
            f"acme/{NFD_CAFE}/.ragsync-acl.toml": m(read=["group:chefs", "user:mallory"]),
        },
        {f"acme/{NFD_CAFE}/menu.md"},
        ("grants user:mallory to acme/café/menu.md",),
        f"acme/{NFD_CAFE}/.ragsync-acl.toml",
    ),
    Case(
        "two folders named alike in NFC and NFD, one with a manifest",
        {
            "acme/café/.ragsync-acl.toml": m(read=[]),
            "acme/café/a.md": "# A\n",
            f"acme/{NFD_CAFE}/b.md": "# B\n",
        },
        {"acme/café/a.md", f"acme/{NFD_CAFE}/b.md"},
        ("two folders have this name in different Unicode forms",),
        "acme/café/.ragsync-acl.toml",
    ),
    # --- tenants
    Case(
        "a nested manifest moves its folder to another declared tenant",
        {"acme/shared/.ragsync-acl.toml": m(tenant="globex", read=["group:staff"])},
        SHARED,
        ("tenant 'globex' differs from 'acme' named above it",),
    ),
    Case(
        "a nested manifest names an undeclared tenant",
        {"acme/shared/.ragsync-acl.toml": m(tenant="initech")},
        SHARED,
        ("tenant 'initech' is not declared for this source (declared: acme, globex;",),
    ),
    Case(
        "a new top-level folder names an undeclared tenant",
        {"evil/.ragsync-acl.toml": m(tenant="initech", read=["group:staff"]), "evil/x.md": "# X\n"},
        {"evil/x.md"},
        ("tenant 'initech' is not declared",),
        "evil/.ragsync-acl.toml",
    ),
    Case(
        "a tenant's own manifest switches to an undeclared tenant",
        {"globex/.ragsync-acl.toml": m(tenant="initech", read=["group:staff"])},
        {"globex/faq.md"},
        ("tenant 'initech' is not declared",),
        "globex/.ragsync-acl.toml",
    ),
    # --- manifests that are not what they seem
    Case(
        "a symlinked manifest",
        {"acme/shared/.ragsync-acl.toml": Link("../../open.toml"), "open.toml": m(read=["group:staff"])},
        SHARED,
        ("ACL manifest",),
    ),
    *(
        Case(
            f"a manifest named {name!r}",
            {f"acme/shared/{name}": m(read=["group:staff"])},
            SHARED,
            ("not read as an ACL manifest: the name must be exactly .ragsync-acl.toml",),
            f"acme/shared/{name}",
        )
        for name in (
            ".RAGSYNC-ACL.TOML",
            ".Ragsync-Acl.toml",
            "ragsync-acl.toml",
            ".ragsync_acl.toml",
            ".ragsync-acl.toml ",
            "\uff0eragsync-acl.toml",  # a full-width full stop
        )
    ),
    Case(
        "a [files] key that climbs out of its folder",
        {"acme/shared/.ragsync-acl.toml": m(files={"../intro.md": ["group:staff"]})},
        SHARED,
        ("must be relative to the manifest's folder",),
    ),
    Case(
        "one key in NFC and NFD forms",
        {"acme/shared/.ragsync-acl.toml": m(files={"résumé.md": ["group:staff"], NFD_RESUME: []})},
        SHARED,
        ("is given twice",),
    ),
    Case(
        "a [folders] glob is a literal name",
        {"acme/shared/.ragsync-acl.toml": m(folders={"*": []})},
        SHARED,
        ("[folders] '*' matches no folder",),
    ),
    Case(
        "url_base below the root",
        {"acme/shared/.ragsync-acl.toml": 'url_base = "https://evil.example"\n'},
        SHARED,
        ("url_base is only read from the root manifest",),
    ),
    # --- the legitimate ways (positive controls)
    Case(
        "narrowing a folder and a file",
        {"acme/shared/.ragsync-acl.toml": m(tenant="acme", files={"plan.md": []})},
        acl={"acme/shared/plan.md": ()},
    ),
    Case(
        "the parent grants a subfolder more with [folders]",
        {
            "acme/.ragsync-acl.toml": acme(shared=["group:contractors", "group:staff"]),
            "acme/shared/.ragsync-acl.toml": m(read=["group:contractors"], files={"secret.md": ["group:hr"]}),
        },
        acl={"acme/shared/plan.md": ("group:contractors",), "acme/shared/résumé.md": ("group:contractors",)},
    ),
    Case(
        "an NFC [folders] key grants an NFD folder, whose manifest narrows",
        {
            "acme/.ragsync-acl.toml": acme(café=["group:chefs", "group:staff"]),
            f"acme/{NFD_CAFE}/menu.md": "# Menu\n",
            f"acme/{NFD_CAFE}/.ragsync-acl.toml": m(read=["group:chefs"]),
        },
        acl={f"acme/{NFD_CAFE}/menu.md": ("group:chefs",)},
    ),
]
COUNTS = {"cases": 0}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[ConnectorState]:
    s = ConnectorState(tmp_path / "state.db")
    yield s
    s.close()


@pytest.mark.parametrize("case", CASES, ids=str)
async def test_a_writer_of_one_folder_cannot_widen_or_move_it(
    case: Case, kind: str, tmp_path: Path, state: ConnectorState
) -> None:
    COUNTS["cases"] += 1
    tree = Tree(kind, tmp_path / "tree")
    tree.write(BASE)
    events: list[Event] = []
    first = await scan(tree.connector(TENANTS), state, events.append)
    assert first.errors == [] and {doc_path(e.doc_id): e.payload.acl for e in events} == BASE_ACL  # type: ignore[union-attr]

    tree.write(case.change)
    events.clear()
    report = await scan(tree.connector(TENANTS), state, events.append)

    # What the connector now says of every document.
    listed = {d.doc_id: d async for d in tree.connector(TENANTS).documents()}
    expected_acl = {**BASE_ACL, **case.acl}
    for doc_id, doc in listed.items():
        assert doc.locked == (doc_id in case.locked), doc_id
        if not doc.locked:
            assert doc.acl == expected_acl[doc_id], doc_id
            assert doc.tenant == doc_id.split("/")[0], "no document changes tenant"
    assert set(listed) >= case.locked

    # What reached the index: the locked ones lose every reader, legitimate changes go through, nothing else.
    assert all(e.kind is not EventKind.DELETE for e in events)
    emitted = {}
    for event in events:
        path = doc_path(event.doc_id)
        assert event.tenant == path.split("/")[0], f"{path} published for {event.tenant}"
        emitted[path] = event
    for path in case.locked & set(BASE_ACL):
        assert emitted.pop(path).payload == AclPayload(acl=()), path
    for path, acl in case.acl.items():
        event = emitted.pop(path)
        assert event.payload.acl == acl, path  # type: ignore[union-attr]
        assert event.kind is (EventKind.ACL if path in BASE_ACL else EventKind.UPSERT)
    assert emitted == {}, f"unexpected events: {sorted(emitted)}"
    assert report.locked == len(case.locked & set(BASE_ACL))

    # Reported, one line each, naming the manifest.
    if not case.errors:
        assert report.errors == []
    for expected in case.errors:
        lines = [e for e in report.errors if expected in e]
        assert lines, f"{expected!r} not in {report.errors}"
        assert any(tree.where(case.manifest) in line for line in lines), (tree.where(case.manifest), lines)
        assert all("\n" not in line for line in lines)


def test_the_suite_covers_both_connectors() -> None:
    assert len(CASES) >= 25 and KINDS == ("drive", "git")
