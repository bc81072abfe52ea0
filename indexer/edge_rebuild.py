"""Child process that optimizes (builds HNSW, vacuums) a copy of a qdrant-edge shard.

Run by `EdgeVectorIndex._rebuild`: `EdgeShard.optimize` holds the GIL while it works, so running it
in the owner's process would stop its queries and its worker (revocations included) for seconds.
Prints "optimized" when the copy changed and "unchanged" otherwise; the parent swaps only the former.
"""

from __future__ import annotations

import sys

import qdrant_edge as q

from indexer.edge_config import shard_config


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m indexer.edge_rebuild SHARD_DIR DIM [sentences|passages]", file=sys.stderr)
        return 2
    sentences = len(argv) == 3 and argv[2] == "sentences"
    shard = q.EdgeShard.load(argv[0], shard_config(int(argv[1]), sentences))
    changed = bool(shard.optimize())
    shard.flush()
    shard.close()
    print("optimized" if changed else "unchanged")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
