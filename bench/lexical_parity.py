#!/usr/bin/env python3
"""Why Tantivy ranks apart from FTS5, and which Tantivy scoring to keep, chosen leave one set out.

Per evaluation set (its CI home, built by eval/<set>/run.sh --ci with the default engine), every
answerable question's features are recorded once as bench/loo_collect.py records them (FTS5's BM25
list, dense's list, every readable passage's reranker features: all of them are kept here, so any
BM25 list can be replayed), then each scoring variant's BM25 list is computed on an in-memory Tantivy
index of the same passages (the same analyzer, the ACL applied as the readable set) and the whole
pipeline is replayed with it (bench/loo_rank.py, default Method): fused R@10, fused MRR, BM25 R@10
and BM25 MRR per set.

Variants (`Scoring`): the field boosts, a combined field (title + heading + text as one field, so one
length normalisation and one saturation per passage, as FTS5's bm25() over the row), and the IDF:
Tantivy's ln(1 + (N - n + 0.5)/(n + 0.5)) or FTS5's ln((N - n + 0.5)/(n + 0.5)) clamped to 1e-6,
which all but ignores a word found in half the passages or more ("git" in the Git manual).

Selection (among the `extra` variants only: the port's field weights must still apply, a weight of 0
counting for nothing): for each set, the variant with the best mean fused MRR on the other sets (ties: BM25
R@10, then the variant listed first), reported on the set left out beside FTS5.

    python3 bench/lexical_parity.py                      # -> bench/results/lexical-parity.json
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import tantivy  # noqa: E402
from eval_homes import SETS, embed_model_path, set_paths  # noqa: E402
from loo_collect import _now, _Vectors  # noqa: E402
from loo_rank import Candidate, Method, QuestionFeatures, rank, recall, reciprocal_rank  # noqa: E402

from indexer.tantivy_side import _analyzer  # noqa: E402
from ragsync.evaluation import load_questions  # noqa: E402
from ragsync.evaluation.metrics import matches_gold  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import build_embedded  # noqa: E402
from schemas.principal import AccessFilter  # noqa: E402
from schemas.text import query_terms  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DEPTH = 50


@dataclass(frozen=True)
class Scoring:
    title: float = 0.5
    heading: float = 1.5
    text: float = 1.0
    combined: float = 0.0
    idf: str = "tantivy"
    """"tantivy" (its own), "fts5" (FTS5's formula on the row's document frequency: the combined
    field's), "fts5-field" (FTS5's formula on each field's own document frequency)."""

    extra: float = 0.0
    """> 0: the combined field scores (boost `text`), and a field weighted above the body adds its own
    BM25 times extra x (weight - text weight): the field weights as FTS5 and Elasticsearch take them,
    scaled down ("extra" = lambda)."""

    def label(self) -> str:
        if self.extra > 0:
            return f"lambda{self.extra:g}-{self.idf}"
        return f"t{self.title:g}-h{self.heading:g}-x{self.text:g}-c{self.combined:g}-{self.idf}"


def collect(name: str, base: Path, home: Path) -> dict[str, Any]:
    """Per answerable question: FTS5's list, dense's, the readable passages' features (all kept)."""
    cache = base / "parity-features.pkl"
    if cache.is_file() and cache.stat().st_mtime > (home / "state.db").stat().st_mtime:
        with cache.open("rb") as f:
            data: dict[str, Any] = pickle.load(f)
        return data
    settings = Settings(home=home, embed_model_path=embed_model_path(), session_secret="parity-" + "x" * 24)
    components = build_embedded(settings)
    try:
        retriever = components.retriever()
        embedder = retriever.embedder
        assert embedder is not None and retriever.vector is not None
        vectors = _Vectors(embedder)
        readable: dict[tuple[str, ...], list[Any]] = {}
        out: list[tuple[QuestionFeatures, str, tuple[str, ...]]] = []
        for q in load_questions(base / "questions.jsonl"):
            if q.expect != "answer":
                continue
            access = AccessFilter.for_principal(q.principal, q.as_of or _now())
            lexical = retriever.lexical_hits(q.question, access, DEPTH)
            dense = retriever.dense_hits(q.question, access, DEPTH, floor=-1.0)
            key = (access.tenant, *access.entries, access.as_of.isoformat())
            if key not in readable:
                qv = embedder.embed_query(q.question)
                ids = [h.passage_id for h in retriever.vector.search(qv, access, 100_000, -1.0)]
                readable[key] = retriever.lexical.passages(access, ids)
            qvec = np.asarray(embedder.embed_query(q.question), dtype=np.float32)
            pool = {p.passage_id: p for p in readable[key]}
            for h in (*lexical, *dense):
                pool.setdefault(h.passage.passage_id, h.passage)
            feats: dict[str, Candidate] = {}
            for pid, p in pool.items():
                units, bag, matrix = vectors.passage(p)
                sims = [float(x) for x in matrix @ qvec]
                spans = tuple(i for i, span in enumerate(q.gold) if matches_gold(p.doc_id, p.text, span))
                feats[pid] = Candidate(pid, spans, sims[:-1], units, bag, sims[-1])
            from query.sentences import content_terms

            qf = QuestionFeatures(
                set=name,
                id=q.id,
                type=q.type,
                n_spans=len(q.gold),
                terms=sorted(content_terms(q.question)),
                lexical=[(h.passage.passage_id, float(h.score)) for h in lexical],
                dense=[(h.passage.passage_id, float(h.score)) for h in dense],
                sentence=[],
                candidates=feats,
            )
            out.append((qf, q.question, (access.tenant,)))
            print(f"\r{name}: {len(out)} questions", end="", file=sys.stderr)
        print(file=sys.stderr)
        data = {"set": name, "questions": out, "analyzer": settings.lexical_analyzer}
    finally:
        components.close()
    with cache.open("wb") as f:
        pickle.dump(data, f)
    return data


class TenantIndexes:
    """One in-memory Tantivy index per tenant of the home's passages (current and superseded rows:
    the store's statistics hold both), with a combined field beside the three."""

    def __init__(self, home: Path, analyzer: Any) -> None:
        sb = tantivy.SchemaBuilder()
        for f in ("title", "heading", "text", "combined"):
            sb.add_text_field(f, stored=False, tokenizer_name="ragsync")
        sb.add_text_field("pid", stored=True, tokenizer_name="raw")
        self.schema = sb.build()
        self.analyzer = _analyzer(analyzer)
        self.indexes: dict[str, Any] = {}
        conn = sqlite3.connect(home / "lexical.db")
        rows = conn.execute("SELECT tenant, passage_id, title, heading_path, text FROM passages").fetchall()
        conn.close()
        writers: dict[str, Any] = {}
        for tenant, pid, title, heading_path, text in rows:
            if tenant not in self.indexes:
                idx = tantivy.Index(self.schema)
                idx.register_tokenizer("ragsync", self.analyzer)
                self.indexes[tenant] = idx
                writers[tenant] = idx.writer(heap_size=50_000_000, num_threads=1)
            heading = " ".join(json.loads(heading_path))
            writers[tenant].add_document(
                tantivy.Document(title=title, heading=heading, text=text, combined=f"{title} {heading} {text}", pid=pid)
            )
        for tenant, w in writers.items():
            w.commit()
            w.wait_merging_threads()
            self.indexes[tenant].reload()

    def ranked(self, tenant: str, question: str, s: Scoring, allowed: set[str]) -> list[tuple[str, float]]:
        idx = self.indexes[tenant]
        searcher = idx.searcher()
        n_docs = searcher.num_docs
        weights = {"title": s.title, "heading": s.heading, "text": s.text, "combined": s.combined}
        if s.extra > 0:
            weights = {
                "title": s.extra * max(s.title - s.text, 0.0),
                "heading": s.extra * max(s.heading - s.text, 0.0),
                "text": 0.0,
                "combined": s.text,
            }
        clauses = []
        for word in query_terms(question):
            tokens = [t for t in self.analyzer.analyze(word)]
            for field, w in weights.items():
                if w <= 0:
                    continue
                if len(tokens) == 1:
                    q = tantivy.Query.term_query(self.schema, field, tokens[0], index_option="freq")
                    boost = w
                    if s.idf != "tantivy":
                        df_field = searcher.doc_freq(field, tokens[0])
                        df = searcher.doc_freq("combined", tokens[0]) if s.idf == "fts5" else df_field
                        if df_field == 0:
                            continue
                        boost = w * fts5_idf(n_docs, df) / tantivy_idf(n_docs, df_field)
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(q, boost)))
                elif tokens:
                    q = idx.parse_query('"' + " ".join(tokens) + '"', [field])
                    clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(q, w)))
        if not clauses:
            return []
        hits = searcher.search(tantivy.Query.boolean_query(clauses), 2000, count=False).hits
        out = []
        for score, addr in hits:
            pid = searcher.doc(addr)["pid"][0]
            if pid in allowed:
                out.append((pid, float(score)))
                if len(out) >= DEPTH:
                    break
        return out


