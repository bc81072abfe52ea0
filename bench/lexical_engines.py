#!/usr/bin/env python3
"""The lexical candidate stage, FTS5 against Tantivy, on bench/retrieval_scale.py's synthetic passages.

A probe, not a store: it measures only what the ACL filter inside the index changes, the top-100
candidates of a query restricted to a principal's entries, in both engines, as this thread's CPU
time (the machine is shared; CPU time leaves out the time other processes held the cores).
FTS5: the store's own table and MATCH (words AND principal tokens, indexer.fts_acl), built with
SqliteLexicalIndex. Tantivy (tantivy-py, NOT a project dependency: `pip install tantivy`): fields
title/heading/text (en_stem) with the store's field weights as boosts, ACL entries as raw terms,
the filter a zero-scored term-set clause.

    pip install --target /tmp/tantivy-lib tantivy==0.27.0
    PYTHONPATH=.:/tmp/tantivy-lib python3 bench/lexical_engines.py --passages 100000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.retrieval_scale import FILTERS, Queries, batches
from indexer.fts_acl import filtered_match
from indexer.ports import DEFAULT_FIELD_WEIGHTS
from indexer.sqlite_fts import SqliteLexicalIndex, _match_expression
from schemas.text import query_terms

OUT = Path(__file__).resolve().parent / "results" / "lexical-engines.json"


def _ms(values: list[float], p: float) -> float:
    return round(float(np.percentile(values, p)), 2)


def main() -> None:
    import tantivy

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    load_start = os.getloadavg()
    rng = np.random.default_rng(7)
    q = Queries(args.passages, args.queries, rng)
    sb = tantivy.SchemaBuilder()
    for field in ("title", "heading", "text"):
        sb.add_text_field(field, stored=False, tokenizer_name="en_stem")
    sb.add_text_field("principals", stored=False, tokenizer_name="raw")
    sb.add_integer_field("rid", stored=True, fast=True, indexed=False)
    schema = sb.build()
    w = DEFAULT_FIELD_WEIGHTS
    result: dict[str, Any] = {"passages": args.passages, "rows": []}
    with tempfile.TemporaryDirectory(prefix="ragsync-engines-") as tmp:
        index = tantivy.Index(schema)
        writer = index.writer(heap_size=300_000_000, num_threads=1)
        lexical = SqliteLexicalIndex(Path(tmp) / "lexical.db")
        cpu = {"tantivy": 0.0, "fts5": 0.0}
        for start, passages, vectors in batches(args.passages, rng):
            q.see(start, passages, vectors)
            c0 = time.process_time()
            for j, p in enumerate(passages):
                writer.add_document(
                    tantivy.Document(
                        title=p.title,
                        heading=" ".join(p.heading_path),
                        text=p.text,
                        principals=list(p.acl),
                        rid=start + j + 1,
                    )
                )
            c1 = time.process_time()
            lexical.upsert(passages)
            cpu["tantivy"] += c1 - c0
            cpu["fts5"] += time.process_time() - c1
        c0 = time.process_time()
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        cpu["tantivy"] += time.process_time() - c0
        c0 = time.process_time()
        fts = str(lexical._conn.execute("SELECT name FROM fts_tables").fetchone()[0])
        lexical._conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
        cpu["fts5"] += time.process_time() - c0
        result["load_cpu_s"] = {k: round(v, 1) for k, v in cpu.items()}
        searcher = index.searcher()
        boosts = {"title": w.title, "heading": w.heading, "text": w.text}
        for label, group in FILTERS:
            entries = ["user:bench", f"group:{group}"]
            times: dict[str, list[float]] = {"tantivy": [], "fts5": []}
            returned = {"tantivy": 0, "fts5": 0}
            for text in q.texts:
                c0 = time.thread_time()
                words = index.parse_query(
                    " ".join(query_terms(text)), ["title", "heading", "text"], field_boosts=boosts
                )
                acl = tantivy.Query.const_score_query(tantivy.Query.term_set_query(schema, "principals", entries), 0.0)
                found = searcher.search(
                    tantivy.Query.boolean_query([(tantivy.Occur.Must, words), (tantivy.Occur.Must, acl)]), 100
                )
                times["tantivy"].append((time.thread_time() - c0) * 1000)
                returned["tantivy"] += len(found.hits)
                match = filtered_match(str(_match_expression(text)), entries)
                c0 = time.thread_time()
                rows = lexical._conn.execute(
                    f"SELECT rowid, -bm25({fts}, {w.title:g}, {w.heading:g}, {w.text:g}, 0) AS s FROM {fts}"
                    f" WHERE {fts} MATCH ? ORDER BY s DESC LIMIT 100",
                    (match,),
                ).fetchall()
                times["fts5"].append((time.thread_time() - c0) * 1000)
                returned["fts5"] += len(rows)
            for engine, values in times.items():
                row = {
                    "engine": engine,
                    "filter": label,
                    "cpu_p50_ms": _ms(values, 50),
                    "cpu_p95_ms": _ms(values, 95),
                    "mean_returned": round(returned[engine] / len(q.texts), 1),
                }
                result["rows"].append(row)
                print(json.dumps(row), file=sys.stderr)
        lexical.close()
    result["loadavg_start"] = [round(x, 2) for x in load_start]
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
