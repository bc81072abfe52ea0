"""The `ragsync` command line. Every command works on the profile chosen by --profile or RAGSYNC_PROFILE."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from query.tokens import InvalidToken, issue_token
from ragsync.settings import Settings
from ragsync.wiring import build
from schemas.principal import Principal

console = Console(stderr=True)


def _settings(ctx: click.Context) -> Settings:
    obj: dict[str, Any] = ctx.obj or {}
    overrides: dict[str, Any] = {k: v for k, v in obj.items() if v is not None}
    return Settings(**overrides)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--profile",
    type=click.Choice(["embedded", "cluster"]),
    default=None,
    help="embedded (default): no servers. cluster: Kafka, Elasticsearch, Qdrant, Redis.",
)
@click.option(
    "--home",
    type=click.Path(path_type=Path),
    default=None,
    help="Data folder of the embedded profile [env RAGSYNC_HOME, default ./.ragsync].",
)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="ragsync")
@click.pass_context
def main(ctx: click.Context, profile: str | None, home: Path | None, verbose: int) -> None:
    """Keep retrieval indexes in sync with document sources, and answer only from what the asker may see.

    \b
    Quick start:
      ragsync demo                         # the whole job on a sample drive, no servers
      ragsync sync ./docs                  # index a folder (.ragsync-acl.toml manifests give tenant and ACL)
      ragsync token issue --tenant acme --user ann --groups staff
      ragsync ask "What is the refund window?" --token <token>
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        logging.getLogger("ragsync.trace").setLevel(logging.WARNING)
    ctx.obj = {"profile": profile, "home": home}


@main.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--git", "is_git", is_flag=True, help="PATH is a git repository: index the wiki committed at --ref.")
@click.option("--ref", default="HEAD", show_default=True, help="With --git: the branch, tag or commit to index.")
@click.option("--subdir", default="", help="With --git: only this folder of the repository (its root for doc IDs).")
@click.option("--force", is_flag=True, help="Re-emit every document (e.g. after changing chunk settings).")
@click.option("--no-apply", is_flag=True, help="Only publish events (cluster: workers apply them).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def sync(
    ctx: click.Context, path: Path, is_git: bool, ref: str, subdir: str, force: bool, no_apply: bool, as_json: bool
) -> None:
    """Scan PATH (a folder, or a git wiki with --git) for changes and apply them to every store and cache.

    Emits an upsert per new or changed document, an ACL event per permission change and a delete per
    removed file (only after a scan with no read errors). In the cluster profile the events go to
    Kafka and `ragsync worker` applies them.
    """
    from connectors.base import SourceConnector
    from connectors.drive import DriveConnector
    from connectors.git_wiki import GitWikiConnector
    from ragsync.pipeline import sync_source

    settings = _settings(ctx)
    connector: SourceConnector = GitWikiConnector(path, ref=ref, subdir=subdir) if is_git else DriveConnector(path)
    apply = not no_apply and settings.profile == "embedded"
    components = build(settings)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=as_json or not console.is_terminal,
        ) as bar:
            scan_task = bar.add_task("scanning", total=None)
            apply_task = bar.add_task("indexing", total=None, visible=False)
            report = sync_source(
                components,
                connector,
                force=force,
                apply=apply,
                on_scan=lambda n: bar.advance(scan_task, n),
                on_apply=lambda n: bar.advance(apply_task, n),
                on_backlog=lambda n: bar.update(apply_task, total=n, visible=True),
            )
    finally:
        components.close()
    summary: dict[str, Any] = {
        "upserts": report.scan.upserts,
        "acl_changes": report.scan.acl_changes,
        "deletes": report.scan.deletes,
        "unchanged": report.scan.unchanged,
        "errors": report.scan.errors,
        "deletes_skipped": report.scan.deletes_skipped,
        "reindexed": report.reindexed,
        "dense": components.embedder is not None,
    }
    if report.stats is not None:
        summary.update(
            applied=report.stats.applied,
            stale=report.stats.stale,
            dead_lettered=report.stats.dead_lettered,
            passages_written=report.stats.passages_written,
            passages_embedded=report.stats.passages_embedded,
            max_revocation_lag_s=round(report.stats.max_revocation_lag_s, 3),
        )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for error in report.scan.errors:
            console.print(f"[yellow]read error:[/] {error}")
        if report.scan.deletes_skipped:
            console.print("[yellow]deletions skipped: the scan had read errors, nothing was removed[/]")
        click.echo(" ".join(f"{k}={v}" for k, v in summary.items() if k != "errors"))
    if report.scan.errors:
        sys.exit(3)


