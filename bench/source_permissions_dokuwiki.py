#!/usr/bin/env python3
"""The index against the wiki's own decisions, pair by pair, on a real DokuWiki (issue 19 item 6).

A private wiki (Debian's package under php -S, tests/dokuwiki_world.py) gets a generated population
through its API: --users users in overlapping groups (plus the admin), --pages pages in nested
namespaces, namespace and page rules for users, groups, @user and @ALL (inherited, overridden, level 0).
It is synced through the real connector, pipeline and embedded stores; then for every (page, user)
the store's permission query with that user's token entries is compared with the wiki's decision:
`wiki.aclCheck` through the API at the start and the end, DokuWiki's own `auth_aclcheck` run by PHP
on the wiki's files after each of --edits random edits made through the API (grants, revocations,
membership changes, page moves), itself checked equal to the API's answers at both ends.

    python3 bench/source_permissions_dokuwiki.py            # 200 pages, 22 users, 100 edits

Writes the `dokuwiki` entry of bench/results/source_permissions.json (other entries kept):
{"pairs", "wider", "stricter", "stricter_reported", "edits"}.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import free_port  # noqa: E402
from dokuwiki_world import Wiki, available, populate, random_edit  # noqa: E402
from test_dokuwiki_source import COUNTS, _components, _connector, compare  # noqa: E402

from ragsync.pipeline import sync_source  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "source_permissions.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--users", type=int, default=22)
    parser.add_argument("--rules", type=int, default=140)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1919)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    why = available()
    if why:
        raise SystemExit(why)
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-dokuwiki-") as tmp:
        root = Path(tmp)
        wiki = Wiki(root / "services", free_port()).start()
        try:
            population = populate(wiki, rng, users=args.users, pages=args.pages, rules=args.rules)
            components = _components(root)
            connector = _connector(wiki, root)
            try:
                report = sync_source(components, connector).scan
                assert not report.errors, report.errors
                users, pages = wiki.users(), wiki.pages()
                by_api = wiki.api_decisions(pages, sorted(users))
                assert wiki.php_decisions(pages, sorted(users)) == by_api
                stricter = compare(components, report, by_api, users)
                kinds: dict[str, int] = {}
                for serial in range(args.edits):
                    what = random_edit(wiki, rng, population, serial)
                    kinds[what.split()[0]] = kinds.get(what.split()[0], 0) + 1
                    report = sync_source(components, connector).scan
                    assert not report.errors, (what, report.errors)
                    users, pages = wiki.users(), wiki.pages()
                    stricter += compare(components, report, wiki.php_decisions(pages, sorted(users)), users)
                    COUNTS["edits"] += 1
                by_api = wiki.api_decisions(pages, sorted(users))
                assert wiki.php_decisions(pages, sorted(users)) == by_api
                stricter += compare(components, report, by_api, users)
            finally:
                components.close()
        finally:
            wiki.stop()
    entry = dict(COUNTS)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results["dokuwiki"] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"dokuwiki": entry, "pages": len(pages), "users": len(users), "edit_kinds": kinds}))
    print(f"stricter pairs: {stricter[:10]}{' ...' if len(stricter) > 10 else ''}")
    print(f"{time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
