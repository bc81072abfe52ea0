"""`ragsync erase --tenant T DOC_ID`: erase a document everywhere, all versions and its history, on request."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, fail, note, settings_of
from ragsync.wiring import Components, build
from schemas._time import utcnow
from schemas.events import DeletePayload, Event, EventKind, make_event_id, split_doc_id, valid_source_name

POLL_S = 0.2


@dataclass(frozen=True)
class Confirmation:
    """Whether the erasure was applied and purged within the bound, after how long, and if not, why."""

    confirmed: bool
    seconds: float
    why_not: str


def resolve(components: Components, tenant: str, name: str, source: str | None) -> tuple[str, str, int]:
    """(source, doc_id, version to erase at) for a document named by its full ID or its path.

    The version is past everything the indexer applied and the connector emitted, so the erasure is
    never stale, and the connector's next event for the document (if the source still has it)
    continues after it.
    """
    from connectors.state import ConnectorState

    if ":" in name and source is None:
        try:
            source, path = split_doc_id(name)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    else:
        path = name
    state = ConnectorState(components.settings.home / "connectors.db")
    try:
        if source is None:
            sources = sorted({s for s in state.sources() if state.get(s, tenant, path) is not None})
            if not sources:
                raise click.UsageError(
                    f"no source of tenant {tenant} has {path!r}: pass --source or the full doc ID (source:path)"
                )
            if len(sources) > 1:
                raise click.UsageError(f"{path!r} is in several sources ({', '.join(sources)}): pass --source")
            source = sources[0]
        if not valid_source_name(source):
            raise click.UsageError(f"invalid source name {source!r}")
        doc_id = f"{source}:{path}"
        row = state.get(source, tenant, path)
    finally:
        state.close()
    known = components.docs.get(tenant, doc_id)
    version = max(row.version if row else 0, known.applied_version if known else 0) + 1
    return source, doc_id, version


@click.command()
@click.argument("doc_id")
@click.option("--tenant", required=True, help="The document's tenant.")
@click.option("--source", default=None, help="Its source, when DOC_ID is a path found in several.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until every copy is erased.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def erase(ctx: click.Context, doc_id: str, tenant: str, source: str | None, wait: bool, as_json: bool) -> None:
    """Erase DOC_ID from every store, cache and log: every version, its as-of history included.

    DOC_ID is the document's path within its source (as `ragsync audit deletions` lists paths) or its
    full doc ID (source:path). The erasure travels as a deletion event marked as an erasure: every
    version leaves every store, the content leaves the event log and the dead letters, and the stores
    are purged physically at once rather than on schedule. The audit trail keeps the deletion (IDs and
    instants only); `ragsync audit deletion DOC_ID` certifies it afterwards. If the source still has
    the document, its next sync indexes it again: remove it at the source too.

    With --wait (the default) it returns once every store confirmed the purge, or after
    `purge_max_delay_s` (60) with one line saying what is not confirmed yet.

    \b
    Exit status: 0 erased (or, with --no-wait, published); 1 not confirmed in time; 2 bad usage.
    """
    settings = settings_of(ctx)
    components = build(settings, with_embedder=False)
    try:
        source_name, full_id, version = resolve(components, tenant, doc_id, source)
        event = Event(
            event_id=make_event_id(source_name, tenant, full_id, version, EventKind.DELETE),
            kind=EventKind.DELETE,
            tenant=tenant,
            doc_id=full_id,
            version=version,
            occurred_at=utcnow(),
            source=source_name,
            payload=DeletePayload(reason="erasure on request", erase=True),
        )
        components.events.publish(event)
        components.events.flush()
        _mark_connector_state(components, source_name, tenant, full_id, version)
    finally:
        components.close()
    report: dict[str, object] = {"tenant": tenant, "doc_id": full_id, "version": version, "event_id": event.event_id}
    confirmation = None
    if wait:
        confirmation = _apply_and_wait(ctx, settings, tenant, full_id, version, doc_id)
        report["erased"] = confirmation.confirmed
        report["seconds"] = round(confirmation.seconds, 3)
        if not confirmation.confirmed:
            report["not_confirmed"] = confirmation.why_not
    if as_json:
        click.echo(json.dumps(report, indent=2))
    elif confirmation is None:
        click.echo(
            f"published: {tenant}/{full_id} at version {version} (not waiting: `ragsync audit deletion {doc_id}`)"
        )
    elif confirmation.confirmed:
        click.echo(
            f"erased: {tenant}/{full_id} at version {version}, applied and purged from every store in"
            f" {confirmation.seconds:.1f}s (`ragsync audit deletion {doc_id}` certifies it)"
        )
    if confirmation is not None and not confirmation.confirmed:
        note(confirmation.why_not)
        ctx.exit(EXIT_FAILED)


def _mark_connector_state(components: Components, source: str, tenant: str, doc_id: str, version: int) -> None:
    """The connector's row says deleted at the erasure's version: a later sync continues after it."""
    from dataclasses import replace

    from connectors.state import ConnectorState

    path = split_doc_id(doc_id)[1]
    state = ConnectorState(components.settings.home / "connectors.db")
    try:
        row = state.get(source, tenant, path)
        if row is not None:
            state.put(source, replace(row, version=version, deleted=True))
    finally:
        state.close()


def _apply_and_wait(
    ctx: click.Context, settings: object, tenant: str, doc_id: str, version: int, name: str
) -> Confirmation:
    """Embedded: the home's owner (`ragsync serve`) applies and purges the erasure; without one, this
    command owns the home meanwhile and does it. Cluster: the workers apply it, their purge timer covers
    it at once (an erasure asks for it). Either way, wait until the state says erased and every store's
    purge covers it, for at most the purge bound (`purge_max_delay_s`) from now."""
    from ragsync.home_lock import HomeLock, current_owner
    from ragsync.settings import Settings

    assert isinstance(settings, Settings)
    started = time.monotonic()
    bound = settings.purge_max_delay_s
    deadline = started + bound
    owner = "the workers" if settings.profile == "cluster" else "this command"
    if settings.profile == "embedded":
        while (info := current_owner(settings.home)) is None:
            lock = HomeLock(settings.home)
            if lock.try_acquire("erase"):
                try:
                    from ragsync.pipeline import apply_events

                    applier = build(settings)
                    try:
                        apply_events(applier)  # the erasure is purged as it is applied
                    finally:
                        applier.close()
                finally:
                    lock.release()
                break
        if info is not None:
            owner = f"`ragsync {info.command}` (pid {info.pid})"
    components = build(settings, with_embedder=False)
    try:
        while True:  # checked at least once, however long applying took here
            state = components.docs.get(tenant, doc_id)
            if state is not None and state.deleted and state.applied_version >= version:
                return _purged(components, tenant, doc_id, deadline, started, bound, name)
            if time.monotonic() >= deadline:
                return Confirmation(
                    False,
                    time.monotonic() - started,
                    f"not confirmed: {owner} did not apply the erasure of {tenant}/{doc_id} within {bound:g}s"
                    " (purge_max_delay_s); it stays published and is applied when the indexer catches up"
                    " (see `ragsync status`)",
                )
            time.sleep(POLL_S)
    except click.UsageError as exc:
        fail(str(exc), EXIT_USAGE)
    finally:
        components.close()


def _purged(
    components: Components, tenant: str, doc_id: str, deadline: float, started: float, bound: float, name: str
) -> Confirmation:
    """Whether every purgeable store covered the erasure's audit record (waits for the owner's or the
    cluster's purge, until the deadline)."""
    audit = components.audit
    mine = [r for r in audit.records(tenant) if r.doc_id == doc_id and r.erase]
    if not mine:
        return Confirmation(
            False, time.monotonic() - started, f"not confirmed: no erasure of {tenant}/{doc_id} is in the audit trail"
        )
    latest = max(mine, key=lambda r: r.seq or 0)
    seq = latest.seq or 0
    # The stores that dropped it and purge physically: the lexical store and the vector store.
    expected = {components.lexical.name} | ({"qdrant-edge", "qdrant"} & set(latest.removed_at))
    while True:
        purged = {p.store for p in audit.purges() if p.covers_seq >= seq}
        if expected <= purged:
            return Confirmation(True, time.monotonic() - started, "")
        if time.monotonic() >= deadline:
            missing = ", ".join(sorted(expected - purged))
            return Confirmation(
                False,
                time.monotonic() - started,
                f"not confirmed: the erasure is applied (no query returns it) but {missing} did not confirm"
                f" its physical purge within {bound:g}s (purge_max_delay_s); `ragsync audit deletion {name}`"
                " shows each copy",
            )
        time.sleep(POLL_S)
