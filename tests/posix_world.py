"""A folder of files with real owners, groups, modes and POSIX ACLs, and the OS's own answer per user.

Shared by tests/test_posix_permissions.py and bench/source_permissions.py (issue 19 item 6). Needs
root: it creates system users and groups (useradd/groupadd, names starting with `PREFIX` so they are
plainly test users; any left over by an interrupted run are removed first), and sets permissions
with chmod/chown and Debian's `setfacl` (package `acl`), the tools an administrator uses.

The source's decision is the kernel's: a child process per user takes that user's identity (the
groups a login gives them: getgrouplist, then setgid and setuid) and asks `os.access(path, R_OK)`
for every document, so the comparison is with what that user could actually open, traversal
included. The index's decision is the lexical store's own access-filtered query with the token
principal the user would carry (their name and their groups' names, the default mapping).
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from accounts import account_command

from schemas.principal import AccessFilter, Principal

PREFIX = "rspx"
FILE_MODES = (0o600, 0o640, 0o644, 0o604, 0o400, 0o440, 0o444, 0o660, 0o606, 0o000, 0o040, 0o004)
DIR_MODES = (0o755, 0o750, 0o711, 0o710, 0o701, 0o700, 0o770, 0o705, 0o751, 0o775)


def run(*cmd: str) -> None:
    account_command(cmd, check=True)


def cleanup_system() -> None:
    """Remove every user and group named with PREFIX (this run's or an interrupted one's)."""
    for p in pwd.getpwall():
        if p.pw_name.startswith(PREFIX):
            account_command(["userdel", p.pw_name])
    for g in grp.getgrall():
        if g.gr_name.startswith(PREFIX):
            account_command(["groupdel", g.gr_name])


@dataclass
class People:
    users: list[str]
    groups: list[str]


@contextlib.contextmanager
def system_people(n_users: int, n_groups: int, rng: random.Random) -> Iterator[People]:
    """n_users users with overlapping groups: a primary group each and 0-3 supplementary ones."""
    cleanup_system()
    groups = [f"{PREFIX}g{i:02d}" for i in range(n_groups)]
    users = [f"{PREFIX}u{i:02d}" for i in range(n_users)]
    try:
        for g in groups:
            run("groupadd", g)
        for u in users:
            extra = rng.sample(groups, min(len(groups), rng.randint(0, 3)))
            cmd = ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", "-g", rng.choice(groups)]
            if extra:
                cmd += ["-G", ",".join(extra)]
            run(*cmd, u)
        yield People(users, groups)
    finally:
        cleanup_system()


@dataclass
class Population:
    """The folder under test: documents (paths relative to root) and the unique word in each."""

    root: Path
    people: People
    rng: random.Random
    folders: list[str] = field(default_factory=list)
    docs: dict[str, str] = field(default_factory=dict)  # rel -> canary
    ever: set[str] = field(default_factory=set)  # every path that was ever a document
    edits: list[str] = field(default_factory=list)

    def random_acl(self, directory: bool) -> str | None:
        """A setfacl -m spec with named users and groups and a mask, or None for plain mode bits."""
        r = self.rng
        if r.random() < 0.4:
            return None
        bits = ("r-x", "--x", "r--", "---", "rwx") if directory else ("r--", "---", "rw-")
        entries = [f"u:{u}:{r.choice(bits)}" for u in r.sample(self.people.users, r.randint(0, 3))]
        entries += [f"g:{g}:{r.choice(bits)}" for g in r.sample(self.people.groups, r.randint(0, 2))]
        if not entries:
            return None
        entries.append(f"m::{r.choice(bits)}")
        return ",".join(entries)

    def set_permissions(self, rel: str, directory: bool) -> None:
        r = self.rng
        path = self.root / rel
        run("setfacl", "-b", str(path))
        uid, gid = pwd.getpwnam(r.choice(self.people.users)).pw_uid, grp.getgrnam(r.choice(self.people.groups)).gr_gid
        os.chown(path, uid, gid)
        acl = self.random_acl(directory)
        if acl:
            run("setfacl", "-m", acl, str(path))
        # chmod after setfacl: with an ACL the group bits are the mask, so the mask is random too
        os.chmod(path, r.choice(DIR_MODES if directory else FILE_MODES))

    def build(self, n_docs: int, n_folders: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.folders = [""]
        for i in range(n_folders):
            parent = self.rng.choice(self.folders)
            rel = f"{parent}/d{i}" if parent else f"d{i}"
            (self.root / rel).mkdir()
            self.folders.append(rel)
            self.set_permissions(rel, directory=True)
        for i in range(n_docs):
            folder = self.rng.choice(self.folders)
            rel = f"{folder}/doc{i}.md" if folder else f"doc{i}.md"
            canary = f"zq{i}canary{self.rng.randrange(10**9)}"
            (self.root / rel).write_text(f"# Document {i}\n\nThe word {canary} is only here.\n")
            self.docs[rel] = canary
            self.ever.add(rel)
            self.set_permissions(rel, directory=False)

    def edit(self) -> str:
        """One random permission edit made in the source itself; returns what it did."""
        r = self.rng
        what = r.choice(["chmod", "chmod", "chown", "setfacl", "setfacl", "revoke", "dir", "member", "move"])
        doc = r.choice(sorted(self.docs))
        path = self.root / doc
        if what == "chmod":
            mode = r.choice(FILE_MODES)
            os.chmod(path, mode)
            done = f"chmod {mode:o} {doc}"
        elif what == "chown":
            user, group = r.choice(self.people.users), r.choice(self.people.groups)
            run("chown", f"{user}:{group}", str(path))
            done = f"chown {user}:{group} {doc}"
        elif what == "setfacl":
            spec = self.random_acl(False) or f"u:{r.choice(self.people.users)}:r--,m::r--"
            run("setfacl", "-m", spec, str(path))
            done = f"setfacl -m {spec} {doc}"
        elif what == "revoke":
            run("setfacl", "-b", str(path))
            os.chmod(path, 0o600)
            done = f"setfacl -b; chmod 600 {doc}"
        elif what == "dir":
            folder = r.choice(self.folders[1:] or [""])
            if folder:
                self.set_permissions(folder, directory=True)
            else:
                os.chmod(self.root, r.choice((0o755, 0o711, 0o750)))
            done = f"permissions of folder {folder or '.'}"
        elif what == "member":
            user, group = r.choice(self.people.users), r.choice(self.people.groups)
            members = grp.getgrnam(group).gr_mem
            if user in members:
                run("gpasswd", "-d", user, group)
                done = f"gpasswd -d {user} {group}"
            else:
                run("gpasswd", "-a", user, group)
                done = f"gpasswd -a {user} {group}"
        else:
            folder = r.choice(self.folders)
            name = Path(doc).name
            rel = f"{folder}/{name}" if folder else name
            if rel == doc or rel in self.docs:
                os.chmod(path, r.choice(FILE_MODES))
                done = f"chmod {doc} (move target taken)"
            else:
                os.rename(path, self.root / rel)
                self.docs[rel] = self.docs.pop(doc)
                self.ever.add(rel)
                done = f"mv {doc} {rel}"
        self.edits.append(done)
        return done


_ASK_AS = """
import json, os, sys
job = json.load(sys.stdin)
for name, uid, gid, groups in job["users"]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            os.write(w, bytes(49 if os.access(p, os.R_OK) else 48 for p in job["paths"]))
        finally:
            os._exit(0)
    os.close(w)
    answer = b""
    while chunk := os.read(r, 65536):
        answer += chunk
    os.close(r)
    os.waitpid(pid, 0)
    sys.stdout.write(name + " " + answer.decode() + "\\n")
