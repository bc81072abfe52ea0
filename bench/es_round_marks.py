#!/usr/bin/env python3
"""Timing marks in a throwaway copy of the code: where the Elasticsearch round of revocations and
deletions spends its time (bench/README "Thirteenth round").

    git archive main | tar -x -C /tmp/code && python3 bench/es_round_marks.py /tmp/code
    (cd /tmp/code && PYTHONPATH=$PWD ES_ROUND_MARKS=/tmp/run.rounds.jsonl python3 bench/propagation.py ...)

Patches `indexer/elastic.py` of the copy (never this checkout): each round of
`ElasticLexicalIndex._write_access` appends one JSON line to the file named by ES_ROUND_MARKS (the
worker inherits the variable), with the round's items, its ACL changes, the seconds from its start to
the end of the search and of the `_bulk`, and the `took` of its last `_bulk` (Elasticsearch's own time,
a forced refresh included). A copy that refreshes in a step of its own (`_refresh_aliases`) also gets
one line per refresh in the same file name with `.rounds.` replaced by `.refreshes.`. Summarise with
`--summary FILE...`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

_HELPER = """

def _es_marks(name: str, record: dict) -> None:  # added by bench/es_round_marks.py
    import json
    import os

    path = os.environ.get("ES_ROUND_MARKS")
    if path:
        with open(path.replace(".rounds.", f".{name}."), "a") as out:
            out.write(json.dumps(record) + "\\n")
"""


def _line(s: str, anchor: str) -> tuple[int, int, str]:
    """Start and end of the one line holding `anchor`, and its indentation."""
    if s.count(anchor) != 1:
        raise SystemExit(f"the code changed: no single line with {anchor!r}")
    at = s.index(anchor)
    start = s.rindex("\n", 0, at) + 1
    return start, s.index("\n", at) + 1, s[start:at][: len(s[start:at]) - len(s[start:at].lstrip())]


def _after_line(s: str, anchor: str, added: str) -> str:
    _, end, indent = _line(s, anchor)
    return s[:end] + "".join(f"{indent}{line}\n" for line in added.splitlines()) + s[end:]


def _before_line(s: str, anchor: str, added: str) -> str:
    start, _, indent = _line(s, anchor)
    return s[:start] + "".join(f"{indent}{line}\n" for line in added.splitlines()) + s[start:]


def patch(code: Path) -> None:
    path = code / "indexer" / "elastic.py"
    s = path.read_text()
    s = _before_line(
        s, "pending: dict[tuple[str, str], _AccessWrite] = {", "import time as _t\n_t0, _marks = _t.monotonic(), []"
    )
    s = _before_line(s, "for conflict in self._bulk(", "_marks.append(('searched', _t.monotonic() - _t0))")
    s = _before_line(s, "if not conflicted:", "_marks.append(('bulk', _t.monotonic() - _t0))")
    record = (
        "_es_marks('rounds', {'at': _t0, 'items': len(writes), 'acl': sum(isinstance(w, _AclWrite) for w in writes),"
        " 'ops': len(ops), 'marks': _marks, 'took': getattr(self, '_marks_took', None)})"
    )
    s = s.replace(
        "            if not conflicted:\n                return\n",
        "            if not conflicted:\n                " + record + "\n                return\n",
        1,
    )
    s = _after_line(
        s, "response = self._es.bulk(operations=chunk, refresh=refresh", "self._marks_took = response.body.get('took')"
    )
    if "def _refresh_aliases" in s:
        s = _before_line(s, "response = self._es.indices.refresh(index=", "import time as _t\n_t0 = _t.monotonic()")
        s = _after_line(
            s,
            "response = self._es.indices.refresh(index=",
            "_es_marks('refreshes', {'at': _t0, 'calls': len(aliases), 'dur': _t.monotonic() - _t0})",
        )
    path.write_text(s + _HELPER)
    print(f"patched {path}")


def _q(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def summary(path: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    marks = [dict(r["marks"]) for r in rows]
    search = [m["searched"] for m in marks]
    bulk = [m["bulk"] - m["searched"] for m in marks]
    took = [r["took"] / 1000 for r in rows if r["took"] is not None]
    total = [m["bulk"] for m in marks]
    out: dict[str, Any] = {
        "rounds": len(rows),
        "items_p50": _q([r["items"] for r in rows], 0.5),
        "search_p50_p90": [round(_q(search, 0.5), 3), round(_q(search, 0.9), 3)],
        "bulk_p50_p90": [round(_q(bulk, 0.5), 3), round(_q(bulk, 0.9), 3)],
        "bulk_took_p50": round(_q(took, 0.5), 3),
        "round_p50": round(_q(total, 0.5), 3),
        "writer_busy_s": round(sum(total), 1),
        "span_s": round(rows[-1]["at"] + total[-1] - rows[0]["at"], 1) if rows else 0,
    }
    refreshes = Path(str(path).replace(".rounds.", ".refreshes."))
    if refreshes != path and refreshes.exists():
        durs = [json.loads(line)["dur"] for line in refreshes.read_text().splitlines() if line]
        out["refresh_calls"] = len(durs)
        out["refresh_p50_p90_max"] = [round(_q(durs, 0.5), 3), round(_q(durs, 0.9), 3), round(max(durs), 2)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("code", nargs="*", type=Path, help="code copies to patch")
    parser.add_argument("--summary", nargs="+", type=Path, default=[], help="rounds files to summarise")
    args = parser.parse_args()
    for code in args.code:
        patch(code)
    for path in args.summary:
        print(path.name, json.dumps(summary(path)))


if __name__ == "__main__":
    main()
