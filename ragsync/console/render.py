"""HTML for the console: plain strings, every value escaped on the way in (`esc`), one inline style
sheet, no script, nothing fetched from elsewhere. The propagation histogram is drawn here as SVG.

Pure functions: data in, markup out, so every page can be tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#fff;text-decoration:none}header strong{margin-right:1em}
header form{margin-left:auto}main{padding:1em 1.5em;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.2em;background:#fff}
th,td{border:1px solid #d0d4da;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#a40e26;font-weight:600}.ok{color:#116329}.muted{color:#666}
blockquote{border-left:4px solid #1f3a5f;margin:.4em 0;padding:.2em .8em;background:#fff}
pre{background:#fff;border:1px solid #d0d4da;padding:.6em;overflow:auto;max-height:30em}
input[type=text],input[type=password]{width:40em;max-width:100%}
svg.histogram{background:#fff;border:1px solid #d0d4da}
@media print{header,form,.noprint{display:none}body{background:#fff}main{padding:0}}
"""


def esc(value: object) -> str:
    """Text for HTML content or a quoted attribute: every value from a store or a request goes through here."""
    return escape("" if value is None else str(value), quote=True)


def page(title: str, body: str, *, nav: bool = True, csrf: str = "") -> str:
    """A whole document. `body` is already markup (built from escaped values)."""
    links = ""
    if nav:
        items = [("/console", "Overview"), ("/console/propagation", "Propagation"), ("/console/deletions", "Deletions")]
        items.append(("/console/ask", "Ask"))
        links = "".join(f'<a href="{href}">{esc(label)}</a>' for href, label in items)
        if csrf:
            links += (
                '<form method="post" action="/console/logout">'
                f'<input type="hidden" name="csrf" value="{esc(csrf)}"><button>Log out</button></form>'
            )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="referrer" content="same-origin">'
        f"<title>{esc(title)} · ragsync console</title><style>{STYLE}</style></head>"
        f"<body><header><strong>ragsync console</strong>{links}</header><main><h1>{esc(title)}</h1>{body}</main>"
        "</body></html>"
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, cls: str = "", numeric: Iterable[int] = ()
) -> str:
    """A table of escaped cells; a cell that is a `Markup` is inserted as is (already escaped)."""
    nums = set(numeric)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            content = cell.html if isinstance(cell, Markup) else esc(cell)
            cells.append(f'<td class="num">{content}</td>' if i in nums else f"<td>{content}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    empty = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>' if not body else ""
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}{empty}</tbody></table>"


class Markup:
    """Markup built from escaped parts, to put in a table cell unescaped."""

    __slots__ = ("html",)

    def __init__(self, html: str) -> None:
        self.html = html


def link(href: str, text: object) -> Markup:
    return Markup(f'<a href="{esc(href)}">{esc(text)}</a>')


def flag(ok: bool, good: str, bad: str) -> Markup:
    return Markup(f'<span class="ok">{esc(good)}</span>' if ok else f'<span class="bad">{esc(bad)}</span>')


def seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def histogram_svg(values: Sequence[float], buckets: Sequence[float], *, title: str, width: int = 720) -> str:
    """An SVG bar chart of `values` (seconds) over the upper bounds `buckets` (plus one bar past the last).

    One <rect class="bar"> per bucket, its count in a <title> for a tooltip, the bounds on the x axis.
    """
    edges = list(buckets)
    counts = [0] * (len(edges) + 1)
    for v in values:
        counts[next((i for i, edge in enumerate(edges) if v <= edge), len(edges))] += 1
    labels = [f"≤{_short(e)}" for e in edges] + [f">{_short(edges[-1])}" if edges else "all"]
    height, top, bottom, left = 220, 28, 40, 40
    plot_h = height - top - bottom
    slot = (width - left - 10) / len(counts)
    peak = max(counts) or 1
    parts = [
        f'<svg class="histogram" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
        f'<text x="{left}" y="18" font-size="13" font-weight="600">{esc(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#555"/>',
        f'<text x="{left - 6}" y="{top + 4}" font-size="10" text-anchor="end">{peak}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" font-size="10" text-anchor="end">0</text>',
    ]
    for i, (count, label) in enumerate(zip(counts, labels, strict=True)):
        h = 0.0 if not count else max(1.0, plot_h * count / peak)
        x = left + i * slot + 2
        y = top + plot_h - h
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(1.0, slot - 4):.1f}" height="{h:.1f}"'
            f' fill="#1f3a5f"><title>{esc(label)}: {count}</title></rect>'
        )
        if count:
            parts.append(
                f'<text x="{x + slot / 2 - 2:.1f}" y="{y - 3:.1f}" font-size="10" text-anchor="middle">{count}</text>'
            )
        parts.append(
            f'<text x="{x + slot / 2 - 2:.1f}" y="{top + plot_h + 14}" font-size="9" text-anchor="middle">'
            f"{esc(label)}</text>"
        )
    parts.append(f'<text x="{width / 2:.0f}" y="{height - 6}" font-size="10" text-anchor="middle">seconds</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(edge: float) -> str:
    if edge < 1:
        return f"{edge * 1000:g}ms"
    return f"{edge:g}s" if not math.isinf(edge) else "∞"


def as_json_block(data: Any) -> str:
    import json

    return f"<pre>{esc(json.dumps(data, indent=2, default=str))}</pre>"
