#!/usr/bin/env python3
"""Is the index's decision the source's own, pair by pair? (issue 19 item 6), for POSIX folders.

Run as root (it creates system users `rspx…` and removes them at the end; needs Debian's `acl`):
a population of --docs documents in --folders nested folders with random modes, owners, groups
and POSIX ACLs (named users and groups, masks), restrictive folders; --users users with
overlapping groups. After a first sync, and after each of --edits random edits made with the
administrator's own tools (chmod, chown, setfacl, gpasswd, mv) and a sync, every (document, user)
pair is compared: the lexical store's access-filtered query with the user's token principal
against `access(R_OK)` run as that user (tests/posix_world.py). A pair is *wider* when the index
admits and the kernel refuses, *stricter* the other way; a stricter pair is *reported* when the
sync report's "permissions narrowed" names its document. --unmapped users (1) are mapped to no
token principal, as `[sources.principals] users = { name = "" }` does: what they may read is
stricter in the index, and must be reported.

    sudo python3 bench/source_permissions.py             # 200 documents, 24 users, 100 edits (~3-5 min)
    sudo python3 bench/source_permissions.py --docs 60 --edits 20     # a quick look

Writes (read-modify-write, other kinds' entries kept) the `posix` entry of
bench/results/source_permissions.json: {"pairs", "wider", "stricter", "stricter_reported", "edits"}.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from posix_world import Population, Tally, index_decisions, source_decisions, system_people  # noqa: E402

from connectors.drive import DriveConnector  # noqa: E402
from connectors.permissions import PrincipalMap  # noqa: E402
from ragsync.pipeline import sync_source  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import build  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "source_permissions.json"
TENANT, SOURCE = "acme", "px"


def merge(path: Path, kind: str, entry: dict[str, Any]) -> None:
    """Read-modify-write: the other kinds' entries (dokuwiki, smb) are kept as they are."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    data[kind] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--folders", type=int, default=30)
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument(
        "--unmapped", type=int, default=1, help="Users mapped to no token principal (their pairs: stricter, reported)."
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("setfacl") is None:
        raise SystemExit("run as root, with Debian's acl package (setfacl)")

    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="rspx-bench-"))
    os.chmod(base, 0o755)  # every test user can search into it; its parents are /tmp
    tally = Tally()
    started = time.perf_counter()
    sync_s: list[float] = []
    components = build(Settings(home=base / "home", embed_model_path=None, embed_download=False))
    try:
        with system_people(args.users, args.groups, rng) as people:
            world = Population(base / "src", people, rng)
            world.build(args.docs, args.folders)
            mapping = PrincipalMap(users=dict.fromkeys(people.users[: args.unmapped], ""))

            def check() -> None:
                t = time.perf_counter()
                home = base / "home"
                drive = DriveConnector(
                    world.root, SOURCE, tenants=[TENANT], permissions="posix", refuse=[home], principals=mapping
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
    summary = tally.summary()
    print(json.dumps(summary))
    for pair in tally.wider_pairs[:20]:
        print("WIDER:", pair)
    for pair in tally.unreported[:20]:
        print("STRICTER, NOT REPORTED:", pair)
    entry: dict[str, Any] = dict(summary)
    entry["run"] = {
        "documents": args.docs,
        "principals": args.users,
        "groups": args.groups,
        "unmapped_users": args.unmapped,
        "seconds": round(time.perf_counter() - started, 1),
        "sync_s_median": round(sorted(sync_s)[len(sync_s) // 2], 3),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": "python3 bench/source_permissions.py " + " ".join(sys.argv[1:]),
    }
    merge(args.out, "posix", entry)
    if tally.wider or tally.unreported:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
