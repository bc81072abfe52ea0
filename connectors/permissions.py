"""A source's own permission decisions, translated into passage ACLs: exact for whom the source knows, never wider.

Issue 19: the source (a wiki's ACL rules, a file's security descriptor, POSIX mode bits and ACLs) is
the only authority on who reads a document; ragsync translates, it does not decide. Every source
connector asks its source the same question: *for this document, which of the users you know may
read it, and which of your groups does a rule grant as a group?* `translate` turns the answer into
the allow list every store already enforces inside its query (`schemas.principal.acl_allows`: some
entry names the principal).

Why allow entries only, and not allow and deny entries in every store: sources rank their rules
(DokuWiki's most specific rule wins and takes the highest level among the matching entries; POSIX
checks owner, then named users, then groups, then others; an NT DACL is ordered and inherited), so
no single "some allow and no deny" filter reproduces all three. The source's own decision per known
user does, and an allow list can say it exactly:
- `user:u` for every user the source admits (unless a group entry kept below already covers them);
- `group:g` only when a rule grants g *as a group* and every member the source knows is admitted;
  if any member is shut out (a deny entry, an owner whose bits exclude them, a more specific rule),
  the group is granted member by member instead, so the excluded member is not let in through it.
Principals the source does not know (a token user absent from the wiki, POSIX "others", DokuWiki's
@ALL, NT's Everyone) can only be granted by a group entry; where the source admits them anyway the
translation is stricter and says so: every narrowing is a `narrowed` line for the sync report
("permissions narrowed: <doc>: <why>"). The index is therefore never wider than the source for any
principal whose token carries the groups the source knows them by, which is what the mapping below
promises: a token's groups are the source's groups under the mapping.

Pure: no I/O. Connectors supply the directory and the decisions; tests compare the result pair by
pair with the source's own check.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from schemas.events import ACL_ENTRY_PATTERN

_ENTRY = re.compile(ACL_ENTRY_PATTERN)


@dataclass(frozen=True)
class PrincipalMap:
    """Source principals to token principals, for one source (`[sources.principals]` in the settings).

    Plain defaults: a source user `ann` is `user:ann`, a source group `hr` is `group:hr`. An explicit
    mapping replaces the default for that name; mapping a name to "" leaves it unmapped. A name that
    cannot be an ACL entry (whitespace, control characters) is unmapped too. An unmapped principal
    grants nothing: the translation is stricter and the sync report names it once per pass.
    """

    users: Mapping[str, str] = field(default_factory=dict)
    groups: Mapping[str, str] = field(default_factory=dict)

    def user(self, name: str) -> str | None:
        return _entry("user", self.users.get(name, name))

    def group(self, name: str) -> str | None:
        return _entry("group", self.groups.get(name, name))


def _entry(kind: str, name: str) -> str | None:
    entry = f"{kind}:{name}"
    return entry if name and _ENTRY.fullmatch(entry) else None


@dataclass(frozen=True)
class Directory:
    """Who the source knows: each user it knows, with the source groups it counts them in."""

    groups_of: Mapping[str, frozenset[str]]

    def members(self, group: str) -> frozenset[str]:
        return frozenset(u for u, gs in self.groups_of.items() if group in gs)


@dataclass(frozen=True)
class Translation:
    acl: tuple[str, ...]
    """Sorted allow entries for the document's passages."""
    narrowed: tuple[str, ...] = ()
    """Why the ACL is stricter than the source, one line each (the sync report's 'permissions narrowed')."""
    unmapped: frozenset[str] = frozenset()
    """Source principals that would have been granted but have no token principal (reported once per pass)."""


def translate(
    directory: Directory,
    mapping: PrincipalMap,
    admits: Callable[[str], bool],
    granted_groups: Iterable[str] = (),
    *,
    admits_unknown: bool = False,
) -> Translation:
    """The allow list that admits exactly the known users `admits` admits, and nobody else.

    `admits(user)` is the source's own decision for a user it knows (with the groups it knows them
    by); `granted_groups` are the groups a rule of the source grants as such (so a member the source
    does not single out is admitted); `admits_unknown` says the source also admits users it does not
    know (others, @ALL, Everyone), which no allow list can say: that is narrowed and reported.
    """
    narrowed: list[str] = []
    unmapped: set[str] = set()
    admitted = {u for u in directory.groups_of if admits(u)}
    acl: set[str] = set()
    covered: set[str] = set()
    for group in sorted(set(granted_groups)):
        members = directory.members(group)
        entry = mapping.group(group)
        shut_out = sorted(members - admitted)
        if shut_out:
            narrowed.append(
                f"group {group} is granted but {', '.join(shut_out)} may not read: granted member by member"
            )
        elif entry is None:
            unmapped.add(f"group {group}")
            narrowed.append(f"group {group} has no token principal: granted member by member")
        else:
            acl.add(entry)
            covered |= members
    for user in sorted(admitted):
        entry = mapping.user(user)
        if entry is None:  # no token can name them, even through a kept group
            unmapped.add(f"user {user}")
            narrowed.append(f"user {user} has no token principal: not granted")
        elif user not in covered:
            acl.add(entry)
    if admits_unknown:
        narrowed.append(
            "the source lets in readers it does not name (others, @ALL, Everyone): only known ones are granted"
        )
    return Translation(acl=tuple(sorted(acl)), narrowed=tuple(narrowed), unmapped=frozenset(unmapped))


def index_admits(acl: Iterable[str], user_entry: str, group_entries: Iterable[str]) -> bool:
    """What the stores decide for a principal (the reference `acl_allows`, without the tenant): for tests."""
    granted = set(acl)
    return user_entry in granted or any(g in granted for g in group_entries)


def principal_entries(directory: Directory, mapping: PrincipalMap, user: str) -> tuple[str | None, tuple[str, ...]]:
    """The token entries a source user asks with: their mapped user entry and mapped groups."""
    groups = tuple(e for g in sorted(directory.groups_of.get(user, frozenset())) if (e := mapping.group(g)) is not None)
    return mapping.user(user), groups


def describe(doc: str, translation: Translation) -> list[str]:
    """The sync report's lines for one document's narrowed permissions."""
    return [f"permissions narrowed: {doc}: {why}" for why in translation.narrowed]


__all__ = [
    "Directory",
    "PrincipalMap",
    "Translation",
    "describe",
    "index_admits",
    "principal_entries",
    "translate",
]
