"""The SMB source against a real Samba (issue 19 items 4 and 6): the index never allows what the share denies.

Needs `compose/local/services up samba` (scripts/test.sh starts it) and root (the test makes Unix users
and groups for the server). tests/smb_world.py builds the world and makes the comparisons.

CI: 20 users in 6 overlapping groups, 60 files in 8 nested folders, every (file, user) pair compared
after the first sync and after each of 3 syncs of 5 random edits (15 edits; 4,800 pairs); the full run (200 files,
100 edits, >= 4,000 pairs per comparison) is bench/source_permissions.py --kind smb.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import smb_world as w
from conftest import MODEL_PATH

from connectors.nt_acl import Ace, Descriptor, SamDirectory, decide
from connectors.permissions import PrincipalMap
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.sources import SourceSettings, connector_for
from ragsync.wiring import build

SOURCE = "share"


@pytest.fixture(scope="module")
def samba() -> None:
    if not w.samba_up():
        pytest.skip("samba is not running on 127.0.0.1:4455 (compose/local/services up samba)")


def connector() -> Any:
    settings = w.source_settings("RAGSYNC_TEST_SMB_PASSWORD", SOURCE)
    return connector_for(settings, Path("/nonexistent-home"))


@pytest.fixture()
def components(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RAGSYNC_TEST_SMB_PASSWORD", w.svc.SMB_PASSWORD)
    c = build(Settings(home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="s" * 32))
    yield c
    c.close()


def check(components: Any, world: w.World, report: Any) -> w.Comparison:
    result = w.compare(w.source_decisions(world), w.index_decisions(components, world, SOURCE), report.scan.narrowed)
    assert not result.wider, f"the index admits what the share denies: {result.wider[:10]}"
    assert result.stricter_reported == len(result.stricter), f"stricter and not reported: {result.stricter[:10]}"
    return result


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_every_pair_equals_the_share_through_random_edits(samba: None, components: Any) -> None:
    world = w.build_world(n_users=20, n_groups=6, n_files=60, seed=19)
    smb = connector()
    report = sync_source(components, smb)
    assert not report.scan.errors, report.scan.errors
    first = check(components, world, report)
    assert first.pairs == 20 * 60
    assert 0 < first.source_allowed < first.pairs, "the world has both outcomes"
    total = first.pairs
    for _ in range(3):
        for _ in range(5):
            w.random_edit(world)
        report = sync_source(components, smb)
        assert not report.scan.errors, report.scan.errors
        total += check(components, world, report).pairs
    assert world.edits == 15
    print(f"\nsmb equivalence: {total} pairs, {world.edits} edits, first pass {first.source_allowed} allowed")


def visible(components: Any, user: str, groups: tuple[str, ...], name: str) -> bool:
    world = w.World([user], {g: {user} for g in groups}, [], [name])
    return w.index_decisions(components, world, SOURCE)[(name, user)]


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_revocation_deletion_and_rename_reach_the_index(samba: None, components: Any) -> None:
    world = w.build_world(n_users=3, n_groups=1, n_files=0, seed=1)
    ann = world.users[0]
    w.smbclient('mkdir "r"')
    w.smbcacls(
        "r",
        "--set",
        ",".join([w.ace(w.svc.SMB_USER, True, w.INHERIT), w.ace(ann, True, w.INHERIT)]),
    )
    local = Path(w.svc.SHARE_PATH.parent / "upload.md")
    local.write_text("# Plan\n\nThe plan is smbcanaryrevoke.\n")
    w.smbclient(f'put "{local}" "r/plan.md"')
    inherited = [w.ace(w.svc.SMB_USER, True, "0x10"), w.ace(ann, True, "0x10")]
    w.smbcacls("r/plan.md", "--set", ",".join(inherited))
    smb = connector()
    sync_source(components, smb)
    assert visible(components, ann, (), "r/plan.md")

    w.smbcacls("r/plan.md", "-D", inherited[1])
    sync_source(components, smb)
    assert not visible(components, ann, (), "r/plan.md"), "revoked on the share, still in the index"

    w.smbcacls("r/plan.md", "-a", w.ace(ann, True))
    sync_source(components, smb)
    assert visible(components, ann, (), "r/plan.md")
    w.smbclient('rename "r/plan.md" "r/renamed.md"')
    sync_source(components, smb)
    assert not visible(components, ann, (), "r/plan.md")
    assert visible(components, ann, (), "r/renamed.md"), "the moved file keeps its ACL"

    w.smbclient('del "r/renamed.md"')
    report = sync_source(components, smb)
    assert report.scan.deletes == 1
    assert components.lexical.count(w.TENANT, f"{SOURCE}:r/renamed.md") == 0


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_an_unreachable_server_fails_the_pass_and_deletes_nothing(samba: None, components: Any) -> None:
    world = w.build_world(n_users=2, n_groups=1, n_files=3, seed=2)
    smb = connector()
    sync_source(components, smb)
    held = sum(components.lexical.count(w.TENANT, f"{SOURCE}:{f}") for f in world.files)
    assert held > 0
    smb.target = replace(smb.target, port=1)  # the same source, its server gone
    with pytest.raises(Exception) as failed:
        sync_source(components, smb)
    message = str(failed.value)
    assert "cannot connect" in message and "\n" not in message
    assert w.svc.SMB_PASSWORD not in message
    assert sum(components.lexical.count(w.TENANT, f"{SOURCE}:{f}") for f in world.files) == held


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_a_file_whose_descriptor_cannot_be_read_is_readable_by_nobody(samba: None, components: Any) -> None:
    world = w.build_world(n_users=2, n_groups=1, n_files=2, seed=3)
    ann = world.users[0]
    target = world.files[0]
    w.smbcacls(target, "--set", ",".join([w.ace(w.svc.SMB_USER, True, right="FULL"), w.ace(ann, True)]))
    smb = connector()
    sync_source(components, smb)
    assert visible(components, ann, (), target)
    # The connector's account loses READ_CONTROL (and the data): the file is still listed.
    w.smbcacls(target, "--set", ",".join([w.ace(ann, True)]))
    report = sync_source(components, smb)
    assert not visible(components, ann, (), target), "a file whose permissions cannot be read keeps its readers"
    assert any(line.startswith(f"{target}: security descriptor unreadable") for line in report.scan.narrowed)
    assert report.scan.deletes == 0


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_an_acl_only_edit_is_seen_by_the_next_pass_on_the_kept_session(
    samba: None, components: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speed-ups (one session kept between passes, descriptors pipelined in batches, content of an
    unchanged file never re-read) must never skip an ACL comparison: smbcacls changes neither size nor
    write time, and the next pass still sees it; in the same batch, a file whose descriptor the
    connector may not read becomes readable by nobody and is reported; nothing is deleted."""
    import connectors.smb as smb_module

    monkeypatch.setattr(smb_module, "PIPELINE", 3)  # 8 files: three batches, edits in two of them
    world = w.build_world(n_users=2, n_groups=1, n_files=0, seed=5)
    ann = world.users[0]
    w.smbclient('mkdir "k"')
    w.smbcacls("k", "--set", ",".join([w.ace(w.svc.SMB_USER, True, w.INHERIT), w.ace(ann, True, w.INHERIT)]))
    local = Path(w.svc.SHARE_PATH.parent / "upload.md")
    names = [f"k/f{i}.md" for i in range(8)]
    for i, name in enumerate(names):
        local.write_text(f"# File {i}\n\nThe canary is smbkept{i}.\n")
        w.smbclient(f'put "{local}" "{name}"')
        w.smbcacls(name, "--set", ",".join([w.ace(w.svc.SMB_USER, True, right="FULL"), w.ace(ann, True)]))
    smb = connector()
    sync_source(components, smb)
    assert all(visible(components, ann, (), n) for n in names)
    session = smb._session
    revoked, unreadable = names[1], names[4]
    w.smbcacls(revoked, "-D", w.ace(ann, True))  # an ACL-only edit: size and write time unchanged
    w.smbcacls(unreadable, "--set", w.ace(ann, True))  # the connector's account loses READ_CONTROL
    report = sync_source(components, smb)
    assert smb._session is session, "the pass was meant to run on the kept session"
    assert not visible(components, ann, (), revoked), "an ACL-only edit missed by the next pass"
    assert not visible(components, ann, (), unreadable), "an unreadable descriptor kept its readers"
    assert any(line.startswith(f"{unreadable}: security descriptor unreadable") for line in report.scan.narrowed)
    assert all(visible(components, ann, (), n) for n in names if n not in (revoked, unreadable))
    assert (report.scan.upserts, report.scan.acl_changes, report.scan.deletes) == (0, 2, 0)

    smb._session.conn.getSMBServer()._NetBIOSSession.close()  # the kept connection dies between passes
    w.smbcacls(names[7], "-D", w.ace(ann, True))
    report = sync_source(components, smb)
    assert smb._session is not session, "a dead kept session is replaced, not a failed pass"
    assert not visible(components, ann, (), names[7])
    assert report.scan.deletes == 0


