"""The translation from a source's decisions to an allow list: never wider, stricter only where reported.

A property test against the reference (the source's decision per known user, with the groups the
source knows them by): random directories, decisions, granted groups and mappings.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.permissions import Directory, PrincipalMap, index_admits, principal_entries, translate

USERS = [f"u{i}" for i in range(8)] + ["bad name"]
GROUPS = ["hr", "eng", "all", "ops", "bad\tgroup"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[Directory, PrincipalMap, frozenset[str], frozenset[str]]:
    users = draw(st.sets(st.sampled_from(USERS), min_size=1))
    groups_of = {u: frozenset(draw(st.sets(st.sampled_from(GROUPS), max_size=3))) for u in users}
    admitted = frozenset(draw(st.sets(st.sampled_from(sorted(users)))))
    granted = frozenset(draw(st.sets(st.sampled_from(GROUPS), max_size=3)))
    unmap_users = {u: "" for u in draw(st.sets(st.sampled_from(USERS), max_size=2))}
    rename = {g: f"{g}-team" for g in draw(st.sets(st.sampled_from(GROUPS[:4]), max_size=2))}
    return Directory(groups_of), PrincipalMap(users=unmap_users, groups=rename), admitted, granted


@settings(max_examples=600, deadline=None)
@given(cases())
def test_never_wider_and_every_stricter_pair_is_reported(
    case: tuple[Directory, PrincipalMap, frozenset[str], frozenset[str]],
) -> None:
    directory, mapping, admitted, granted = case
    t = translate(directory, mapping, admitted.__contains__, granted)
    for user in directory.groups_of:
        user_entry, groups = principal_entries(directory, mapping, user)
        index = user_entry is not None and index_admits(t.acl, user_entry, groups)
        if index:
            assert user in admitted, (user, t.acl)
        elif user in admitted:
            # stricter: only for a principal without a token name, and said so
            assert user_entry is None and f"user {user}" in t.unmapped, (user, t)
            assert any(user in line for line in t.narrowed)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_group_is_kept_only_when_all_its_known_members_may_read(
    case: tuple[Directory, PrincipalMap, frozenset[str], frozenset[str]],
) -> None:
    directory, mapping, admitted, granted = case
    t = translate(directory, mapping, admitted.__contains__, granted)
    for group in granted:
        entry = mapping.group(group)
        if entry is not None and entry in t.acl:
            assert directory.members(group) <= admitted


def test_a_denied_member_turns_the_group_into_members_and_says_why() -> None:
    directory = Directory({"ann": frozenset({"hr"}), "bob": frozenset({"hr"}), "cat": frozenset()})
    t = translate(directory, PrincipalMap(), {"ann"}.__contains__, ["hr"], admits_unknown=True)
    assert t.acl == ("user:ann",)
    assert any("group hr is granted but bob may not read" in line for line in t.narrowed)
    assert any("does not name" in line for line in t.narrowed)


def test_defaults_are_the_same_names_and_bad_names_are_unmapped() -> None:
    m = PrincipalMap(users={"DOM\\ann": "ann", "svc": ""}, groups={"Domain Users": "staff"})
    assert m.user("bob") == "user:bob" and m.group("hr") == "group:hr"
    assert m.user("DOM\\ann") == "user:ann" and m.group("Domain Users") == "group:staff"
    assert m.user("svc") is None and m.user("two words") is None and m.group("tab\there") is None
