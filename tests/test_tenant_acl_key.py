"""The tenant-qualified ACL keys (indexer.payload.tenant_acl_key): two different (tenant, entry) pairs
never share a key, whatever characters either holds, and a point's keys follow its ACL in one write."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from indexer.payload import TENANT_ACL, acl_payload, split_tenant_acl_key, tenant_acl_key, tenant_acl_keys

# Separators, digits and the characters a naive join would confuse, beside any text.
_tricky = st.sampled_from([":", "\x1f", "\x00", "1", "0", "/", "group:", "user:", "é", ""])
text = st.one_of(st.text(max_size=12), st.lists(_tricky, max_size=6).map("".join))


@given(text, text, text, text)
@example("a:b", "c", "a", "b:c")
@example("1:a", "b", "1", "a:b")
@example("", ":x", ":", "x")
def test_two_pairs_share_a_key_only_when_they_are_the_same_pair(t1: str, e1: str, t2: str, e2: str) -> None:
    assert (tenant_acl_key(t1, e1) == tenant_acl_key(t2, e2)) == ((t1, e1) == (t2, e2))


@given(text, text)
def test_a_key_gives_back_its_pair(tenant: str, entry: str) -> None:
    assert split_tenant_acl_key(tenant_acl_key(tenant, entry)) == (tenant, entry)


@pytest.mark.parametrize("bad", ["", "x", "3:ab", "01:a:b", "1:ab", "-1:a:b", "2:ab"])
def test_what_no_pair_makes_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        split_tenant_acl_key(bad)


@given(text, st.lists(text, max_size=5))
def test_the_keys_are_the_acl_entries_of_the_tenant_and_nothing_else(tenant: str, acl: list[str]) -> None:
    since = {e: datetime(2026, 1, 1, tzinfo=UTC) for e in acl[:1]}
    payload = acl_payload(tenant, acl, since)
    assert payload["acl"] == acl
    assert payload[TENANT_ACL] == tenant_acl_keys(tenant, acl)
    assert {split_tenant_acl_key(k) for k in payload[TENANT_ACL]} == {(tenant, e) for e in acl}