def test_a_deny_for_a_sid_the_server_does_not_list_applies_to_everyone() -> None:
    """Pure: a deny naming a SID outside the directory (a BUILTIN alias, a Unix group) shuts out every
    user it might name, and an allow for one grants nobody; both are reported."""
    dom = "S-1-5-21-1-2-3"
    sam = SamDirectory(
        dom,
        {f"{dom}-1000": ("ann", frozenset({f"{dom}-2000"})), f"{dom}-1001": ("bob", frozenset())},
        {f"{dom}-2000": "staff"},
    )
    denied = Descriptor(None, (Ace(False, "S-1-5-32-545", 0x1), Ace(True, "S-1-1-0", 0x1)))
    decision = decide([denied], sam, PrincipalMap())
    assert decision.readers == frozenset() and decision.translation.acl == ()
    assert any("applies to all" in n for n in decision.translation.narrowed)
    allowed = Descriptor(None, (Ace(True, "S-1-22-2-100", 0x1), Ace(True, f"{dom}-2000", 0x1)))
    decision = decide([allowed], sam, PrincipalMap())
    assert decision.translation.acl == ("group:staff",)
    assert any("not granted" in n for n in decision.translation.narrowed)
    inherit_only = Descriptor(None, (Ace(True, f"{dom}-1001", 0x1, flags=0x08),))
    assert decide([inherit_only], sam, PrincipalMap()).readers == frozenset()
    assert decide([Descriptor(None, None)], sam, PrincipalMap()).readers == {"ann", "bob"}


