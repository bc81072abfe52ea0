"""POSIX folders (issue 19 items 5-6): the index allows exactly what the kernel allows each known user.

Needs root (it creates system users; skipped otherwise; CI runs as root) and Debian's `acl` package
(`setfacl`). tests/posix_world.py builds the population: 22 users `rspx…` with overlapping groups,
60 documents in nested folders with random modes, owners, groups and POSIX ACLs (named users and
groups, masks), restrictive folders; then 100 random edits made with the administrator's tools
(chmod, chown, setfacl, gpasswd, mv), one sync after each. For every (document, user) pair the
index's decision (the lexical store's access-filtered query with the user's token principal) is
compared with the source's (`access(R_OK)` as that user, in a child that took their identity).
Zero pairs wider; every stricter pair named by the sync report (one user is mapped to no token
principal, so there are stricter pairs to report).

The bench (bench/source_permissions.py) runs the same with 200 documents and more edits.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from accounts import account_command
from click.testing import CliRunner
from conftest import MODEL_PATH
from posix_world import Population, Tally, cleanup_system, index_decisions, source_decisions, system_people
from serving import Serve, cites, environment, token
from waiting import wait_until as until

from connectors.base import SourceDocument
from connectors.drive import DriveConnector
from connectors.permissions import PrincipalMap
from connectors.posix import parse_acl, posix_access, read_node
from ragsync.cli import main
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.wiring import Components, build

TENANT = "acme"
SOURCE = "px"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setfacl") is None, reason="needs root and setfacl (Debian's acl)"
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every test user can search into (pytest's own tmp folders are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="rspx-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def synced(components: Components, root: Path, mapping: PrincipalMap | None = None) -> list[str]:
    home = components.settings.home
    drive = DriveConnector(root, SOURCE, tenants=[TENANT], permissions="posix", refuse=[home], principals=mapping)
    report = sync_source(components, drive)
    assert not report.scan.errors, report.scan.errors
    return list(report.scan.narrowed)


def test_index_equals_the_kernel_for_every_pair(tmp_path: Path, base: Path) -> None:
    rng = random.Random(19)
    components = build(Settings(home=tmp_path / "home", embed_model_path=None, embed_download=False))
    tally = Tally()
    try:
        with system_people(22, 8, rng) as people:
            world = Population(base / "src", people, rng)
            world.build(n_docs=60, n_folders=10)

            # one user mapped to nothing: every document they may read is stricter, and must be reported
            mapping = PrincipalMap(users={people.users[0]: ""})

            def check() -> dict[tuple[str, str], bool]:
                narrowed = synced(components, world.root, mapping)
                docs = sorted(world.ever)
                source = source_decisions(world.root, people.users, docs)
                tally.compare(source, index_decisions(components, TENANT, SOURCE, people.users, docs), narrowed, SOURCE)
                return source

            first = check()
            for _ in range(100):
                world.edit()
                tally.edits += 1
                check()
    finally:
        components.close()
    print("posix equivalence:", tally.summary())
    assert tally.wider == 0, tally.wider_pairs[:20]
    assert tally.unreported == [], tally.unreported[:20]
    assert tally.stricter == tally.stricter_reported > 0  # the unmapped user's pairs, each reported
    # the population is not trivial: the first pass has both readers and refusals
    assert len(first) == 60 * 22 and 0 < sum(first.values()) < len(first) / 2
    assert tally.edits == 100 and tally.pairs >= 60 * 22 * 101


def test_acl_parser_refuses_what_the_kernel_would_not_write(base: Path) -> None:
    path = base / "f.md"
    path.write_text("x")
    os.system(f"setfacl -m u:daemon:r,g:adm:r,m::r {path}")
    raw = os.getxattr(path, "system.posix_acl_access")
    _, mask = parse_acl(raw)
    assert mask == 4 and read_node(path).users == ((1, 4),)
    for bad in (raw[:-1], b"\x01\x00\x00\x00" + raw[4:], raw[:4] + b"\x40\x00\x04\x00\x00\x00\x00\x00" + raw[4:]):
        with pytest.raises(ValueError):
            parse_acl(bad)


def documents(root: Path, errors: list[str] | None = None) -> dict[str, SourceDocument]:
    async def listing() -> dict[str, SourceDocument]:
        return {d.doc_id: d async for d in drive.documents()}

    drive = DriveConnector(root, SOURCE, tenants=[TENANT], permissions="posix")
    docs = asyncio.run(listing())
    if errors is None:
        assert not drive.errors, drive.errors
    else:
        errors.extend(drive.errors)
    return docs


def test_manifests_narrow_posix_never_widen(base: Path) -> None:
    root = base / "src"
    (root / "drafts").mkdir(parents=True)
    os.chmod(root, 0o755)
    os.chmod(root / "drafts", 0o755)
    for name in ("open.md", "drafts/wip.md", "hr.md"):
        (root / name).write_text(f"# {name}\n")
        os.chmod(root / name, 0o644)
    os.chmod(root / "hr.md", 0o600)  # root's alone
    docs = documents(root)
    assert "user:daemon" in docs["open.md"].acl and "user:daemon" in docs["drafts/wip.md"].acl
    assert docs["hr.md"].acl == ("user:root",)
    assert any("readers it does not name" in why for why in docs["open.md"].narrowed)
    # a manifest withholds drafts/ and tries to open hr.md to daemon: only the first holds
    (root / ".ragsync-acl.toml").write_text(
        '[folders."drafts"]\nread = []\n[files."hr.md"]\nread = ["user:root", "user:daemon"]\n'
    )
    docs = documents(root)
    assert docs["drafts/wip.md"].acl == () and not docs["drafts/wip.md"].locked
    assert any("manifest above it withholds it from" in why for why in docs["drafts/wip.md"].narrowed)
    assert docs["hr.md"].acl == ("user:root",)
    assert "user:daemon" in docs["open.md"].acl  # no rule for it: its permissions alone
    # a manifest naming another tenant locks its folder, as without POSIX
    (root / "drafts" / ".ragsync-acl.toml").write_text('tenant = "globex"\n')
    errors: list[str] = []
    docs = documents(root, errors)
    assert len(errors) == 1 and "globex" in errors[0]
    assert docs["drafts/wip.md"].locked and not docs["open.md"].locked


def test_sync_command_with_posix_permissions_reports_the_narrowing(base: Path, tmp_path: Path) -> None:
    root = base / "src"
    root.mkdir()
    os.chmod(root, 0o755)
    (root / "open.md").write_text("# Open\n\nEveryone reads this.\n")
    os.chmod(root / "open.md", 0o644)
    home = tmp_path / "home"
    env = {"RAGSYNC_HOME": str(home), "RAGSYNC_EMBED_MODEL_PATH": str(home / "none"), "RAGSYNC_SESSION_SECRET": "s"}
    out = CliRunner().invoke(main, ["sync", str(root), "--permissions", "posix", "--tenant", "acme", "--json"], env=env)
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["upserts"] == 1 and report["narrowed"] and report["narrowed"][0].startswith("open.md: ")
    two = CliRunner().invoke(
        main, ["sync", str(root), "--permissions", "posix", "--tenant", "acme,globex", "--json"], env=env
    )
    assert two.exit_code == 2 and "exactly one tenant" in two.output


@pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")
def test_serve_publishes_chmod_and_setfacl_as_they_happen(base: Path, tmp_path: Path) -> None:
    """Attribute changes are file events: with interval_s = 600 only the watcher can bring them in time."""
    src = base / "src"
    src.mkdir()
    os.chmod(src, 0o755)
    doc = src / "lighthouse.md"
    doc.write_text("# Lighthouse\n\nThe access code for the lighthouse door is 4471-harbor.\n")
    (src / "other.md").write_text("# Canteen\n\nThe canteen opens at noon.\n")
    for path in (doc, src / "other.md"):
        os.chmod(path, 0o644)
    config = tmp_path / "ragsync.toml"
    config.write_text(
        f'[[sources]]\nname = "px"\npath = "{src}"\ntenants = ["acme"]\npermissions = "posix"\n'
        "watch = true\ninterval_s = 600\n"
    )
    env = environment(tmp_path / "home", RAGSYNC_CONFIG=str(config))
    daemon = token("acme", "daemon", "daemon")  # a user every Debian system has
    question = "What is the access code for the lighthouse door?"
    with Serve(env) as serve:
        until(lambda: cites(serve.ask(daemon, question), "lighthouse.md"), 60, "the first pass")
        os.chmod(doc, 0o600)  # owner root: daemon is "other" now, with no bits
        until(lambda: not cites(serve.ask(daemon, question), "lighthouse.md"), 30, "chmod 600 published")
        subprocess.run(["setfacl", "-m", "u:daemon:r", str(doc)], check=True)
        until(lambda: cites(serve.ask(daemon, question), "lighthouse.md"), 30, "setfacl grant published")
        subprocess.run(["setfacl", "-m", "u:daemon:---", str(doc)], check=True)
        until(lambda: not cites(serve.ask(daemon, question), "lighthouse.md"), 30, "setfacl revocation published")
        os.chmod(doc, 0o644)
        subprocess.run(["setfacl", "-b", str(doc)], check=True)
        until(lambda: cites(serve.ask(daemon, question), "lighthouse.md"), 30, "setfacl -b published")
        os.chmod(src, 0o700)  # the folder: daemon cannot search into it any more
        until(lambda: not cites(serve.ask(daemon, question), "lighthouse.md"), 30, "the folder's chmod published")


def test_permissions_that_cannot_be_read_lock_the_file(base: Path) -> None:
    """A file gone after the listing, a folder swapped for a link: readable by nobody, with the reason."""
    root = base / "src"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# A\n")
    (root / "b.md").write_text("# B\n")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.md").write_text("# A\n")
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(elsewhere)  # as if swapped between the listing and the permission read
    found = posix_access(root, ["sub/a.md", "b.md", "gone.md"], PrincipalMap())
    assert set(found.unreadable) == {"sub/a.md", "gone.md"} and set(found.translations) == {"b.md"}
    assert "became a link" in found.unreadable["sub/a.md"] and "cannot read" in found.unreadable["gone.md"]


def test_a_posix_source_is_declared_with_one_tenant_and_its_principals(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from ragsync.sources import SourceSettings, connector_for

    declared = SourceSettings.model_validate(
        {
            "name": "shared",
            "path": str(tmp_path),
            "tenants": ["acme"],
            "permissions": "posix",
            "principals": {"users": {"jdoe": "john.doe", "guest": ""}, "groups": {"finance": "fin"}},
        }
    )
    connector = connector_for(declared, tmp_path / "home")
    assert connector.permissions == "posix"
    assert connector.principals.user("jdoe") == "user:john.doe" and connector.principals.user("guest") is None
    assert connector.principals.group("finance") == "group:fin" and connector.principals.group("hr") == "group:hr"
    for bad in ({"tenants": ["acme", "globex"]}, {"kind": "git"}, {"principals": {"roles": {}}}):
        with pytest.raises(ValidationError):
            SourceSettings.model_validate(
                {"name": "shared", "path": str(tmp_path), "tenants": ["acme"], "permissions": "posix", **bad}
            )


@pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")
def test_serve_publishes_a_group_membership_change_as_it_happens(base: Path, tmp_path: Path) -> None:
    """gpasswd -d changes /etc/group, not the folder: serve watches the account files for POSIX sources.

    The group cannot be granted as a group (a named entry shuts its other member out), so it is
    granted member by member, and removing the reader from it changes the document's ACL: an old
    token that still lists the group loses the document too. interval_s = 600: only the watch can."""
    cleanup_system()
    try:
        for cmd in (
            ["groupadd", "rspxg00"],
            ["groupadd", "rspxg01"],
            ["useradd", "-M", "-N", "-g", "rspxg00", "-G", "rspxg01", "rspxu00"],
            ["useradd", "-M", "-N", "-g", "rspxg00", "-G", "rspxg01", "rspxu01"],
        ):
            account_command(cmd, check=True)
        src = base / "src"
        src.mkdir()
        os.chmod(src, 0o755)
        doc = src / "ledger.md"
        doc.write_text("# Ledger\n\nThe ledger password for the audit cupboard is 9051-walrus.\n")
        shutil.chown(doc, "root", "rspxg01")
        subprocess.run(["setfacl", "-m", "g:rspxg01:r,u:rspxu01:---", str(doc)], check=True)
        os.chmod(doc, 0o640)
        config = tmp_path / "ragsync.toml"
        config.write_text(
            f'[[sources]]\nname = "px"\npath = "{src}"\ntenants = ["acme"]\npermissions = "posix"\n'
            "watch = true\ninterval_s = 600\n"
        )
        env = environment(tmp_path / "home", RAGSYNC_CONFIG=str(config))
        old_token = token("acme", "rspxu00", "rspxg00", "rspxg01")
        question = "What is the ledger password for the audit cupboard?"
        with Serve(env) as serve:
            until(lambda: cites(serve.ask(old_token, question), "ledger.md"), 60, "the first pass")
            account_command(["gpasswd", "-d", "rspxu00", "rspxg01"], check=True)
            until(lambda: not cites(serve.ask(old_token, question), "ledger.md"), 30, "gpasswd -d published")
            account_command(["gpasswd", "-a", "rspxu00", "rspxg01"], check=True)
            until(lambda: cites(serve.ask(old_token, question), "ledger.md"), 30, "gpasswd -a published")
    finally:
        cleanup_system()
