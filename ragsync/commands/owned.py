"""How commands that need a home's stores share it with the home's owner.

Embedded profile: when `ragsync serve` owns the home, a command that reads the stores (ask, status,
verify, audit deletion) goes through its API; when nobody owns it, the command owns it for as long as it runs; while a
short-lived owner (a sync scanning and applying, another ask) has it, the command waits its turn,
saying so once. Never a lock traceback: at worst one line naming the owner. The cluster profile has servers
any number of processes share, so it opens its adapters directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ragsync.commands.common import EXIT_FAILED, fail, note
from ragsync.home_lock import HomeOwned, OwnerInfo, claim
from ragsync.operator_key import operator_keys
from ragsync.owner_client import OwnerClient
from ragsync.settings import Settings
from ragsync.wiring import Components, build


def owned_message(exc: HomeOwned, what: str) -> str:
    owner = exc.owner
    if owner is None:
        return f"{exc.home} is owned by another process; {what} needs its stores"
    if owner.api is None:
        return (
            f"{exc.home} is owned by {owner.describe()}, which serves no API; {what} needs its stores:"
            " run `ragsync serve` instead of `ragsync worker`, or stop it"
        )
    return f"{exc.home} is owned by {owner.describe()}; {what} needs its stores: stop it first"


def waiting(owner: OwnerInfo) -> None:
    note(f"waiting for {owner.describe()} to finish with the stores")


@contextlib.contextmanager
def stores_or_owner(
    settings: Settings, command: str, *, with_embedder: bool = True
) -> Iterator[Components | OwnerClient]:
    """The stores (this process owns the home meanwhile) or a client of the owner that has them."""
    if settings.profile != "embedded":
        components = build(settings, with_embedder=with_embedder)
        try:
            yield components
        finally:
            components.close()
        return
    try:
        claimed = claim(settings.home, command, on_wait=waiting)
    except HomeOwned as exc:
        fail(owned_message(exc, f"`ragsync {command}`"), EXIT_FAILED)
    if isinstance(claimed, OwnerInfo):
        client = OwnerClient(claimed, operator_keys(settings))
        try:
            yield client
        finally:
            client.close()
        return
    components = build(settings, with_embedder=with_embedder)
    try:
        yield components
    finally:
        components.close()
        claimed.release()


@contextlib.contextmanager
def own_stores(settings: Settings, command: str) -> Iterator[Components]:
    """The stores, for a command that cannot go through an API (eval): waits for short-lived owners,
    one line naming a long-lived one."""
    with stores_or_owner(settings, command) as stores:
        if isinstance(stores, OwnerClient):
            fail(owned_message(HomeOwned(settings.home, stores.owner), f"`ragsync {command}`"), EXIT_FAILED)
        yield stores
