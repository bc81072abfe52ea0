#!/usr/bin/env python3
"""The SMB source proven equal to the share, the full run (issue 19 item 6): `smb` in source_permissions.json.

On the real Samba of `compose/local/services up samba` (as root: it makes Unix users and groups):
tests/smb_world.py builds --users users in --groups overlapping groups and --files files in nested
folders (inherited, explicit, denied and protected ACLs), syncs the `kind = "smb"` connector into a
fresh embedded home, and compares every (file, user) pair: the lexical store's permission filter
against the server's own decision (an open for FILE_READ_DATA as that user). Then --edits random
edits made on the share (smbcacls grants, revocations, denies; gpasswd membership changes; moves),
--per-sync of them (20) between two syncs, and every pair compared again after each sync.

    python3 bench/source_permissions_smb.py                      # 200 files, 20 users, 100 edits
    python3 bench/source_permissions_smb.py --files 40 --edits 10  # a quick look

Writes the `smb` entry of bench/results/source_permissions.json (other entries kept):
{"pairs", "wider", "stricter", "stricter_reported", "edits"}, with the run's details beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import smb_world as w  # noqa: E402

from ragsync.pipeline import sync_source  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.sources import SourceSettings, connector_for  # noqa: E402
from ragsync.wiring import build  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "source_permissions.json"
MODEL = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH") or ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx")


def _decide_for(world: w.World, user: str) -> dict[tuple[str, str], bool]:
    return w.source_decisions(w.World([user], world.groups, world.folders, list(world.files)))


def source_side(world: w.World, pool: ThreadPoolExecutor) -> dict[tuple[str, str], bool]:
    """The server's decisions, one session per user, a few users at a time."""
    found: dict[tuple[str, str], bool] = {}
    for part in pool.map(lambda user: _decide_for(world, user), world.users):
        found.update(part)
    return found


def merge(entry: dict[str, object]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data["smb"] = entry
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--per-sync", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1919)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if not w.samba_up():
        print("samba is not running: compose/local/services up samba", file=sys.stderr)
        return 2
    os.environ["SMB_BENCH_READER_PASSWORD"] = w.svc.SMB_PASSWORD
    source = SourceSettings.model_validate(
        {
            "name": "share",
            "kind": "smb",
            "server": "127.0.0.1",
            "port": w.svc.SMB_PORT,
            "share": w.svc.SMB_SHARE,
            "path": "/",
            "username": w.svc.SMB_USER,
            "password_env": "SMB_BENCH_READER_PASSWORD",
            "tenants": [w.TENANT],
            "share_open": True,
        }
    )
    started = time.monotonic()
    world = w.build_world(args.users, args.groups, args.files, args.seed, keep=frozenset({"vault"}))
    built_s = time.monotonic() - started
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
                    source_side(world, pool), w.index_decisions(components, world, "share"), report.scan.narrowed
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
    entry: dict[str, object] = {
        "pairs": totals["pairs"],
        "wider": totals["wider"],
        "stricter": totals["stricter"],
        "stricter_reported": totals["stricter_reported"],
        "edits": world.edits,
        "details": {
            "files": args.files,
            "users": args.users,
            "groups": args.groups,
            "syncs": len(syncs),
            "pairs_per_comparison": args.files * args.users,
            "source_allowed_pairs": totals["source_allowed"],
            "edits_per_sync": args.per_sync,
            "seed": args.seed,
            "build_s": round(built_s, 1),
            "sync_s_max": round(max(syncs), 2),
            "total_s": round(time.monotonic() - started, 1),
            "wider_examples": wider_examples[:10],
            "stricter_examples": stricter_examples[:10],
            "command": "python3 bench/source_permissions_smb.py " + " ".join(sys.argv[1:]),
        },
    }
    print(json.dumps(entry, indent=2))
    if not args.no_write:
        merge(entry)
    return 1 if totals["wider"] else 0


if __name__ == "__main__":
    sys.exit(main())
