#!/usr/bin/env python3
"""Is the index's decision the source's own, pair by pair? (issue 19 item 6), for every source kind.

Each kind builds a population in a real source, syncs it through the real connector, pipeline and
embedded stores, and compares every (document, user) pair: the lexical store's access-filtered query
with the user's token principal against the source's own decision; then --edits random edits made
with the source's own tools, a sync after each (smb: after each --per-sync of them), and every pair
compared again. A pair is *wider* when the index admits and the source refuses, *stricter* the other
way; a stricter pair is *reported* when the sync report's "permissions narrowed" names its document.

posix (run as root: it creates system users `rspx…` and removes them at the end; needs Debian's `acl`):
--docs documents in --folders nested folders with random modes, owners, groups and POSIX ACLs (named
users and groups, masks), restrictive folders; --users users with overlapping groups; edits with
chmod, chown, setfacl, gpasswd and mv; the source's decision is `access(R_OK)` run as that user
(tests/posix_world.py). --unmapped users (1) are mapped to no token principal, as
`[sources.principals] users = { name = "" }` does: stricter in the index, and reported.

dokuwiki: a private wiki (Debian's package under php -S, tests/dokuwiki_world.py), --docs pages in
nested namespaces, --rules namespace and page rules for users, groups, @user and @ALL; the wiki's
decision is `wiki.aclCheck` through the API at both ends and DokuWiki's own `auth_aclcheck` run by PHP
on the wiki's files after each edit (grants, revocations, membership changes, page moves), the two
checked equal at both ends.

smb (as root, on `compose/local/services up samba`; tests/smb_world.py): --docs files in nested folders
(inherited, explicit, denied and protected ACLs); the server's decision is an open for FILE_READ_DATA
as that user; edits are smbcacls grants, revocations and denies, gpasswd membership changes, moves.

    sudo python3 bench/source_permissions.py --kind posix      # 200 documents, 24 users, 100 edits (~3-5 min)
    python3 bench/source_permissions.py --kind dokuwiki        # 200 pages, 22 users, 100 edits
    sudo python3 bench/source_permissions.py --kind smb        # 200 files, 20 users, 100 edits
    sudo python3 bench/source_permissions.py --kind posix --docs 60 --edits 20     # a quick look

Writes (read-modify-write, the other kinds' entries kept) the kind's entry of
bench/results/source_permissions.json: {"pairs", "wider", "stricter", "stricter_reported", "edits"}
with the run's details beside them. Exits 1 when any pair is wider (posix: or stricter unreported).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ragsync.pipeline import sync_source  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import build  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "source_permissions.json"
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")
TENANT, SOURCE = "acme", "px"
# Per-kind defaults of the population (the sizes the published figures were measured with).
DEFAULTS: dict[str, dict[str, int]] = {
    "posix": {"users": 24, "groups": 10, "seed": 19},
    "dokuwiki": {"users": 22, "groups": 0, "seed": 1919},
    "smb": {"users": 20, "groups": 6, "seed": 1919},
}


def merge(path: Path, kind: str, entry: dict[str, Any]) -> None:
    """Read-modify-write: the other kinds' entries are kept as they are."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    data[kind] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def posix(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    from posix_world import Population, Tally, index_decisions, source_decisions, system_people

    from connectors.drive import DriveConnector
    from connectors.permissions import PrincipalMap

    if os.geteuid() != 0 or shutil.which("setfacl") is None:
        raise SystemExit("posix: run as root, with Debian's acl package (setfacl)")
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="rspx-bench-"))
    os.chmod(base, 0o755)  # every test user can search into it; its parents are /tmp
    tally = Tally()
    sync_s: list[float] = []
    components = build(Settings(home=base / "home", embed_model_path=None, embed_download=False))
    try:
        with system_people(args.users, args.groups, rng) as people:
            world = Population(base / "src", people, rng)
            world.build(args.docs, args.folders)
            mapping = PrincipalMap(users=dict.fromkeys(people.users[: args.unmapped], ""))

            def check() -> None:
                t = time.perf_counter()
                drive = DriveConnector(
                    world.root,
                    SOURCE,
                    tenants=[TENANT],
                    permissions="posix",
                    refuse=[base / "home"],
                    principals=mapping,
                )
                report = sync_source(components, drive)
                sync_s.append(time.perf_counter() - t)
                if report.scan.errors:
                    raise SystemExit(f"sync errors: {report.scan.errors[:5]}")
                docs = sorted(world.ever)
                tally.compare(
                    source_decisions(world.root, people.users, docs),
                    index_decisions(components, TENANT, SOURCE, people.users, docs),
                    report.scan.narrowed,
                    SOURCE,
                )

            check()
            for i in range(args.edits):
                world.edit()
                tally.edits += 1
                check()
                if (i + 1) % 20 == 0:
                    print(f"{i + 1} edits: {tally.summary()}", flush=True)
    finally:
        components.close()
        shutil.rmtree(base, ignore_errors=True)
    for pair in tally.wider_pairs[:20]:
        print("WIDER:", pair)
    for pair in tally.unreported[:20]:
        print("STRICTER, NOT REPORTED:", pair)
    details = {
        "documents": args.docs,
        "principals": args.users,
        "groups": args.groups,
        "unmapped_users": args.unmapped,
        "sync_s_median": round(sorted(sync_s)[len(sync_s) // 2], 3),
    }
    return {**tally.summary(), "details": details}, bool(tally.wider or tally.unreported)


def dokuwiki(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    from conftest import free_port
    from dokuwiki_world import Wiki, available, populate, random_edit
    from test_dokuwiki_source import COUNTS, _components, _connector, compare

    why = available()
    if why:
        raise SystemExit(why)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="ragsync-bench-dokuwiki-") as tmp:
        root = Path(tmp)
        wiki = Wiki(root / "services", free_port()).start()
        try:
            population = populate(wiki, rng, users=args.users, pages=args.docs, rules=args.rules)
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
    print(f"stricter pairs: {stricter[:10]}{' ...' if len(stricter) > 10 else ''}")
    details = {"pages": len(pages), "users": len(users), "rules": args.rules, "edit_kinds": kinds}
    return {**COUNTS, "details": details}, bool(COUNTS["wider"])


def smb(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    import smb_world as w

    from ragsync.sources import connector_for

    if not w.samba_up():
        raise SystemExit("smb: samba is not running (compose/local/services up samba)")
    os.environ["SMB_BENCH_READER_PASSWORD"] = w.svc.SMB_PASSWORD
    source = w.source_settings("SMB_BENCH_READER_PASSWORD")
    started = time.monotonic()
    world = w.build_world(args.users, args.groups, args.docs, args.seed, keep=frozenset({"vault"}))
    built_s = time.monotonic() - started

    def source_side(pool: ThreadPoolExecutor) -> dict[tuple[str, str], bool]:
        """The server's decisions, one session per user, a few users at a time."""
        found: dict[tuple[str, str], bool] = {}
        one = lambda user: w.source_decisions(w.World([user], world.groups, world.folders, list(world.files)))  # noqa: E731
        for part in pool.map(one, world.users):
            found.update(part)
        return found

    totals = {"pairs": 0, "wider": 0, "stricter": 0, "stricter_reported": 0, "source_allowed": 0}
    syncs: list[float] = []
    wider_examples: list[str] = []
    stricter_examples: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.workers) as pool:
        components = build(Settings(home=Path(tmp) / "home", embed_model_path=MODEL, session_secret="b" * 32))
        connector = connector_for(source, Path(tmp) / "home")
        try:
            rounds = 0
            while True:
                t = time.monotonic()
                report = sync_source(components, connector)
                syncs.append(time.monotonic() - t)
                if report.scan.errors:
                    print("sync errors:", report.scan.errors[:5], file=sys.stderr)
                result = w.compare(
                    source_side(pool), w.index_decisions(components, world, "share"), report.scan.narrowed
                )
                totals["pairs"] += result.pairs
                totals["wider"] += len(result.wider)
                totals["stricter"] += len(result.stricter)
                totals["stricter_reported"] += result.stricter_reported
                totals["source_allowed"] += result.source_allowed
                wider_examples += result.wider[:5]
                stricter_examples += result.stricter[:5]
                print(
                    f"round {rounds}: {result.pairs} pairs, {len(result.wider)} wider, {len(result.stricter)} stricter"
                    f" ({result.stricter_reported} reported), {world.edits} edits so far, sync {syncs[-1]:.1f}s",
                    flush=True,
                )
                if world.edits >= args.edits:
                    break
                for _ in range(min(args.per_sync, args.edits - world.edits)):
                    w.random_edit(world)
                rounds += 1
        finally:
            components.close()
    details = {
        "files": args.docs,
        "users": args.users,
        "groups": args.groups,
        "syncs": len(syncs),
        "pairs_per_comparison": args.docs * args.users,
        "source_allowed_pairs": totals["source_allowed"],
        "edits_per_sync": args.per_sync,
        "build_s": round(built_s, 1),
        "sync_s_max": round(max(syncs), 2),
        "wider_examples": wider_examples[:10],
        "stricter_examples": stricter_examples[:10],
    }
    entry = {key: totals[key] for key in ("pairs", "wider", "stricter", "stricter_reported")}
    return {**entry, "edits": world.edits, "details": details}, bool(totals["wider"])


KINDS: dict[str, Callable[[argparse.Namespace], tuple[dict[str, Any], bool]]] = {
    "posix": posix,
    "dokuwiki": dokuwiki,
    "smb": smb,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=sorted(KINDS), default="posix")
    parser.add_argument("--docs", type=int, default=200, help="Documents, pages or files.")
    parser.add_argument("--users", type=int, help="Users (default: posix 24, dokuwiki 22, smb 20).")
    parser.add_argument("--groups", type=int, help="Groups (posix 10, smb 6; dokuwiki's come from --users).")
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--seed", type=int, help="Population seed (posix 19, else 1919).")
    parser.add_argument("--folders", type=int, default=30, help="posix: nested folders.")
    parser.add_argument(
        "--unmapped", type=int, default=1, help="posix: users mapped to no token principal (stricter, reported)."
    )
    parser.add_argument("--rules", type=int, default=140, help="dokuwiki: namespace and page rules.")
    parser.add_argument("--per-sync", type=int, default=20, help="smb: edits between two syncs.")
    parser.add_argument("--workers", type=int, default=2, help="smb: users whose decisions are read at once.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-write", action="store_true", help="Print the entry only.")
    args = parser.parse_args()
    for key, value in DEFAULTS[args.kind].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    started = time.monotonic()
    load_before = os.getloadavg()
    entry, failed = KINDS[args.kind](args)
    entry["details"].update(
        seed=args.seed,
        seconds=round(time.monotonic() - started, 1),
        load_average={"start": [round(x, 2) for x in load_before], "end": [round(x, 2) for x in os.getloadavg()]},
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        command="python3 bench/source_permissions.py " + " ".join(sys.argv[1:]),
    )
    print(json.dumps(entry, indent=2))
    if not args.no_write:
        merge(args.out, args.kind, entry)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
