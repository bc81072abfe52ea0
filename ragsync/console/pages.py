"""The console's pages, from the data the routes collect (plain dicts, the same the CLI prints).

Pure: markup out of data. Traces are shown as they come from the query worker (passage IDs, ranks,
reason codes), which never holds text; answers and quotes are shown only on the ask page, to the
operator who pasted an asker's token, i.e. what that asker would see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from indexer.propagation import CONVERGED, EFFECTIVE
from ragsync.console.render import Markup, as_json_block, esc, flag, histogram_svg, link, page, seconds, table
from ragsync.propagation_metrics import BUCKETS


def login(error: str = "") -> str:
    message = f'<p class="bad">{esc(error)}</p>' if error else ""
    body = (
        f"{message}<p>Paste the operator key of this home (<code>&lt;home&gt;/operator.key</code>, its"
        " <code>key</code> field; <code>ragsync operator rotate</code> makes a new one). An asker's token"
        " is not accepted here.</p>"
        '<form method="post" action="/console/login"><label>Operator key '
        '<input type="password" name="key" autocomplete="off" required></label> <button>Log in</button></form>'
    )
    return page("Log in", body, nav=False)


def overview(status: dict[str, Any], dead: Sequence[dict[str, Any]], readiness: dict[str, Any], csrf: str) -> str:
    sources = status.get("sources") or []
    rows = []
    for s in sources:
        problems = []
        if s.get("errors"):
            problems.append(f"{s['errors']} read errors")
        if s.get("deletes_skipped"):
            problems.append("deletions skipped (incomplete pass)")
        rows.append(
            [
                s.get("source"),
                s.get("name"),
                s.get("last_sync"),
                "full" if s.get("full_pass") else "incremental",
                s.get("last_full_pass") or "never",
                s.get("upserts"),
                s.get("acl_changes"),
                s.get("deletes"),
                s.get("unchanged"),
                flag(not problems, "none", "; ".join(problems)),
            ]
        )
    body = ["<h2>Sources: last passes</h2>"]
    body.append(
        table(
            [
                "source",
                "name",
                "last pass",
                "kind",
                "last full pass",
                "upserts",
                "ACL changes",
                "deletes",
                "unchanged",
                "problems",
            ],
            rows,
            cls="sources",
            numeric=(5, 6, 7, 8),
        )
    )
    dead_by_topic: dict[str, int] = {}
    for d in dead:
        topic = str(d.get("origin", "?")).split(" ", 1)[0]
        dead_by_topic[topic] = dead_by_topic.get(topic, 0) + 1
    backlog = status.get("backlog") or {}
    topics = sorted({*backlog, *dead_by_topic})
    body.append("<h2>Backlog and dead letters per topic</h2>")
    body.append(
        table(
            ["topic", "backlog (not applied yet)", "dead letters"],
            [[t, backlog.get(t, 0), dead_by_topic.get(t, 0)] for t in topics],
            cls="backlog",
            numeric=(1, 2),
        )
    )
    total = status.get("dead_letters")
    if total is not None:
        body.append(
            f"<p>Dead letters pending replay: <strong>{esc(total)}</strong> (<code>ragsync dlq list</code>)</p>"
        )
    if dead:
        body.append(
            table(
                ["id", "origin", "key", "reason", "replayable"],
                [[d.get("id"), d.get("origin"), d.get("key"), d.get("reason"), d.get("replayable")] for d in dead],
                cls="dead-letters",
            )
        )
    tenants = status.get("tenants") or {}
    body.append("<h2>Tenants</h2>")
    body.append(
        table(
            ["tenant", "documents", "passages", "vectors"],
            [[t, r.get("documents"), r.get("passages"), r.get("vectors", "")] for t, r in tenants.items()],
            numeric=(1, 2, 3),
        )
    )
    dense = status.get("dense") or {}
    owner = status.get("owner") or {}
    body.append("<h2>Service</h2>")
    facts: list[list[object]] = [
        ["profile", status.get("profile")],
        ["owner", f"{owner.get('command')} pid {owner.get('pid')} since {owner.get('since')}" if owner else "none"],
        [
            "dense retrieval",
            f"{'on' if dense.get('enabled') else 'off'} ({dense.get('model') or 'no model'})"
            + ("" if dense.get("complete") is None else f", complete: {dense.get('complete')}"),
        ],
        ["stores", ", ".join(f"{k}: {v}" for k, v in (readiness.get("stores") or {}).items()) or "-"],
        ["indexer error", readiness.get("indexer_error") or "none"],
    ]
    body.append(table(["", ""], facts))
    return page("Overview", "".join(body), csrf=csrf)


def propagation(records: Sequence[Any], summary: Any, csrf: str) -> str:
    """Percentiles per copy and end to end, a histogram of each, and the events over the bound."""
    body = [
        f"<p>{esc(summary.events)} revocations and deletions recorded; bound {esc(summary.bound_s)} s;"
        f" over the bound: <strong>{esc(len(summary.over_bound))}</strong>; not converged yet:"
        f" {esc(summary.unconverged)}.</p>"
    ]
    rows = [
        [copy, int(s["count"]), seconds(s["p50"]), seconds(s["p95"]), seconds(s["p99"]), seconds(s["max"])]
        for copy, s in summary.by_copy.items()
    ]
    body.append(table(["copy", "events", "p50", "p95", "p99", "max"], rows, cls="percentiles", numeric=(1, 2, 3, 4, 5)))
    for copy, what in ((EFFECTIVE, "effective for every query (deny set)"), (CONVERGED, "converged (every store)")):
        values = [d[copy] for d in (r.delays() for r in records) if copy in d]
        body.append(f"<h2>From publish to {esc(what)}</h2>")
        body.append(histogram_svg([max(0.0, v) for v in values], BUCKETS, title=f"{copy}: {len(values)} events"))
    body.append("<h2>Over the bound</h2>")
    body.append(
        table(
            ["kind", "tenant", "document", "version", "published", "converged", "slowest copy"],
            [
                [
                    e["kind"],
                    e["tenant"],
                    e["doc_id"],
                    e["version"],
                    e["published_at"],
                    "not yet" if e["converged_s"] is None else f"{e['converged_s']} s",
                    e["slowest_copy"],
                ]
                for e in summary.over_bound
            ],
        )
    )
    return page("Propagation", "".join(body), csrf=csrf)


def certificate_href(tenant: str, doc_id: str) -> str:
    return "/console/certificate?" + urlencode({"tenant": tenant, "doc": doc_id})


def deletions(records: Sequence[Any], csrf: str) -> str:
    rows = []
    for r in records:
        stores = ", ".join(f"{k} +{(v - r.received_at).total_seconds() * 1000:.0f}ms" for k, v in r.removed_at.items())
        rows.append(
            [
                r.seq,
                r.tenant,
                r.doc_id,
                r.version,
                r.received_at.isoformat(timespec="milliseconds"),
                stores,
                r.passages_removed,
                "erasure" if r.erase else "",
                link(certificate_href(r.tenant, r.doc_id), "certificate"),
            ]
        )
    body = table(
        ["seq", "tenant", "document", "version", "received", "removed from stores", "passages", "", ""],
        rows,
        cls="deletions",
        numeric=(0, 3, 6),
    )
    return page("Deletions", body, csrf=csrf)


def certificate(cert: dict[str, Any], csrf: str) -> str:
    """A printable deletion certificate: what `ragsync audit deletion DOC` prints, checked now."""
    d = cert["deletion"]
    trail = cert["audit_trail"]
    body = [
        '<div class="certificate">',
        f"<h2>Deletion certificate: {esc(cert['tenant'])}/{esc(cert['doc_id'])}</h2>",
        table(
            ["", ""],
            [
                ["document", f"{cert['tenant']}/{cert['doc_id']}"],
                ["deleted at version", d["version"]],
                ["versions removed", ", ".join(str(v) for v in d["versions_removed"]) or "-"],
                ["passages removed", d["passages_removed"]],
                ["received", d["received_at"]],
                ["audit record", f"seq {d['audit_seq']}, event {d['event_id']}" + (" (erasure)" if d["erase"] else "")],
                ["audit trail", f"{'intact' if trail['intact'] else 'NOT INTACT'} ({trail['records']} records)"],
            ],
        ),
        table(
            ["copy", "removed (logical)", "removed (physical)", "remnants now", "checked"],
            [
                [
                    c["copy"],
                    c["removed_logically_at"] or "",
                    c["removed_physically_at"] or "pending",
                    "not checked" if c["remnants"] is None else c["remnants"],
                    c["checked"],
                ]
                for c in cert["copies"]
            ],
            cls="copies",
        ),
        f"<p>Remnants found now: <strong>{esc(cert['remnants'])}</strong>; physical purge pending:"
        f" {esc(', '.join(cert['physical_pending']) or 'none')}.</p>",
        "<p>Verdict: ",
        flag(cert["complete"], "COMPLETE: no copy holds the document", "NOT COMPLETE yet").html,
        "</p></div>",
        '<p class="noprint"><a href="/console/deletions">all deletions</a>'
        " · use the browser's print to keep a copy</p>",
    ]
    return page("Deletion certificate", "".join(body), csrf=csrf)


def ask_form(csrf: str, question: str = "", as_of: str = "", result: str = "") -> str:
    body = (
        '<form method="post" action="/console/ask">'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
        '<p><label>Asker\'s token<br><input type="password" name="token" autocomplete="off" required></label></p>'
        f'<p><label>Question<br><input type="text" name="question" value="{esc(question)}" required></label></p>'
        f'<p><label>As of (optional, YYYY-MM-DD or ISO)<br><input type="text" name="as_of" value="{esc(as_of)}">'
        "</label></p><p><button>Ask</button></p></form>" + result
    )
    return page("Ask", body, csrf=csrf)


def answer(result: dict[str, Any], trace: dict[str, Any] | None) -> str:
    """What the asker would see (answer, quotes, sources), then the trace, for the operator only."""
    parts = ['<section class="answer">']
    if result.get("answered"):
        parts.append(f"<h2>Answer</h2><p>{esc(result.get('answer'))}</p><h3>Quotes</h3>")
        for c in result.get("claims") or []:
            where = f" ({c['location']})" if c.get("location") else ""
            src = c.get("source_url") or c.get("passage_id")
            parts.append(
                f'<blockquote class="quote">{esc(c.get("quote"))}</blockquote>'
                f'<p class="muted">{esc(c.get("statement"))} — source: <span class="source">{esc(src)}</span>'
                f"{esc(where)}</p>"
            )
    else:
        parts.append(f"<h2>No answer</h2><p>{esc(result.get('message'))}</p>")
    parts.append("</section>")
    if trace is not None:
        parts.append("<details open><summary>Trace (IDs only)</summary>" + as_json_block(trace) + "</details>")
    return "".join(parts)


def problem(title: str, message: str, csrf: str = "") -> str:
    return page(title, f'<p class="bad">{esc(message)}</p>', csrf=csrf)


__all__ = ["Markup", "esc"]
