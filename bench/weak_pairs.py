#!/usr/bin/env python3
"""Weak supervision from documentation no evaluation set uses (issue 23 item 3): heading -> body pairs.

Debian documentation packages (`bench/weak_manifest.json`: name and version, none of them an evaluation
set's package or derived from one) are downloaded with `apt-get download`, unpacked with `dpkg-deb -x`
under `--root`, and every HTML page chosen is cut by the project's own chunker (`indexer.chunker`,
the sync's `max_chars`). A passage under a heading gives one pair: the query is the heading path's
last heading, with the heading above it (or the page title) when the last one is short or generic
("Description", "Examples"); the positive is the passage body alone, without the headings, so the
pair is not matched by the heading's words; `context` keeps the page title and the headings above the
last one, for a positive embedded as the stores embed a passage but without the heading the query
names (`bench/weak_train.py embed --context`). Only the first passage under each heading is used.

    python3 bench/weak_pairs.py --root /var/tmp/weak --out /var/tmp/weak/pairs.jsonl      # download, unpack, cut

The corpus and the pairs are not committed; the manifest is (the package versions pin the pairs).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from indexer.chunker import chunk_document

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "weak_manifest.json"

GENERIC = frozenset(
    [
        "description",
        "synopsis",
        "example",
        "examples",
        "notes",
        "note",
        "see",
        "also",
        "options",
        "option",
        "usage",
        "overview",
        "introduction",
        "summary",
        "details",
        "return",
        "value",
        "values",
        "arguments",
        "parameters",
        "bugs",
        "author",
        "authors",
        "history",
        "compatibility",
        "caveats",
        "warning",
        "warnings",
        "errors",
        "files",
        "environment",
        "exit",
        "status",
        "todo",
        "reference",
        "contents",
        "discussion",
    ]
)
SKIP_PAGES = re.compile(r"(^|/)(genindex|search|py-modindex|index|modindex|releases/|bookindex|.*-index\.html)")
TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.S | re.I)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z][A-Za-z0-9_+.-]*", text)


def query_for(title: str, heading_path: tuple[str, ...]) -> str | None:
    """The heading an asker would type for this passage, or None when it names nothing."""
    path = [re.sub(r"^[\d.\s]+", "", h).strip() for h in heading_path if h.strip()]
    path = [h for h in path if h]
    if not path:
        return None
    leaf = path[-1]
    own = [w.lower() for w in _words(leaf)]
    if not own:
        return None
    generic = all(w in GENERIC for w in own)
    if generic or len(own) < 3:
        above = path[-2] if len(path) > 1 else title
        if not above or above == leaf:
            return None if generic else leaf
        return f"{above}: {leaf}"
    return leaf


def _title(content: str) -> str:
    m = TITLE.search(content)
    return html.unescape(re.sub(r"\s+", " ", m.group(1))).strip() if m else ""


def _pages(root: Path, package: dict[str, Any]) -> list[Path]:
    pages = sorted(p for p in (root / package["name"]).rglob("*.htm*") if p.is_file())
    keep = package.get("only", "")
    pages = [p for p in pages if keep in p.as_posix() and not SKIP_PAGES.search(p.relative_to(root).as_posix())]
    # A fixed sample, the same on every machine: pages ordered by a hash of their path.
    pages.sort(key=lambda p: hashlib.sha256(p.relative_to(root).as_posix().encode()).hexdigest())
    return pages


def pairs_of(root: Path, package: dict[str, Any], limit: int, max_chars: int, body_chars: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for page in _pages(root, package):
        if len(out) >= limit:
            break
        content = page.read_text(encoding="utf-8", errors="replace")
        title = _title(content)
        try:
            chunks = chunk_document(content, "html", max_chars=max_chars, title=title)
        except Exception:  # a page the chunker refuses is skipped, as sync would report it
            continue
        headings: set[tuple[str, ...]] = set()
        for c in chunks:
            if c.heading_path in headings:
                continue
            headings.add(c.heading_path)
            q = query_for(title, c.heading_path)
            body = c.text.strip()
            if q is None or len(body) < 200 or len(q) > 120 or q.lower() in seen:
                continue
            seen.add(q.lower())
            page_id = page.relative_to(root).as_posix()
            context = " > ".join(h for h in (title, *c.heading_path[:-1]) if h)
            row = {"package": package["name"], "page": page_id, "query": q, "body": body[:body_chars]}
            out.append({**row, "context": context})
            if len(out) >= limit:
                break
    return out


def fetch(root: Path, manifest: list[dict[str, Any]]) -> None:
    """`apt-get download` each pinned package and unpack it under root/<name> (skipped when there)."""
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for p in manifest:
        if (root / p["name"]).is_dir():
            continue
        subprocess.run(["apt-get", "download", "-q", f"{p['name']}={p['version']}"], cwd=debs, check=True)
        deb = next(debs.glob(f"{p['name']}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root / p["name"])], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-package", type=int, default=260)
    ap.add_argument("--max-chars", type=int, default=1000, help="the chunker's max_chars (Settings.chunk_max_chars)")
    ap.add_argument("--body-chars", type=int, default=600, help="body kept for the positive's vector")
    ap.add_argument("--no-fetch", action="store_true")
    args = ap.parse_args(argv)
    manifest: list[dict[str, Any]] = json.loads(MANIFEST.read_text())["packages"]
    if not args.no_fetch:
        fetch(args.root, manifest)
    rows: list[dict[str, str]] = []
    for p in manifest:
        got = pairs_of(args.root, p, args.per_package, args.max_chars, args.body_chars)
        print(f"{p['name']}: {len(got)} pairs", file=sys.stderr)
        rows += got
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} pairs -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