def fts5_idf(n: int, df: int) -> float:
    idf = math.log((n - df + 0.5) / (df + 0.5))
    return idf if idf > 0 else 1e-6


def tantivy_idf(n: int, df: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def figures(qs: list[QuestionFeatures]) -> dict[str, float]:
    m = Method()
    fused = [rank(q, m) for q in qs]
    lex = [[pid for pid, _ in q.lexical] for q in qs]
    n = len(qs)
    return {
        "fused_recall@10": sum(recall(q, o) for q, o in zip(qs, fused, strict=True)) / n,
        "fused_mrr": sum(reciprocal_rank(q, o) for q, o in zip(qs, fused, strict=True)) / n,
        "bm25_recall@10": sum(recall(q, o) for q, o in zip(qs, lex, strict=True)) / n,
        "bm25_mrr": sum(reciprocal_rank(q, o) for q, o in zip(qs, lex, strict=True)) / n,
    }


GRID = [
    Scoring(),  # the three fields scored apart, Tantivy's IDF: the engine before this measurement
    Scoring(idf="fts5-field"),
    Scoring(title=0, heading=0, text=0, combined=1.0, idf="tantivy"),
    Scoring(title=0, heading=0, text=0, combined=1.0, idf="fts5"),
    Scoring(title=0.5, heading=0, text=0, combined=1.0, idf="fts5"),
    Scoring(title=0, heading=0.5, text=0, combined=1.0, idf="fts5"),
] + [Scoring(extra=lam, idf=i) for i in ("fts5", "tantivy") for lam in (0.05, 0.1, 0.2, 0.3, 0.5, 1.0)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--out", type=Path, default=RESULTS / "lexical-parity.json")
    args = ap.parse_args()
    started = time.time()
    per_set: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.sets:
        base, home = set_paths(name, "ci", None)
        data = collect(name, base, home)
        indexes = TenantIndexes(home, data["analyzer"])
        qs = [q for q, _, _ in data["questions"]]
        rows = {"fts5": figures(qs)}
        for s in GRID:
            replayed = []
            for q, question, (tenant,) in data["questions"]:
                listed = indexes.ranked(tenant, question, s, set(q.candidates))
                replayed.append(replace(q, lexical=listed))
            rows[s.label()] = figures(replayed)
        per_set[name] = rows
        print(name, json.dumps(rows["fts5"]), json.dumps(rows[Scoring().label()]), file=sys.stderr)
    labels = [s.label() for s in GRID if s.extra > 0]  # the choices: the field weights still apply

    def mean(label: str, sets: list[str], key: str) -> float:
        return sum(per_set[s][label][key] for s in sets) / len(sets)

    held: dict[str, Any] = {}
    for name in args.sets:
        train = [s for s in args.sets if s != name]
        best = max(labels, key=lambda lb: (mean(lb, train, "fused_mrr"), mean(lb, train, "bm25_recall@10")))
        held[name] = {"chosen": best, "held_out": per_set[name][best], "fts5": per_set[name]["fts5"]}
    overall = max(labels, key=lambda lb: (mean(lb, args.sets, "fused_mrr"), mean(lb, args.sets, "bm25_recall@10")))
    report = {
        "sets": args.sets,
        "grid": [asdict(s) for s in GRID],
        "per_set": per_set,
        "held_out": held,
        "chosen_on_all": overall,
        "seconds": round(time.time() - started, 1),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for name, h in held.items():
        print(name, h["chosen"], json.dumps(h["held_out"]), "fts5", json.dumps(h["fts5"]))
    print("on all:", overall)


if __name__ == "__main__":
    main()
