#!/usr/bin/env python3
"""Is a batched question's vector its vector alone, bit for bit? Every question of the evaluation sets
(their built CI subsets and committed question files), as written and with a ticket qualifier as
bench/api_load.py sends them, embedded alone and then in shuffled batches of 2, 5, 8, 16 and 32
(indexer.query_batch batches concurrent requests' questions; settings.embed_query_batch).

    eval/<set>/run.sh --ci                      # the CI subsets' questions (optional: committed files count too)
    python3 bench/query_batch_bits.py           # prints {"questions", "rows_compared", "rows_differing", ...}
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZES = (2, 5, 8, 16, 32)


def questions() -> list[str]:
    found: list[str] = []
    files = sorted(ROOT.glob("eval/*/build/ci/questions.jsonl")) + sorted(ROOT.glob("eval/*/questions*.jsonl"))
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                question = json.loads(line).get("question")
                if question:
                    found += [question, f"{question} (ticket 1003-{len(found)})"]
    return list(dict.fromkeys(found))


def main() -> None:
    from indexer.embedder import FastEmbedder

    model = Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH", ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx"))
    embedder = FastEmbedder(model)
    texts = questions()
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    rng = random.Random(1)
    compared = differing = 0
    largest = 0.0
    for size in SIZES:
        order = list(range(len(texts)))
        rng.shuffle(order)
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            for i, row in zip(batch, embedder.embed([texts[i] for i in batch]), strict=True):
                compared += 1
                if not np.array_equal(row, alone[i]):
                    differing += 1
                    largest = max(largest, float(np.abs(row - alone[i]).max()))
    result = {"model": str(model), "questions": len(texts), "batch_sizes": list(SIZES), "rows_compared": compared}
    print(json.dumps(result | {"rows_differing": differing, "max_abs_difference": largest}))


if __name__ == "__main__":
    main()
