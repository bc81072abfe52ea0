#!/usr/bin/env python3
"""Train the query adapter on weak heading -> body pairs (issue 23 item 3; pairs from bench/weak_pairs.py).

    python3 bench/weak_train.py embed --pairs /var/tmp/weak/pairs.jsonl --out /var/tmp/weak/vectors.npz
    python3 bench/weak_train.py train --vectors /var/tmp/weak/vectors.npz --out ragsync/data/query_adapter.npz

`embed`: each pair's query through the embedder's `embed_query` (what a question goes through) and its
body through `embed` (what a passage goes through), with the offline MiniLM model.

`train`: a 384 x 384 matrix W, started at the identity, so that normalise(W q) is nearer its own body
than the other bodies of a batch: an InfoNCE loss over in-batch negatives (batches drawn within one
package, so the negatives are passages of the same manual on neighbouring topics), plus `l2` x
||W - I||^2, full-batch Adam in numpy. Passage vectors are not touched: only a question's vector moves,
so the stores need no re-index. 10 % of the pairs (whole packages' pages, by a hash of the page) are
kept out and their recall@1 among the held-out bodies is reported before and after, the only figure
`--l2` / `--epochs` may be chosen on (no evaluation set is read here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ragsync.query_adapter import save_adapter


def _embedder() -> Any:
    from indexer.embedder import FastEmbedder

    return FastEmbedder(Path(os.environ["RAGSYNC_EMBED_MODEL_PATH"]))


def positive_text(row: dict[str, str], context: bool) -> str:
    """The body alone, or as schemas.passages.embedding_text lays a passage out (headings, newline,
    text) with the page title and the headings above the one the query names."""
    return f"{row['context']}\n{row['body']}" if context and row.get("context") else row["body"]


def embed(pairs: Path, out: Path, context: bool = False) -> None:
    rows = [json.loads(line) for line in pairs.read_text().splitlines() if line.strip()]
    e = _embedder()
    start = time.time()
    queries = np.stack([np.asarray(e.embed_query(r["query"]), dtype=np.float32) for r in rows])
    bodies: list[np.ndarray] = []
    for i in range(0, len(rows), 32):
        bodies.append(np.asarray(e.embed([positive_text(r, context) for r in rows[i : i + 32]]), dtype=np.float32))
        print(f"\r{i + 32}/{len(rows)} bodies, {time.time() - start:.0f} s", end="", file=sys.stderr)
    print(file=sys.stderr)
    np.savez(
        out,
        queries=queries,
        bodies=np.concatenate(bodies),
        package=np.array([r["package"] for r in rows]),
        page=np.array([r["page"] for r in rows]),
    )


def _norm(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def split(pages: np.ndarray, share: float = 0.1) -> np.ndarray:
    """True for a pair kept out of training (by a hash of its page, so a page is on one side only)."""
    return np.array([int(hashlib.sha256(str(p).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share for p in pages])


def recall_at(w: np.ndarray, q: np.ndarray, b: np.ndarray, k: int = 1) -> tuple[float, float]:
    """(recall@k, MRR) of each query's own body among all the given bodies."""
    s = _norm(q @ w.T) @ _norm(b).T
    own = np.diag(s)
    rank = (s > own[:, None]).sum(axis=1)
    return float((rank < k).mean()), float((1.0 / (rank + 1)).mean())


def loss_grad(w: np.ndarray, q: np.ndarray, b: np.ndarray, temperature: float, l2: float) -> tuple[float, np.ndarray]:
    """InfoNCE over in-batch negatives (row i's positive is body i) and its gradient in W."""
    z = q @ w.T
    n = np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    u = z / n
    bn = _norm(b)
    logits = u @ bn.T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    m = len(q)
    loss = float(-np.log(np.maximum(np.diag(p), 1e-12)).mean())
    g_logits = p.copy()
    g_logits[np.arange(m), np.arange(m)] -= 1.0
    g_logits /= m * temperature
    g_u = g_logits @ bn
    g_z = (g_u - u * (g_u * u).sum(axis=1, keepdims=True)) / n
    g_w = g_z.T @ q
    eye = np.eye(w.shape[0], dtype=w.dtype)
    return loss + l2 * float(((w - eye) ** 2).sum()), g_w + 2.0 * l2 * (w - eye)


def train(
    q: np.ndarray,
    b: np.ndarray,
    package: np.ndarray,
    *,
    epochs: int,
    l2: float,
    temperature: float = 0.05,
    batch: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = q.shape[1]
    w = np.eye(d, dtype=np.float64)
    m1 = np.zeros_like(w)
    m2 = np.zeros_like(w)
    t = 0
    groups = [np.flatnonzero(package == p) for p in sorted(set(package.tolist()))]
    for epoch in range(epochs):
        batches: list[np.ndarray] = []
        for g in groups:
            g = rng.permutation(g)
            batches += [g[i : i + batch] for i in range(0, len(g), batch) if len(g[i : i + batch]) > 8]
        total = 0.0
        for idx in rng.permutation(len(batches)):
            rows = batches[idx]
            loss, grad = loss_grad(w, q[rows], b[rows], temperature, l2)
            total += loss
            t += 1
            m1 = 0.9 * m1 + 0.1 * grad
            m2 = 0.999 * m2 + 0.001 * grad**2
            w -= lr * (m1 / (1 - 0.9**t)) / (np.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
        print(f"epoch {epoch + 1}: loss {total / max(1, len(batches)):.4f}", file=sys.stderr)
    return w.astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("embed")
    e.add_argument("--pairs", type=Path, required=True)
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("--context", action="store_true", help="the positive with the page title and upper headings")
    t = sub.add_parser("train")
    t.add_argument("--vectors", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--epochs", type=int, default=8)
    t.add_argument("--l2", type=float, default=0.01)
    t.add_argument("--report", type=Path, help="JSON of the kept-out pairs' recall before and after")
    args = ap.parse_args(argv)
    if args.cmd == "embed":
        embed(args.pairs, args.out, args.context)
        return 0
    data = np.load(args.vectors)
    q, b, package, page = data["queries"], data["bodies"], data["package"], data["page"]
    out = split(page)
    w = train(q[~out], b[~out], package[~out], epochs=args.epochs, l2=args.l2)
    eye = np.eye(q.shape[1], dtype=np.float32)
    before, after = recall_at(eye, q[out], b[out]), recall_at(w, q[out], b[out])
    report = {
        "pairs": len(q),
        "trained_on": int((~out).sum()),
        "kept_out": int(out.sum()),
        "epochs": args.epochs,
        "l2": args.l2,
        "kept_out_recall@1_mrr_identity": before,
        "kept_out_recall@1_mrr_adapter": after,
        "distance_from_identity": float(np.linalg.norm(w - eye)),
    }
    print(json.dumps(report), file=sys.stderr)
    if args.report:
        args.report.write_text(json.dumps(report, indent=1) + "\n")
    save_adapter(args.out, w, source=str(args.vectors.name), note=json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
