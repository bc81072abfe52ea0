"""A local folder's own permissions (issue 19 item 5): who of the system's users may read each file.

The kernel decides whether a user may open a file for reading: search (x) on every directory on
the way, then read (r) on the file, each by the POSIX.1e algorithm (`acl_permission_check` and
`posix_acl_permission` in Linux):

1. the owner gets the owner bits (never masked);
2. a named user entry gets its bits, masked;
3. a user in the owning group or in any named group entry gets access if one of those matching
   entries grants it (masked); matching some and none granting is a denial, not a fall-through;
4. everyone else gets the "other" bits.

Without an extended ACL the group class is the mode's group bits; with one, the mode's group bits
are the mask and the owning group's bits come from the ACL (the kernel keeps the two in step on
chmod). One quirk is the kernel's and kept: with the group bits (the mask) at 000 the ACL is not
consulted at all (`acl_permission_check` only calls `check_acl` when `mode & S_IRWXG`), so a named
user or a member of a named group is then judged by the "other" bits, not refused by the mask.
Privileges are not permissions: root's capabilities are not modelled, root is judged by the bits
like anyone, so the index is at most stricter for root.

This module asks that question of the OS (lstat and the `system.posix_acl_access` extended
attribute, parsed here: no C library) for every user the system knows (pwd/grp, read afresh each
pass so a changed membership counts), and hands the decisions to `connectors.permissions.translate`,
which makes the allow list. "Others" also admit users the system does not know: no allow list
can say that, so such a file is narrowed to the known readers and reported.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from connectors.permissions import Directory, PrincipalMap, Translation, translate

ACL_XATTR = "system.posix_acl_access"
_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
R, W, X = 4, 2, 1
_UNKNOWN = -1  # a uid no file can be owned by and no entry can name: "a user the system does not know"


@dataclass(frozen=True)
class Node:
    """The permission facts of one file or directory, as the kernel reads them."""

    uid: int
    gid: int
    owner: int  # owner bits (rwx as 4/2/1)
    group: int  # the owning group's bits (from the ACL when it has a mask)
    other: int
    users: tuple[tuple[int, int], ...] = ()  # named user entries: (uid, bits)
    groups: tuple[tuple[int, int], ...] = ()  # named group entries: (gid, bits)
    mask: int | None = None

    def permits(self, uid: int, gids: frozenset[int], want: int) -> bool:
        """The kernel's decision for a user with these groups (want: R or X)."""
        if uid == self.uid:
            return self.owner & want == want
        if self.mask == 0:  # group bits 000: the kernel does not consult the ACL at all (below)
            return (0 if self.gid in gids else self.other) & want == want
        mask = 7 if self.mask is None else self.mask
        for named, bits in self.users:
            if named == uid:
                return bits & mask & want == want
        matched = False
        for gid, bits in ((self.gid, self.group), *self.groups):
            if gid in gids:
                if bits & mask & want == want:
                    return True
                matched = True
        if matched:
            return False
        return self.other & want == want

    def granted_groups(self, want: int) -> tuple[int, ...]:
        """Groups an entry grants as a group (their members, unless singled out above, get in)."""
        mask = 7 if self.mask is None else self.mask
        found = [self.gid] if self.group & mask & want == want else []
        found += [gid for gid, bits in self.groups if bits & mask & want == want]
        return tuple(found)


def parse_acl(data: bytes) -> tuple[dict[int, tuple[tuple[int, int], ...]], int | None]:
    """The entries of a `system.posix_acl_access` value: {tag: ((id, bits), ...)} and the mask.

    Raises ValueError on anything the kernel would not have written: a wrong version or length, an
    unknown tag, a base entry missing or repeated, named entries without a mask."""
    if len(data) < 4 or (len(data) - 4) % 8:
        raise ValueError(f"POSIX ACL of {len(data)} bytes: not a header and whole entries")
    (version,) = struct.unpack_from("<I", data, 0)
    if version != _VERSION:
        raise ValueError(f"POSIX ACL version {version}, expected {_VERSION}")
    entries: dict[int, list[tuple[int, int]]] = {}
    for offset in range(4, len(data), 8):
        tag, bits, ident = struct.unpack_from("<HHI", data, offset)
        if tag not in (_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER) or bits & ~7:
            raise ValueError(f"POSIX ACL entry with tag {tag:#x} and permissions {bits:#x}: not understood")
        entries.setdefault(tag, []).append((ident, bits))
    for tag in (_USER_OBJ, _GROUP_OBJ, _OTHER, _MASK):
        if len(entries.get(tag, ())) > 1:
            raise ValueError(f"POSIX ACL with more than one entry of tag {tag:#x}")
    if not all(entries.get(tag) for tag in (_USER_OBJ, _GROUP_OBJ, _OTHER)):
        raise ValueError("POSIX ACL without its owner, group or other entry")
    if (entries.get(_USER) or entries.get(_GROUP)) and not entries.get(_MASK):
        raise ValueError("POSIX ACL with named entries and no mask")
    mask = entries[_MASK][0][1] if entries.get(_MASK) else None
    return {tag: tuple(found) for tag, found in entries.items()}, mask