def _parse_as_of(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"not an ISO date or datetime: {value!r}", param_hint="--as-of") from exc


@main.command()
@click.argument("question")
@click.option("--token", envvar="RAGSYNC_TOKEN", required=True, help="Session token [env RAGSYNC_TOKEN].")
@click.option("--as-of", "as_of", default=None, help="Answer as of this date (ISO), e.g. 2026-01-15.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable answer.")
@click.option("--show-trace", is_flag=True, help="Add the run's trace (operators; passage IDs only).")
@click.pass_context
def ask(ctx: click.Context, question: str, token: str, as_of: str | None, as_json: bool, show_trace: bool) -> None:
    """Answer QUESTION from the documents the token's principal may read, with quoted sources."""
    settings = _settings(ctx)
    components = build(settings)
    try:
        worker = components.query_worker()
        try:
            result = worker.ask_with_token(token, question, _parse_as_of(as_of))
        except InvalidToken as exc:
            console.print(f"[red]invalid session token:[/] {exc}")
            sys.exit(2)
    finally:
        components.close()
    payload: dict[str, Any] = result.public()
    if show_trace:
        payload["trace"] = result.trace.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(payload, indent=2))
        return
    if result.answered:
        click.echo(result.answer)
        click.echo("")
        click.echo("Sources:")
        for i, claim in enumerate(result.claims, 1):
            click.echo(f'  [{i}] "{claim.quote}"')
            click.echo(f"      {claim.passage_id}  {claim.source_url}")
    else:
        click.echo(result.message)
    if show_trace:
        click.echo(json.dumps(payload["trace"], indent=2))


@main.group()
def token() -> None:
    """Session tokens (HMAC-SHA256 signed with the server secret)."""


@token.command("issue")
@click.option("--tenant", required=True)
@click.option("--user", required=True)
@click.option("--groups", default="", help="Comma-separated group names.")
@click.option("--ttl", default=3600, show_default=True, help="Seconds until the token expires.")
@click.pass_context
def token_issue(ctx: click.Context, tenant: str, user: str, groups: str, ttl: int) -> None:
    """Print a signed session token for a principal (operators and tests)."""
    settings = _settings(ctx.find_root())
    principal = Principal(tenant=tenant, user=user, groups=tuple(g.strip() for g in groups.split(",") if g.strip()))
    click.echo(issue_token(settings.secret(), principal, ttl_s=ttl))


@main.group()
def audit() -> None:
    """Audit evidence."""


