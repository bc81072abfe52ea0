"""`ragsync eval`: retrieval, answer and permission quality on a question set."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ragsync.commands.common import EXIT_FAILED, EXIT_USAGE, error, fail, output_console, settings_of


@click.command("eval")
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
    from ragsync.evaluation import EvalContext, Gates, QuestionFileError, load_questions, render, run_eval

    try:
        items = load_questions(questions)
    except QuestionFileError as exc:
        fail(f"bad question file:\n{exc}", EXIT_USAGE)
    from ragsync.commands.owned import own_stores

    settings = settings_of(ctx)
    with own_stores(settings, "eval") as components:  # the stores, not an owner's API: one line if served
        gates = Gates(k, min_recall, max_leaks, min_answer_rate, min_abstain_rate)
        meta = {"questions_file": str(questions), "profile": settings.profile, "home": str(settings.home)}
        report = run_eval(EvalContext.from_components(components), items, gates, meta=meta)
    text = json.dumps(report, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        click.echo(text)
    else:
        render(report, output_console())
    if not report["passed"]:
        error("eval failed: " + ", ".join(g["gate"] for g in report["gates"] if not g["passed"]))
        ctx.exit(EXIT_FAILED)