@pytest.mark.slow  # the real Samba and real syncs: the full run only (scripts/test.sh --fast skips it)
def test_connector_iterates(samba: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing alone: each document names its tenant and an allow list, and reads over SMB."""
    monkeypatch.setenv("RAGSYNC_TEST_SMB_PASSWORD", w.svc.SMB_PASSWORD)
    world = w.build_world(n_users=2, n_groups=1, n_files=2, seed=4)
    smb = connector()

    async def listing() -> list[tuple[str, bytes]]:
        return [(d.doc_id, await d.fetch()) async for d in smb.documents()]

    got = asyncio.run(listing())
    assert sorted(name for name, _ in got) == sorted(world.files)
    assert all(b"smbcanary" in data for _, data in got)


def test_smb_settings_are_checked_and_the_password_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"name": "fs", "kind": "smb", "path": "/", "server": "files", "share": "docs", "tenants": ["acme"]}
    with pytest.raises(ValueError, match="feeds one tenant"):
        SourceSettings.model_validate({**base, "tenants": ["acme", "globex"]})
    with pytest.raises(ValueError, match="needs server and share"):
        SourceSettings.model_validate({**base, "share": ""})
    with pytest.raises(ValueError, match="apply to kind = 'smb' only"):
        SourceSettings.model_validate({"name": "d", "path": "/srv", "tenants": ["acme"], "server": "files"})
    source = SourceSettings.model_validate({**base, "username": "r", "password": "hunter2-secret"})
    assert "hunter2-secret" not in repr(source) and "hunter2-secret" not in str(source.model_dump())
    smb = connector_for(source, Path("/nonexistent-home"))
    assert "hunter2-secret" not in repr(smb.target) and smb.target.password == "hunter2-secret"
    monkeypatch.setenv("FS_PW", "from-the-env")
    assert (
        connector_for(SourceSettings.model_validate({**base, "password_env": "FS_PW"}), Path("/h")).target.password
        == "from-the-env"
    )


def test_domain_users_counts_only_for_those_the_server_puts_in_it() -> None:
    """A user whose primary group is another one may not hold Domain Users: an allow for it admits only
    the users the SAM lists in it, and a deny for it shuts out only those (the rest hold it or not, as listed)."""
    dom = "S-1-5-21-1-2-3"
    domain_users = f"{dom}-513"
    sam = SamDirectory(
        dom, {f"{dom}-1000": ("ann", frozenset({domain_users})), f"{dom}-1001": ("bob", frozenset())}, {}
    )
    allowed = Descriptor(None, (Ace(True, domain_users, 0x1),))
    assert decide([allowed], sam, PrincipalMap()).readers == {"ann"}
    denied = Descriptor(None, (Ace(False, domain_users, 0x1), Ace(True, "S-1-1-0", 0x1)))
    assert decide([denied], sam, PrincipalMap()).readers == {"bob"}
