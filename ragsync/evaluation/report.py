"""The evaluation report: the JSON document `ragsync eval --out` writes, and its tables for a terminal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragsync.evaluation.context import EvalContext
from ragsync.evaluation.metrics import KS, Gates, QuestionResult, check_gates, summarize

if TYPE_CHECKING:
    from rich.console import Console


def build_report(
    results: Sequence[QuestionResult],
    ctx: EvalContext,
    gates: Gates,
    elapsed_s: float,
    ks: Sequence[int] = KS,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report: settings, overall and per-type figures, leaks, misses by stage, gates."""
    summary = summarize(results, ks, ctx.dense_enabled)
    leaks = [{"question": r.id, **leak} for r in results for leak in r.leaks]
    misses = [
        {"id": r.id, "type": r.type, "stage": r.stage.value if r.stage else None, "detail": r.detail}
        for r in results
        if r.stage is not None
    ]
    unexpected = [
        {"id": r.id, "type": r.type, "cited": r.loop.cited_ids}
        for r in results
        if r.expect == "abstain" and r.loop.answered
    ]
    gate_rows = check_gates(summary, len(leaks), gates)
    s = ctx.retriever.settings if ctx.retriever is not None else ctx.retrieval
    reranker = ctx.retriever.reranker if ctx.retriever is not None else ctx.reranker
    return {
        "meta": {
            **(meta or {}),
            "questions": len(results),
            "answerable": sum(1 for r in results if r.answerable),
            "expect_abstain": sum(1 for r in results if r.expect == "abstain"),
            "denied_by_design": sum(1 for r in results if r.gold_denied),
            "k": gates.k,
            "dense_enabled": ctx.dense_enabled,
            "lexical": ctx.lexical.name,  # the store and, embedded, its engine (sqlite-fts5 / sqlite-tantivy)
            "model": ctx.model.name,
            "settings": {
                "top_k": s.k,
                "candidates": s.candidates,
                "bm25_floor": s.bm25_floor,
                "dense_floor": s.dense_floor,
                "rrf_k": s.rrf_k,
                "reranker": reranker.name if reranker is not None else None,
                "rerank_depth": s.rerank_depth if reranker is not None else None,
                "rerank_fusion_weight": s.fusion_weight if reranker is not None else None,
                "max_searches": ctx.worker.max_searches,
            },
            "elapsed_s": round(elapsed_s, 2),
            "notes": [
                "recall@k = share of a question's gold spans in the ranker's top k (averaged over answerable "
                "questions); bm25/dense are the floored candidate lists Retriever.search fuses; fused = RRF over them, "
                "then the top rerank_depth reordered by the reranker's score blended with the fused order",
                "loop = the worker with the configured max_searches; single = the same worker with max_searches=1; "
                "result cache off for both",
            ],
        },
        **summary,
        "permissions": {
            "leaks": leaks,
            "leak_count": len(leaks),
            "denied_questions": sum(1 for r in results if r.gold_denied),
            "denied_questions_abstained": sum(1 for r in results if r.gold_denied and not r.loop.answered),
        },
        "design_mismatches": [{"id": r.id, "problem": r.design_mismatch} for r in results if r.design_mismatch],
        "miss_stages": dict(Counter(m["stage"] for m in misses)),
        "misses": misses,
        "unexpected_answers": unexpected,
        "gates": gate_rows,
        "passed": all(g["passed"] for g in gate_rows),
        "results": [
            {
                "id": r.id,
                "type": r.type,
                "expect": r.expect,
                "gold_denied": r.gold_denied,
                "ranks": r.ranks,
                "loop": vars(r.loop),
                "single": vars(r.single),
                "stage": r.stage.value if r.stage else None,
                "leaks": r.leaks,
            }
            for r in results
        ],
    }


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def render(report: Mapping[str, Any], console: Console) -> None:
    """Readable tables: rankers overall and per type, loop vs single, misses by stage, gates."""
    from rich.table import Table
    from rich.text import Text

    meta = report["meta"]
    console.print(
        f"{meta['questions']} questions ({meta['answerable']} answerable, {meta['expect_abstain']} expect "
        f"abstain, {meta['denied_by_design']} denied by design); dense={'on' if meta['dense_enabled'] else 'off'}, "
        f"model={meta['model']}, {meta['elapsed_s']}s"
    )
    blocks = [("overall", report["overall"]), *report["by_type"].items()]
    ks = sorted(int(key.split("@")[1]) for key in report["overall"]["retrieval"]["fused"] if key.startswith("recall@"))
    table = Table(title="Retrieval (answerable questions)")
    for col in ("set", "n", "ranker", *(f"R@{k}" for k in ks), "MRR"):
        table.add_column(col, justify="left" if col in ("set", "ranker") else "right")
    for name, block in blocks:
        for i, (ranker, m) in enumerate(block["retrieval"].items()):
            if not m["n"]:
                continue
            table.add_row(
                name if i == 0 else "",
                str(m["n"]) if i == 0 else "",
                ranker,
                *(_fmt(m[f"recall@{k}"]) for k in ks),
                _fmt(m["mrr"]),
            )
        table.add_section()
    console.print(table)

    runs = Table(title="Answers: bounded loop vs single search")
    for col in ("set", "run", "answered", "grounded", "abstained", "searches/q", "p50 ms", "p95 ms"):
        runs.add_column(col, justify="left" if col in ("set", "run") else "right")
    for name, block in blocks:
        for i, which in enumerate(("loop", "single")):
            m = block[which]
            runs.add_row(
                name if i == 0 else "",
                which,
                f"{_fmt(m['answer_rate'])} ({m['n_answer']})",
                _fmt(m["grounded_answer_rate"]),
                f"{_fmt(m['abstain_rate'])} ({m['n_abstain']})",
                _fmt(m["searches_per_question"]),
                _fmt(m["latency_ms_p50"]),
                _fmt(m["latency_ms_p95"]),
            )
        runs.add_section()
    console.print(runs)

    if report["misses"]:
        misses = Table(title="Misses: first stage where the gold disappeared")
        for col in ("id", "type", "stage", "detail"):
            misses.add_column(col)
        for m in report["misses"]:
            misses.add_row(m["id"], m["type"], m["stage"], m["detail"])
        console.print(misses)
        console.print("by stage: " + ", ".join(f"{k}={v}" for k, v in sorted(report["miss_stages"].items())))
    perms = report["permissions"]
    console.print(
        f"permissions: {perms['leak_count']} leaks; {perms['denied_questions_abstained']}/{perms['denied_questions']} "
        "denied-by-design questions abstained"
    )
    for leak in perms["leaks"][:20]:
        console.print(Text.assemble("  ", ("LEAK", "red"), f" {leak}"))
    for mismatch in report["design_mismatches"]:
        console.print(Text.assemble("  ", ("question design:", "yellow"), f" {mismatch['id']}: {mismatch['problem']}"))
    gates = Table(title="Gates")
    for col in ("gate", "value", "limit", "result"):
        gates.add_column(col)
    for g in report["gates"]:
        verdict = Text("pass", "green") if g["passed"] else Text("FAIL", "red")
        gates.add_row(g["gate"], _fmt(g["value"]), g["limit"], verdict)
    console.print(gates)