@audit.command("deletions")
@click.option("--tenant", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def audit_deletions(ctx: click.Context, tenant: str | None, as_json: bool) -> None:
    """List deletion records: received, removed from each store, cache invalidated."""
    components = build(_settings(ctx.find_root()), with_embedder=False)
    try:
        records = components.audit.records(tenant)
    finally:
        components.close()
    rows = [
        {
            "event_id": r.event_id,
            "tenant": r.tenant,
            "doc_id": r.doc_id,
            "version": r.version,
            "received_at": r.received_at.isoformat(),
            "removed_at": {k: v.isoformat() for k, v in r.removed_at.items()},
            "cache_invalidated_at": r.cache_invalidated_at.isoformat(),
            "passages_removed": r.passages_removed,
        }
        for r in records
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("tenant", "doc", "v", "received", "stores", "cache invalidated", "passages")
    for r in records:
        stores = ", ".join(f"{k} +{(v - r.received_at).total_seconds() * 1000:.0f}ms" for k, v in r.removed_at.items())
        table.add_row(
            r.tenant,
            r.doc_id,
            str(r.version),
            r.received_at.isoformat(timespec="milliseconds"),
            stores,
            f"+{(r.cache_invalidated_at - r.received_at).total_seconds() * 1000:.0f}ms",
            str(r.passages_removed),
        )
    Console().print(table)


@main.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to build the sample drive and its index (default: a temporary folder).",
)
@click.pass_context
def demo(ctx: click.Context, directory: Path | None) -> None:
    """Build a sample drive with two tenants and walk through the whole job, narrating each step."""
    from ragsync.demo import run_demo

    sys.exit(run_demo(directory, _settings(ctx)))


@main.command("eval")
@click.argument("questions", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--k", "k", default=10, show_default=True, help="Cut-off of the recall gate (recall@1/5/10/20 always).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write JSON here.")
@click.option("--min-recall", type=float, default=None, help="Gate: fused recall@k over answerable questions.")
@click.option("--max-leaks", type=int, default=0, show_default=True, help="Gate: permission leaks allowed.")
@click.option("--min-answer-rate", type=float, default=None, help="Gate: share of expect=answer answered.")
@click.option("--min-abstain-rate", type=float, default=None, help="Gate: share of expect=abstain abstained.")
@click.pass_context
def eval_(
    ctx: click.Context,
    questions: Path,
    k: int,
    as_json: bool,
    out: Path | None,
    min_recall: float | None,
    max_leaks: int,
    min_answer_rate: float | None,
    min_abstain_rate: float | None,
) -> None:
    """Evaluate retrieval, answers and permissions on QUESTIONS.jsonl against the data already synced.

    Exit status 1 when a gate fails (any permission leak always fails), 2 for a bad question file.
    """
    from query.eval import EvalContext, Gates, QuestionFileError, load_questions, render, run_eval

    try:
        items = load_questions(questions)
    except QuestionFileError as exc:
        console.print(f"[red]bad question file:[/]\n{exc}")
        sys.exit(2)
    settings = _settings(ctx)
    components = build(settings)
    try:
        gates = Gates(k, min_recall, max_leaks, min_answer_rate, min_abstain_rate)
        meta = {"questions_file": str(questions), "profile": settings.profile, "home": str(settings.home)}
        report = run_eval(EvalContext.from_components(components), items, gates, meta=meta)
    finally:
        components.close()
    text = json.dumps(report, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        click.echo(text)
    else:
        out_console = Console()
        render(report, out_console if out_console.is_terminal else Console(width=160))
    if not report["passed"]:
        failed = ", ".join(g["gate"] for g in report["gates"] if not g["passed"])
        console.print(f"[red]eval failed:[/] {failed}")
        sys.exit(1)


@main.command()
@click.option("--poll-s", default=1.0, show_default=True, help="Embedded: seconds between polls of the log.")
@click.pass_context
def worker(ctx: click.Context, poll_s: float) -> None:
    """Apply events from the log to every store (cluster: a Faust worker; several share the partitions)."""
    settings = _settings(ctx)
    if settings.profile == "cluster":
        from streams.faust_app import run_worker

        run_worker(settings)
        return
    import time

    from streams.embedded_worker import EmbeddedWorker

    components = build(settings)
    try:
        w = EmbeddedWorker(components.events, components.sink(), revocation_bound_s=settings.revocation_bound_s)
        console.print(f"embedded worker on {settings.home}; Ctrl-C to stop")
        while True:
            w.drain()
            time.sleep(poll_s)
    except KeyboardInterrupt:
        pass
    finally:
        components.close()


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int) -> None:
    """Serve POST /v1/ask (Bearer session token), /healthz, /metrics and, with RAGSYNC_WEBHOOK_SECRET set,
    POST /v1/webhooks/{source} for document pushes (HMAC-SHA256 signed)."""
    import uvicorn

    from ragsync.server import server_app

    settings = _settings(ctx)
    components = build(settings)
    app = server_app(components)
    if settings.webhook_secret:
        console.print("webhook pushes accepted at POST /v1/webhooks/{source} (X-Ragsync-Signature)")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        components.close()


@main.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show the profile, where data lives, whether dense retrieval is on, and the event backlog."""
    from streams.ports import EVENT_TOPICS

    settings = _settings(ctx)
    components = build(settings)
    try:
        info = {
            "profile": settings.profile,
            "home": str(settings.home.resolve()),
            "lexical": components.lexical.name,
            "vector": components.vector.name if components.vector else None,
            "embedding_model": components.embedder.model_name if components.embedder else None,
            "backlog": {t: components.events.lag(t, "ragsync-indexer") for t in EVENT_TOPICS},
        }
    finally:
        components.close()
    click.echo(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
