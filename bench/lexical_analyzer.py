"""The lexical analyzer on the evaluation sets: BM25 and fused recall@10 with each `lexical_analyzer`.

Retrieval only (the Retriever's own stages, as `ragsync eval` ranks them: floored BM25 and dense lists,
RRF, the reranker over the fused top), without the answer runs, so a set is measured in a minute on a
loaded machine. Reads the homes `eval/run_set.sh <set> [--ci]` builds; switching the analyzer of an
embedded home rebuilds its FTS tables from its passages (indexer.sqlite_fts), nothing is re-embedded.

`--profile cluster` measures Elasticsearch's BM25 over the same passages: they are copied from the
embedded home into fresh indexes of a unique prefix (dropped afterwards), and the dense side is the
home's own vectors, so the two profiles differ only in the lexical store.

    python3 bench/lexical_analyzer.py --variant ci --sets git-doc --out bench/results/lexical-analyzer.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from query.retrieval import Retriever  # noqa: E402
from query.worker import default_as_of  # noqa: E402
from ragsync.evaluation import EvalContext, load_questions  # noqa: E402
from ragsync.evaluation.metrics import recall_at, span_ranks  # noqa: E402
from ragsync.evaluation.runner import Evaluator  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from schemas._time import to_utc  # noqa: E402
from schemas.principal import AccessFilter, acl_allows  # noqa: E402
from schemas.text import LexicalAnalyzer  # noqa: E402

SETS = ("python-manual", "git-doc", "flex-doc", "sqlite-doc", "debian-handbook")


def _copy_to_elastic(source: Any, es_url: str, prefix: str, analyzer: LexicalAnalyzer) -> Any:
    from indexer.elastic import ElasticLexicalIndex

    target = ElasticLexicalIndex(es_url, prefix=prefix, refresh="false", analyzer=analyzer)
    cursor = 0
    while batch := source.passages_after(cursor, 500):
        target.upsert([p for _, p in batch])
        cursor = batch[-1][0]
    for index in target.passage_indexes():
        target.client.indices.refresh(index=index)
    return target


def measure(home: Path, questions: Path, analyzer: LexicalAnalyzer, profile: str, es_url: str) -> dict[str, Any]:
    from ragsync.wiring import build

    settings = Settings(home=home, profile="embedded", lexical_analyzer=analyzer)
    components = build(settings)
    lexical = components.lexical
    copied = None
    try:
        if profile == "cluster":
            copied = _copy_to_elastic(lexical, es_url, f"ragsync-analyzer-{os.getpid()}-{analyzer}", analyzer)
            lexical = copied
        ctx = EvalContext.from_components(components)
        ctx = EvalContext(
            lexical=lexical,
            vector=ctx.vector,
            embedder=ctx.embedder,
            docs=ctx.docs,
            model=ctx.model,
            retrieval=ctx.retrieval,
            worker=ctx.worker,
            reranker=ctx.reranker,
            retriever=Retriever(lexical, ctx.vector, ctx.embedder, None, ctx.retrieval, ctx.reranker),
        )
        evaluator = Evaluator(ctx)
        bm25: list[float] = []
        fused: list[float] = []
        by_type: dict[str, dict[str, list[float]]] = {}
        for q in load_questions(questions):
            if q.expect != "answer" or not q.gold:
                continue
            states = [evaluator._resolve(span, q.principal) for span in q.gold]
            if not any(st is None or acl_allows(q.principal, st.tenant, st.acl) for st in states):
                continue  # gold denied to the asker by design: not answerable (as `ragsync eval` counts)
            as_of = to_utc(q.as_of) if q.as_of is not None else default_as_of()
            access = AccessFilter.for_principal(q.principal, as_of)
            ranking = evaluator.retriever.rank(q.question, access)
            b = recall_at(span_ranks([h.passage for h in ranking.lexical], q.gold), 10)
            f = recall_at(span_ranks([ranking.passages[pid] for pid, _ in ranking.fused], q.gold), 10)
            bm25.append(b)
            fused.append(f)
            t = by_type.setdefault(q.type, {"bm25": [], "fused": []})
            t["bm25"].append(b)
            t["fused"].append(f)
        return {
            "answerable": len(bm25),
            "bm25_r10": round(sum(bm25) / len(bm25), 3),
            "fused_r10": round(sum(fused) / len(fused), 3),
            "by_type": {
                k: {
                    "n": len(v["bm25"]),
                    "bm25_r10": round(sum(v["bm25"]) / len(v["bm25"]), 3),
                    "fused_r10": round(sum(v["fused"]) / len(v["fused"]), 3),
                }
                for k, v in sorted(by_type.items())
            },
        }
    finally:
        if copied is not None:
            copied.drop_all()
            copied.close()
        components.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--variant", choices=("ci", "full"), default="ci")
    parser.add_argument("--analyzers", nargs="+", default=["english", "standard"], choices=("english", "standard"))
    parser.add_argument("--profile", choices=("embedded", "cluster"), default="embedded")
    parser.add_argument("--es-url", default="http://127.0.0.1:9200")
    parser.add_argument("--out", type=Path, default=None, help="merge the figures into this JSON file")
    args = parser.parse_args()
    load_start = os.getloadavg()
    started = time.time()
    rows: list[dict[str, Any]] = []
    for name in args.sets:
        build = REPO / "eval" / name / "build" / args.variant
        for analyzer in args.analyzers:
            if args.profile == "cluster" and analyzer == "english":
                from indexer.elastic_mapping import ANALYZER_MODULE

                rows.append(
                    {
                        "set": name,
                        "variant": args.variant,
                        "profile": "cluster",
                        "analyzer": analyzer,
                        "skipped": f"the launcher's Elasticsearch lacks {ANALYZER_MODULE}",
                    }
                )
                continue
            t0 = time.time()
            figures = measure(build / "home", build / "questions.jsonl", analyzer, args.profile, args.es_url)
            row = {
                "set": name,
                "variant": args.variant,
                "profile": args.profile,
                "analyzer": analyzer,
                **figures,
                "seconds": round(time.time() - t0, 1),
            }
            print(json.dumps({k: v for k, v in row.items() if k != "by_type"}), flush=True)
            rows.append(row)
    report = {
        "command": " ".join(["python3", "bench/lexical_analyzer.py", *sys.argv[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    if args.out is not None:
        previous = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
        previous["runs"].append(report)
        args.out.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