def read_node(path: Path) -> Node:
    """The permission facts of a file or directory, never through a link. Raises OSError or ValueError."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"{path}: became a link: its permissions are not read")
    mode = st.st_mode
    owner, group_bits, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
    try:
        raw = os.getxattr(path, ACL_XATTR, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):  # no ACL: the mode bits alone
            return Node(st.st_uid, st.st_gid, owner, group_bits, other)
        raise
    entries, mask = parse_acl(raw)
    if mask is None:  # a minimal ACL: the mode bits say it all
        return Node(st.st_uid, st.st_gid, owner, group_bits, other)
    return Node(
        st.st_uid,
        st.st_gid,
        owner,
        entries[_GROUP_OBJ][0][1],
        other,
        users=entries.get(_USER, ()),
        groups=entries.get(_GROUP, ()),
        mask=group_bits,  # chmod sets the mask through the group bits; the kernel keeps them equal
    )


@dataclass(frozen=True)
class SystemUsers:
    """Every user the system knows, with the groups a login gives them (initgroups), and group names."""

    uids: Mapping[str, int]
    gids_of: Mapping[str, frozenset[int]]
    group_names: Mapping[int, str]

    def directory(self) -> Directory:
        named = {
            user: frozenset(self.group_names[g] for g in gids if g in self.group_names)
            for user, gids in self.gids_of.items()
        }
        return Directory(named)


def system_users() -> SystemUsers:
    """Read afresh every pass: a user added to a group (gpasswd) reads from the next pass on."""
    names = {g.gr_gid: g.gr_name for g in grp.getgrall()}
    members: dict[str, set[int]] = {}
    for g in grp.getgrall():
        for member in g.gr_mem:
            members.setdefault(member, set()).add(g.gr_gid)
    uids: dict[str, int] = {}
    gids_of: dict[str, frozenset[int]] = {}
    for p in pwd.getpwall():
        if p.pw_name in uids:
            continue  # a second entry of one name: the first is the one a login finds
        uids[p.pw_name] = p.pw_uid
        gids_of[p.pw_name] = frozenset({p.pw_gid, *members.get(p.pw_name, ())})
    return SystemUsers(uids, gids_of, names)


@dataclass
class PosixAccess:
    """Each listed file's translation, or why its permissions could not be read (then: nobody)."""

    translations: dict[str, Translation] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


def posix_access(
    root: Path, files: Sequence[str], mapping: PrincipalMap, users: SystemUsers | None = None
) -> PosixAccess:
    """Who may read each file (paths relative to `root`), blocking: runs in a worker thread.

    The directories on the way are the root's ancestors, the root and the folders below it; each is
    read once per pass and narrows the readers of everything below it."""
    users = users or system_users()
    directory = users.directory()
    everyone = frozenset(users.uids)
    result = PosixAccess()
    reach: dict[str, tuple[frozenset[str], bool] | str] = {}  # folder -> (who can search into it, unknown can)

    def search(who: frozenset[str], unknown: bool, node: Node) -> tuple[frozenset[str], bool]:
        passed = frozenset(u for u in who if node.permits(users.uids[u], users.gids_of[u], X))
        return passed, unknown and node.permits(_UNKNOWN, frozenset(), X)

    def into(folder: str) -> tuple[frozenset[str], bool] | str:
        if folder in reach:
            return reach[folder]
        if folder == "":
            who, unknown = everyone, True
            try:
                for ancestor in [*reversed(root.parents), root]:
                    who, unknown = search(who, unknown, read_node(ancestor))
                found: tuple[frozenset[str], bool] | str = (who, unknown)
            except (OSError, ValueError) as exc:
                found = f"{root}: cannot read the folder's permissions: {_why(exc)}"
        else:
            parent = into(folder.rpartition("/")[0])
            if isinstance(parent, str):
                found = parent
            else:
                try:
                    found = search(*parent, read_node(root / folder))
                except (OSError, ValueError) as exc:
                    found = f"{root / folder}: cannot read the folder's permissions: {_why(exc)}"
        reach[folder] = found
        return found

    for rel in files:
        above = into(rel.rpartition("/")[0])
        if isinstance(above, str):
            result.unreadable[rel] = above
            continue
        who, unknown = above
        try:
            node = read_node(root / rel)
        except (OSError, ValueError) as exc:
            result.unreadable[rel] = f"{root / rel}: cannot read its permissions: {_why(exc)}"
            continue
        admitted = frozenset(u for u in who if node.permits(users.uids[u], users.gids_of[u], R))
        granted = [users.group_names[g] for g in node.granted_groups(R) if g in users.group_names]
        result.translations[rel] = translate(
            directory,
            mapping,
            admitted.__contains__,
            granted,
            admits_unknown=unknown and node.permits(_UNKNOWN, frozenset(), R),
        )
    return result


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else None) or str(exc)


__all__ = [
    "ACL_XATTR",
    "Node",
    "PosixAccess",
    "SystemUsers",
    "parse_acl",
    "posix_access",
    "read_node",
    "system_users",
]