"""


def source_decisions(root: Path, users: Sequence[str], docs: Sequence[str]) -> dict[tuple[str, str], bool]:
    """`access(R_OK)` as each user, in a child that took the user's identity: the kernel decides.

    One small helper process forks a child per user (forking this test process, with its stores
    and threads, costs ~100 ms a fork)."""
    job = {"users": [], "paths": [str(root / d) for d in docs]}
    for user in users:
        entry = pwd.getpwnam(user)
        job["users"].append([user, entry.pw_uid, entry.pw_gid, os.getgrouplist(user, entry.pw_gid)])
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _ASK_AS], input=json.dumps(job), capture_output=True, text=True, check=True
    )
    out: dict[tuple[str, str], bool] = {}
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for user in users:
        answer = lines.get(user, "")
        if len(answer) != len(docs):
            raise RuntimeError(f"access() as {user} gave no answer: {done.stderr.strip()}")
        for doc, allowed in zip(docs, answer, strict=True):
            out[(doc, user)] = allowed == "1"
    return out


def token_principal(tenant: str, user: str) -> Principal:
    """What the user's session token carries under the default mapping: name and groups' names."""
    entry = pwd.getpwnam(user)
    groups = sorted({grp.getgrgid(g).gr_name for g in os.getgrouplist(user, entry.pw_gid)})
    return Principal(tenant=tenant, user=user, groups=tuple(groups))


def index_decisions(
    components: Any, tenant: str, source: str, users: Sequence[str], docs: Sequence[str]
) -> dict[tuple[str, str], bool]:
    """The lexical store's access-filtered fetch of every passage of every document, per user."""
    lexical = components.lexical
    ids = [p.passage_id for d in docs for p in lexical.doc_passages(tenant, f"{source}:{d}")]
    as_of = datetime.now(UTC) + timedelta(seconds=1)
    out: dict[tuple[str, str], bool] = {}
    for user in users:
        access = AccessFilter.for_principal(token_principal(tenant, user), as_of)
        seen = {p.doc_id for p in lexical.passages(access, ids)}
        for d in docs:
            out[(d, user)] = f"{source}:{d}" in seen
    return out


@dataclass
class Tally:
    pairs: int = 0
    wider: int = 0
    stricter: int = 0
    stricter_reported: int = 0
    edits: int = 0
    wider_pairs: list[str] = field(default_factory=list)
    unreported: list[str] = field(default_factory=list)

    def compare(
        self,
        source: dict[tuple[str, str], bool],
        index: dict[tuple[str, str], bool],
        narrowed: Sequence[str],
        source_name: str,
    ) -> None:
        """Count the pairs; a stricter pair is reported when the sync report names its document."""
        named = {line.split(": ", 1)[0] for line in narrowed}
        for pair, allowed in source.items():
            self.pairs += 1
            doc, user = pair
            if index[pair] and not allowed:
                self.wider += 1
                self.wider_pairs.append(f"{doc} {user}")
            elif allowed and not index[pair]:
                self.stricter += 1
                if doc in named or f"{source_name}:{doc}" in named:
                    self.stricter_reported += 1
                else:
                    self.unreported.append(f"{doc} {user}")

    def summary(self) -> dict[str, int]:
        return {
            "pairs": self.pairs,
            "wider": self.wider,
            "stricter": self.stricter,
            "stricter_reported": self.stricter_reported,
            "edits": self.edits,
        }


def remove_tree(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
