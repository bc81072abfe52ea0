"""A generated SMB world on the real Samba of `compose/local/services up samba`, and the pair-by-pair check
(issue 19 item 6). Shared by tests/test_smb_source.py and bench/source_permissions.py --kind smb.

The world: Unix users and groups made Samba users (smbpasswd) and domain groups (net groupmap), with
overlapping memberships; nested folders whose ACLs carry inheritable entries (object and container
inherit), files created over SMB so the server copies those entries into them (inherited ACEs), and
explicit entries added to some files (allows and denies, for users and groups, ahead of the inherited
ones) or a file's inheritance replaced by its own ACL. Everything is set as the share's administrator
would, with smbcacls and smbclient.

The check: for every (file, user), the source's decision is the server's own: open the file for
FILE_READ_DATA in a session logged in as that user; the index's decision is the lexical store's query
(`passages` with the user's AccessFilter, as the retriever asks it). Wider (the index admits, the
server refuses) must never happen; stricter is counted and must be a document the sync report named
under "permissions narrowed".

Random edits, made in the source: grants, revocations (removing an explicit allow), denies, group
membership changes (gpasswd), moves between folders (smbclient rename, the ACL travels with the file).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accounts import account_command

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "compose" / "local"))

import samba_service as svc  # noqa: E402

RUN = Path(os.environ.get("RAGSYNC_SERVICES_HOME") or Path.home() / ".cache" / "ragsync-services") / "run"
CONF = RUN / "samba" / "smb.conf"
DOMAIN = "RAGSYNCSMB"
PREFIX = "smbw"
TENANT = "acme"
READ = "READ"
INHERIT = "0x3"  # object inherit | container inherit


def samba_up() -> bool:
    return CONF.exists() and svc.Samba(RUN, _helpers()).ready()


def source_settings(password_env: str, name: str = "share") -> Any:
    """The ragsync SMB source (SourceSettings) over the world's share, logged in as the service's reader
    account, whose password the caller puts in `password_env`: one definition for the tests and the bench."""
    from ragsync.sources import SourceSettings

    return SourceSettings.model_validate(
        {
            "name": name,
            "kind": "smb",
            "server": "127.0.0.1",
            "port": svc.SMB_PORT,
            "share": svc.SMB_SHARE,
            "path": "/",
            "username": svc.SMB_USER,
            "password_env": password_env,
            "tenants": [TENANT],
            "share_open": True,
        }
    )


def _helpers() -> dict[str, object]:
    def read_int(p: Path) -> int | None:
        try:
            return int(p.read_text().strip())
        except (OSError, ValueError):
            return None

    return {"read_int": read_int, "pid_alive": lambda pid: True, "cmdline": lambda pid: "smbd"}


def run(cmd: list[str], stdin: str | None = None) -> str:
    done = account_command(cmd, input=stdin, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}...: {done.stdout[-500:]}{done.stderr[-500:]}")
    return done.stdout


def admin() -> list[str]:
    return ["-s", str(CONF), "-U", f"{svc.SMB_ADMIN}%{svc.SMB_ADMIN_PASSWORD}"]


def smbcacls(path: str, *args: str) -> None:
    run(["smbcacls", *admin(), f"//127.0.0.1/{svc.SMB_SHARE}", path.replace("/", "\\"), *args])


def smbclient(commands: str) -> None:
    run(["smbclient", *admin(), "-p", str(svc.SMB_PORT), f"//127.0.0.1/{svc.SMB_SHARE}", "-c", commands])


def password(user: str) -> str:
    return f"pw-{user}"


def ensure_user(user: str) -> None:
    if subprocess.run(["id", "-u", user], capture_output=True).returncode != 0:
        run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", user])
    if f"{user}:" in run(["pdbedit", "-s", str(CONF), "-L"]):
        return
    run(["smbpasswd", "-c", str(CONF), "-s", "-a", user], stdin=f"{password(user)}\n{password(user)}\n")


def ensure_group(group: str) -> None:
    run(["groupadd", "-f", group])
    mapped = run(["net", "-s", str(CONF), "groupmap", "list"])
    if f"({group})" not in mapped and f"{group} (" not in mapped:
        run(["net", "-s", str(CONF), "groupmap", "add", f"ntgroup={group}", f"unixgroup={group}", "type=domain"])


def set_members(group: str, members: Iterable[str]) -> None:
    run(["gpasswd", "-M", ",".join(sorted(members)), group])


def ace(principal: str, allow: bool, flags: str = "0x0", right: str = READ) -> str:
    who = principal if principal == "Everyone" else f"{DOMAIN}\\{principal}"
    return f"ACL:{who}:{'ALLOWED' if allow else 'DENIED'}/{flags}/{right}"


@dataclass
class World:
    users: list[str]
    groups: dict[str, set[str]]
    folders: list[str]
    files: list[str]
    explicit: dict[str, list[str]] = field(default_factory=dict)
    """file -> the ACE strings the generator set on it, explicit and inherited (a revocation removes one)"""
    rng: random.Random = field(default_factory=random.Random)
    edits: int = 0

    def groups_of(self, user: str) -> tuple[str, ...]:
        return tuple(sorted(g for g, members in self.groups.items() if user in members))

    def principals(self) -> list[str]:
        return [*self.users, *self.groups]


def reset_share(keep: frozenset[str] = frozenset()) -> None:
    """Empty the share but for the folders in `keep` (as root on the server's disk: the test owns this server)."""
    for child in svc.SHARE_PATH.iterdir():
        if child.name in keep:
            continue
        if child.is_dir():
            subprocess.run(["rm", "-rf", str(child)], check=True)
        else:
            child.unlink()


def build_world(n_users: int, n_groups: int, n_files: int, seed: int, keep: frozenset[str] = frozenset()) -> World:
    """`keep`: top folders of the share left alone (bench/source_revocation.py --kind smb's, when both benches run)."""
    rng = random.Random(seed)
    users = [f"{PREFIX}u{i:02d}" for i in range(n_users)]
    groups = {f"{PREFIX}g{i}": set(rng.sample(users, rng.randint(2, max(2, n_users // 3)))) for i in range(n_groups)}
    for user in users:
        ensure_user(user)
    for group, members in groups.items():
        ensure_group(group)
        set_members(group, members)
    reset_share(keep)
    folders = ["d0", "d0/e0", "d0/e1", "d1", "d1/e0", "d1/e0/f0", "d2", "d2/e0"]
    owner = f"ACL:{DOMAIN}\\{svc.SMB_ADMIN}:ALLOWED/0x0/FULL"
    reader = ace(svc.SMB_USER, True)
    inheritable: dict[str, list[tuple[str, bool]]] = {}
    """folder -> its inheritable entries (its own, then those it inherited), as (principal, allow)"""
    for folder in folders:
        pool = [*users, *groups]
        own = [(p, True) for p in rng.sample(pool, rng.randint(1, min(4, len(pool))))]
        if rng.random() < 0.3:
            own.insert(0, (rng.choice([*users, *groups]), False))
        if rng.random() < 0.1:
            own.append(("Everyone", True))
        parent = folder.rsplit("/", 1)[0] if "/" in folder else ""
        inheritable[folder] = own + inheritable.get(parent, [])
        smbclient(f'mkdir "{folder}"')
        entries = [ace(p, a, INHERIT) for p, a in own] + [ace(p, a, "0x13") for p, a in inheritable.get(parent, [])]
        smbcacls(folder, "--set", ",".join([owner, ace(svc.SMB_USER, True, INHERIT), *entries]))
    files: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        puts = []
        for i in range(n_files):
            folder = rng.choice(folders)
            name = f"{folder}/doc{i:03d}.md"
            local = Path(tmp) / f"doc{i:03d}.md"
            local.write_text(f"# Document {i}\n\nThe canary of document {i} is smbcanary{i:03d}.\n")
            puts.append(f'put "{local}" "{name}"')
            files.append(name)
        for start in range(0, len(puts), 50):
            smbclient("; ".join(puts[start : start + 50]))
    world = World(users, groups, folders, files, rng=rng)
    for name in files:
        # What a Windows server stores after inheritance: the file's explicit entries first, then copies of
        # its folder's inheritable entries flagged INHERITED (0x10). Samba 4.17 does not flag the copies it
        # makes for files created under a folder set by smbcacls (no auto-inherited control), so the
        # generator writes them itself.
        inherited = [ace(p, a, "0x10") for p, a in inheritable[name.rsplit("/", 1)[0]]]
        roll = rng.random()
        explicit: list[str] = []
        if roll < 0.35:  # explicit entries ahead of the inherited ones
            explicit = [ace(rng.choice(world.principals()), rng.random() < 0.6) for _ in range(rng.randint(1, 2))]
        elif roll < 0.45:  # inheritance replaced by the file's own ACL (protected)
            explicit, inherited = (
                [ace(p, True) for p in rng.sample(world.principals(), rng.randint(1, min(3, len(world.principals()))))],
                [],
            )
        smbcacls(name, "--set", ",".join([owner, reader, *explicit, *inherited]))
        world.explicit[name] = explicit + inherited
    return world


def random_edit(world: World) -> str:
    """One edit made in the source; returns what it was."""
    rng = world.rng
    world.edits += 1
    kind = rng.choice(["grant", "grant", "revoke", "deny", "membership", "move"])
    if kind == "revoke" and not any(e for e in world.explicit.values() if any("ALLOWED" in a for a in e)):
        kind = "grant"
    if kind in ("grant", "deny"):
        name = rng.choice(world.files)
        entry = ace(rng.choice(world.principals()), kind == "grant")
        smbcacls(name, "-a", entry)
        world.explicit.setdefault(name, []).append(entry)
        return f"{kind} {entry} on {name}"
    if kind == "revoke":
        name = rng.choice([f for f, e in world.explicit.items() if any("ALLOWED" in a for a in e)])
        entry = rng.choice([a for a in world.explicit[name] if "ALLOWED" in a])
        smbcacls(name, "-D", entry)
        world.explicit[name] = [a for a in world.explicit[name] if a != entry]
        return f"revoke {entry} on {name}"
    if kind == "membership":
        group = rng.choice(sorted(world.groups))
        user = rng.choice(world.users)
        members = world.groups[group]
        if user in members and len(members) > 1:
            members.discard(user)
            change = f"{user} leaves {group}"
        else:
            members.add(user)
            change = f"{user} joins {group}"
        set_members(group, members)
        return change
    name = rng.choice(world.files)
    parent = name.rsplit("/", 1)[0]
    folder = rng.choice([f for f in world.folders if f != parent])
    target = f"{folder}/{Path(name).name}"
    if target in world.files:
        return random_edit(world)
    smbclient(f'rename "{name}" "{target}"')
    world.files[world.files.index(name)] = target
    if name in world.explicit:
        world.explicit[target] = world.explicit.pop(name)
    return f"move {name} to {target}"


def source_decisions(world: World) -> dict[tuple[str, str], bool]:
    """(file, user) -> whether the server lets the user open the file's data, asked as that user.

    A session the server drops mid-way (an smbd child that died: Samba 4.17 panics now and then on its
    share-mode database under heavy load) is asked again from the start, once."""
    decisions: dict[tuple[str, str], bool] = {}
    for user in world.users:
        try:
            decisions.update(_decisions_of(world, user))
        except (OSError, ConnectionError) as exc:
            print(f"{user}: session lost ({exc}); asking again", file=sys.stderr)
            decisions.update(_decisions_of(world, user))
    return decisions


def _decisions_of(world: World, user: str) -> dict[tuple[str, str], bool]:
    from impacket.nmb import NetBIOSError
    from impacket.smbconnection import SessionError, SMBConnection

    decisions: dict[tuple[str, str], bool] = {}
    conn = SMBConnection("127.0.0.1", "127.0.0.1", sess_port=svc.SMB_PORT, timeout=30)
    try:
        try:
            conn.login(user, password(user))
        except SessionError as exc:
            raise RuntimeError(f"{user} cannot log in: {exc}") from None
        tid = conn.connectTree(svc.SMB_SHARE)
        for name in world.files:
            try:
                fid = conn.openFile(tid, name.replace("/", "\\"), desiredAccess=0x1, shareMode=0x7, creationOption=0x40)
            except SessionError as exc:
                if "ACCESS_DENIED" not in str(exc):
                    raise RuntimeError(f"{user} opening {name}: {exc}") from None
                decisions[(name, user)] = False
            else:
                decisions[(name, user)] = True
                with contextlib.suppress(SessionError):  # the answer is in; a failed close changes nothing
                    conn.closeFile(tid, fid)
    except NetBIOSError as exc:
        raise ConnectionError(f"{user}: {exc}") from None
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    return decisions


@dataclass
class Comparison:
    pairs: int = 0
    wider: list[str] = field(default_factory=list)
    stricter: list[str] = field(default_factory=list)
    stricter_reported: int = 0
    source_allowed: int = 0


def index_decisions(components: object, world: World, source: str) -> dict[tuple[str, str], bool]:
    """(file, user) -> whether the lexical store's permission filter admits the user to a passage of it."""
    from schemas.principal import AccessFilter

    lexical = components.lexical  # type: ignore[attr-defined]
    ids: dict[str, str] = {}
    for name in world.files:
        for stored in lexical.inventory(TENANT, f"{source}:{name}"):
            ids[stored.passage_id] = name
    decisions: dict[tuple[str, str], bool] = {}
    now = datetime.now(UTC)
    for user in world.users:
        entries = tuple(sorted({f"user:{user}", *(f"group:{g}" for g in world.groups_of(user))}))
        seen = {ids[p.passage_id] for p in lexical.passages(AccessFilter(TENANT, entries, now), list(ids))}
        for name in world.files:
            decisions[(name, user)] = name in seen
    return decisions


def compare(
    source_side: dict[tuple[str, str], bool], index_side: dict[tuple[str, str], bool], narrowed: Iterable[str]
) -> Comparison:
    reported = {line.split(": ", 1)[0] for line in narrowed}
    result = Comparison()
    for (name, user), allowed in source_side.items():
        result.pairs += 1
        result.source_allowed += allowed
        got = index_side[(name, user)]
        if got and not allowed:
            result.wider.append(f"{name} / {user}")
        elif allowed and not got:
            result.stricter.append(f"{name} / {user}")
            result.stricter_reported += name in reported
    return result
