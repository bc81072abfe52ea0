"""An NT security descriptor's read decision, per user the server knows: the SMB source's half of issue 19.

Windows (and Samba's se_access_check) decide whether a token may read a file's data by walking the
DACL in its stored order: the first ACE that names a SID of the token and covers the read right
decides; a deny covering it refuses, an allow covering it admits; none means refused. Stored order
is what counts: canonical DACLs put explicit entries before inherited ones and denies before allows
within each, and inherited entries are copies made when the file was created or the parent's ACL
propagated, so each file's own DACL is the whole answer and no parent needs to be read. An
inherit-only ACE does not apply to the object it sits on. No DACL at all admits everyone; an empty one
nobody. The owner's implicit rights are READ_CONTROL and WRITE_DAC, not the file's data: the owner
reads only through an ACE, like everyone else.

The read right: FILE_READ_DATA, or GENERIC_READ / GENERIC_ALL left unmapped in a stored ACE.

A token's SIDs are only partly visible from outside: the user's SID, the domain groups the server's
SAM lists for them (Domain Users among them), Everyone and Authenticated Users are certain; anything else (a
BUILTIN alias, "Unix User\\x", a SID the server does not resolve, a well-known SID such as NETWORK) may
or may not be in it. So the decision is computed fail closed: an allow counts only for SIDs certainly
in the token, a deny for every SID that may be in it, and each rule that could not be decided exactly
becomes a `narrowed` line. The share's own security descriptor is evaluated the same way and both
must admit.

Pure: no I/O. connectors.smb reads the descriptors and the directory over SMB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from connectors.permissions import Directory, PrincipalMap, Translation, translate

FILE_READ_DATA = 0x00000001
GENERIC_ALL = 0x10000000
GENERIC_READ = 0x80000000
READ_RIGHTS = FILE_READ_DATA | GENERIC_ALL | GENERIC_READ
INHERIT_ONLY = 0x08
INHERITED = 0x10

EVERYONE = "S-1-1-0"
AUTHENTICATED_USERS = "S-1-5-11"


@dataclass(frozen=True, slots=True)
class Ace:
    allow: bool
    sid: str
    mask: int
    flags: int = 0

    @property
    def reads(self) -> bool:
        return bool(self.mask & READ_RIGHTS)

    @property
    def applies(self) -> bool:
        return not self.flags & INHERIT_ONLY


@dataclass(frozen=True, slots=True)
class Descriptor:
    owner: str | None
    dacl: tuple[Ace, ...] | None
    """None: no DACL (everyone has every right); (): an empty DACL (nobody)."""


@dataclass(frozen=True)
class SamDirectory:
    """Who the server knows, by SID: its users (name, groups) and its groups (name)."""

    domain_sid: str
    users: Mapping[str, tuple[str, frozenset[str]]]
    """user SID -> (account name, SIDs of the domain groups the SAM counts them in)"""
    groups: Mapping[str, str]
    """group SID -> group name"""

    def everyone_sids(self) -> frozenset[str]:
        """In every authenticated user's token. Not Domain Users: a user whose primary group is another
        group may lack it; it counts for those the SAM puts in it (GetGroupsForUser lists it)."""
        return frozenset({EVERYONE, AUTHENTICATED_USERS})

    def certain(self, user_sid: str) -> frozenset[str]:
        """The SIDs certainly in this user's token."""
        return frozenset({user_sid, *self.users[user_sid][1]}) | self.everyone_sids()

    def known(self, sid: str) -> bool:
        """A SID whose membership is known for every user: a user, a group the SAM lists or puts a user
        in, or an every-user SID."""
        return (
            sid in self.users
            or sid in self.groups
            or sid in self.everyone_sids()
            or any(sid in groups for _, groups in self.users.values())
        )

    def as_directory(self) -> Directory:
        """connectors.permissions' view: user names with the names of their groups."""
        return Directory(
            {name: frozenset(self.groups[g] for g in gs if g in self.groups) for name, gs in self.users.values()}
        )


def reads(descriptor: Descriptor, certain: frozenset[str], possible: frozenset[str] | None) -> bool:
    """Whether a token reads the data: allows count for `certain` SIDs, denies for `possible` ones too.

    `possible` None means every SID the directory does not know may be in the token (see module doc).
    """
    if descriptor.dacl is None:
        return True
    for ace in descriptor.dacl:
        if not ace.applies or not ace.reads:
            continue
        if ace.allow:
            if ace.sid in certain:
                return True
        elif ace.sid in certain or (possible is None or ace.sid in possible):
            return False
    return False


@dataclass(frozen=True)
class Decision:
    translation: Translation
    readers: frozenset[str]
    """Names of the known users the descriptors admit (for tests and the report)."""


def decide(
    descriptors: Sequence[Descriptor],
    sam: SamDirectory,
    mapping: PrincipalMap,
    names: Mapping[str, str] | None = None,
) -> Decision:
    """Every descriptor (the share's, the file's) must admit; the allow list that says so, never wider.

    `names`: display names for SIDs the directory does not list (the server's LSA), for the report.
    """
    shown = dict(names or {})

    def name(sid: str) -> str:
        if sid in sam.users:
            return sam.users[sid][0]
        return sam.groups.get(sid) or shown.get(sid) or sid

    def unknown_possible(sid: str) -> bool:
        return not sam.known(sid)

    readers: set[str] = set()
    # A SID the directory knows is in a token exactly when `certain` says so; any other may be.
    possible = frozenset(s for d in descriptors for s in _sids(d) if unknown_possible(s))
    for user_sid, (user, _) in sam.users.items():
        certain = sam.certain(user_sid)
        if all(reads(d, certain, possible) for d in descriptors):
            readers.add(user)

    narrowed: list[str] = []
    for d in descriptors:
        for ace in d.dacl or ():
            if not ace.applies or not ace.reads or sam.known(ace.sid):
                continue
            if ace.allow:
                narrowed.append(
                    f"allow for {name(ace.sid)} ({ace.sid}), whose members the server does not list: not granted"
                )
            else:
                narrowed.append(
                    f"deny for {name(ace.sid)} ({ace.sid}), whose members the server does not list: applies to all"
                )

    granted_groups: set[str] = set()
    file_descriptor = descriptors[-1]
    for ace in file_descriptor.dacl or ():
        if ace.allow and ace.applies and ace.reads and ace.sid in sam.groups:
            granted_groups.add(sam.groups[ace.sid])
    admits_unknown = all(_admits_unknown(d, sam) for d in descriptors)
    translation = translate(
        sam.as_directory(), mapping, lambda u: u in readers, granted_groups, admits_unknown=admits_unknown
    )
    if narrowed:
        translation = Translation(
            acl=translation.acl,
            narrowed=tuple(dict.fromkeys([*translation.narrowed, *narrowed])),
            unmapped=translation.unmapped,
        )
    return Decision(translation, frozenset(readers))


def _sids(descriptor: Descriptor) -> set[str]:
    return {ace.sid for ace in descriptor.dacl or ()}


def _admits_unknown(descriptor: Descriptor, sam: SamDirectory) -> bool:
    """Whether a user the directory does not list (a guest, another domain's user) may read: through an
    every-user SID, with no deny before it that could name them."""
    if descriptor.dacl is None:
        return True
    everyone = sam.everyone_sids()
    for ace in descriptor.dacl:
        if not ace.applies or not ace.reads:
            continue
        if ace.sid in everyone:
            return ace.allow
        if not ace.allow and not sam.known(ace.sid):
            return False
    return False


__all__ = ["Ace", "Decision", "Descriptor", "SamDirectory", "decide", "reads"]
