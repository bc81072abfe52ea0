#!/usr/bin/env python3
"""What a purge after one deletion costs with the tenant's Tantivy index in shards, against one index.

The same passages (bench/retrieval_scale's synthetic batches) are loaded into one Tantivy store per
shard size; `--shard-docs 0` stands for the former layout (one index per tenant, so the purge rebuilds
all of it). Then, in each store, one passage is deleted and the purge timed, twice: a passage of the
first shard, then one of the last. The purges run under the bench lock (`--lock`), the load does not.

    PYTHONPATH=$PWD python3 bench/tantivy_purge.py --passages 100000 --shard-docs 0 50000 10000 \
        --lock /work/wt/bench.lock       # -> results/tantivy-purge.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import _commit, _locked, batches
from bench.retrieval_workload import TENANT
from indexer.tantivy_lexical import TantivyLexicalIndex

OUT = Path(__file__).resolve().parent / "results" / "tantivy-purge.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--shard-docs", type=int, nargs="+", default=[0, 50_000, 10_000])
    parser.add_argument("--lock", type=Path)
    parser.add_argument("--load-nice", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.load_nice:
        os.setpriority(os.PRIO_PROCESS, 0, args.load_nice)
    started = [round(x, 2) for x in os.getloadavg()]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragsync-purge-", dir=os.environ.get("RAGSYNC_BENCH_TMP")) as tmp:
        stores = {k: TantivyLexicalIndex(Path(tmp) / f"t{k}.db", shard_docs=k or 2**62) for k in args.shard_docs}
        load: dict[int, float] = dict.fromkeys(stores, 0.0)
        last_doc = ""
        for _, passages, _ in batches(args.passages, np.random.default_rng(7)):
            for k, store in stores.items():
                began = time.perf_counter()
                store.upsert(passages)
                load[k] += time.perf_counter() - began
            last_doc = passages[-1].doc_id
        with _locked(args.lock, args.load_nice) as timed:
            for k, store in stores.items():
                shards = len(store._shards(TENANT))
                for where, doc in (("first shard", "doc0.md"), ("last shard", last_doc)):
                    store.delete_doc(TENANT, doc)
                    began = time.perf_counter()
                    details = store.purge()
                    spent = time.perf_counter() - began
                    rows.append(
                        {
                            "passages": args.passages,
                            "shard_docs": k or None,
                            "shards": shards,
                            "deleted_in": where,
                            "purge_s": round(spent, 2),
                            "rebuilt": details["rebuilt"],
                            "load_s": round(load[k], 1),
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr)
                store.close()
    report = json.loads(args.out.read_text()) if args.out.exists() else {"rows": [], "runs": []}
    report["rows"] += rows
    report["runs"].append(
        {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": _commit(),
            "loadavg_start": started,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "timed": timed,
            "cpus": os.cpu_count(),
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
