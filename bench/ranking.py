#!/usr/bin/env python3
"""Ranking designs side by side on the three evaluation sets, in one run, through `ragsync eval`'s harness.

Each design is a Retriever over the same stores, embedder and answering model, so the only difference
is how the candidate lists are fused and reordered:

  legacy-rrf10-3lists  the design before issue 12's ranking slice: RRF k=10 over BM25, dense and a third
                       list (the RRF top 50 ordered by best-sentence similarity, `maxsim`)
  rrf60                the brief's RRF k=60 over BM25 and dense, no reranker
  rrf60-maxsim         RRF k=60, then the top 50 reranked by best-sentence similarity alone, blended
                       with the fused order (an ablation: what the rare-word coverage adds)
  rrf60-rerank         RRF k=60, then the top 50 reranked by the sentence reranker (meaning + rare
                       question words) blended with the fused order, without the passage's own vector
  rrf60-rerank-passage the same, plus 0.3 x the whole passage's cosine (its dense vector): the default
  rrf60-rerank-passage-0.5   the same at 0.5: how flat the default's weight is

Every design is evaluated in full (retrieval per ranker and per type, loop and single answers,
permissions), so a ranking gain that costs answers or a leak shows in the same table. `rank_ms` is
Retriever.rank alone (both rankers, fusion, reranking), measured on the questions in order, after the
evaluation warmed every vector cache; the machine is shared, so compare designs, not absolute times.

Needs each set's home, built by its run.sh (eval/<set>/run.sh [--ci]): the stores and questions in
eval/<set>/build/<variant>/.

    python3 bench/ranking.py                       # the three full sets (~5 min warm)
    python3 bench/ranking.py --variant ci --sets flex-doc
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval_homes import SETS, add_homes_option, embed_model_path, set_paths  # noqa: E402

from query.rerank import SentenceReranker  # noqa: E402
from query.retrieval import Ranking, RetrievalSettings, Retriever  # noqa: E402
from query.rrf import fuse  # noqa: E402
from ragsync.evaluation import EvalContext, Gates, load_questions, run_eval  # noqa: E402
from ragsync.settings import Settings  # noqa: E402
from ragsync.wiring import Components, build_embedded  # noqa: E402
from schemas.passages import Passage  # noqa: E402
from schemas.principal import AccessFilter  # noqa: E402

RESULTS = ROOT / "bench" / "results"
LOOP_KEYS = ("answer_rate", "grounded_answer_rate", "abstain_rate", "searches_per_question")
LEGACY_K = 10
LEGACY_DEPTH = 50


class LegacyRetriever(Retriever):
    """RRF k=10 over three lists: BM25, dense and the RRF top 50 ordered by best-sentence similarity."""

    def rank(self, query: str, access: AccessFilter) -> Ranking:
        lexical, dense = self.candidates(query, access)
        by_id: dict[str, Passage] = {}
        for h in (*lexical, *dense):
            by_id.setdefault(h.passage.passage_id, h.passage)
        lists = [[h.passage.passage_id for h in lexical], [h.passage.passage_id for h in dense]]
        fused = fuse(lists, k=LEGACY_K)
        ranking = Ranking(lexical, dense, fused, by_id, rrf=fused)
        if self.reranker is not None and fused:
            top = [pid for pid, _ in fused[:LEGACY_DEPTH]]
            inputs = [_input(by_id[pid]) for pid in top]
            scores = self.reranker.score(query, inputs)
            ranking.rerank_scores = dict(zip(top, scores, strict=True))
            sentence_list = [pid for pid, _ in sorted(zip(top, scores, strict=True), key=lambda t: -t[1])]
            ranking.fused = fuse([*lists, sentence_list], k=LEGACY_K)
            ranking.reranked = True
        return ranking


def _input(passage: Any) -> Any:
    from query.retrieval import _rerank_input

    return _rerank_input(passage)


def designs(components: Components) -> dict[str, Callable[[], Retriever]]:
    embedder = components.embedder
    assert embedder is not None, "the ranking benchmark needs the embedding model (RAGSYNC_EMBED_MODEL_PATH)"
    base = components.retriever().settings
    maxsim = SentenceReranker(embedder, sentence_coverage=0.0, passage_coverage=0.0, passage_meaning=0.0)

    def make(cls: type[Retriever], settings: RetrievalSettings, reranker: Any) -> Callable[[], Retriever]:
        return lambda: cls(components.lexical, components.vector, embedder, None, settings, reranker)

    return {
        "legacy-rrf10-3lists": make(LegacyRetriever, _replace(base, rrf_k=LEGACY_K), maxsim),
        "rrf60": make(Retriever, _replace(base, rrf_k=60, rerank_depth=0), None),
        "rrf60-maxsim": make(Retriever, _replace(base, rrf_k=60), maxsim),
        "rrf60-rerank": make(Retriever, _replace(base, rrf_k=60), SentenceReranker(embedder, passage_meaning=0.0)),
        "rrf60-rerank-passage": make(Retriever, _replace(base, rrf_k=60), SentenceReranker(embedder)),
        "rrf60-rerank-passage-0.5": make(
            Retriever, _replace(base, rrf_k=60), SentenceReranker(embedder, passage_meaning=0.5)
        ),
    }


def _replace(settings: RetrievalSettings, **changes: Any) -> RetrievalSettings:
    from dataclasses import replace

    return replace(settings, **changes)


def _pct(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(report: dict[str, Any], rank_ms: list[float]) -> dict[str, Any]:
    o = report["overall"]
    para = report["by_type"].get("paraphrase", {}).get("retrieval", {}).get("fused", {})
    perms = report["permissions"]
    return {
        "fused": {k: o["retrieval"]["fused"][k] for k in ("recall@1", "recall@5", "recall@10", "recall@20", "mrr")},
        "paraphrase_fused_recall@10": para.get("recall@10"),
        "bm25_recall@10": o["retrieval"]["bm25"]["recall@10"],
        "dense_recall@10": o["retrieval"]["dense"]["recall@10"],
        "loop": {k: o["loop"][k] for k in LOOP_KEYS},
        "single_grounded_answer_rate": o["single"]["grounded_answer_rate"],
        "denied_abstained": f"{perms['denied_questions_abstained']}/{perms['denied_questions']}",
        "leaks": perms["leak_count"],
        "miss_stages": report["miss_stages"],
        "rank_ms_p50": round(_pct(rank_ms, 50), 1),
        "rank_ms_p95": round(_pct(rank_ms, 95), 1),
    }


def run_set(name: str, variant: str, model_path: Path, homes: Path | None = None) -> dict[str, Any]:
    base, home = set_paths(name, variant, homes)
    questions = load_questions(base / "questions.jsonl")
    settings = Settings(home=home, embed_model_path=model_path, session_secret="bench-ranking-" + "x" * 20)
    components = build_embedded(settings)
    out: dict[str, Any] = {}
    try:
        default = EvalContext.from_components(components)
        for design, make in designs(components).items():
            started = time.perf_counter()
            retriever = make()
            report = run_eval(default_ctx(default, retriever), questions, Gates(k=10))
            timings = []
            for q in questions:
                access = AccessFilter.for_principal(q.principal, q.as_of or _now())
                t0 = time.perf_counter()
                retriever.rank(q.question, access)
                timings.append((time.perf_counter() - t0) * 1000)
            out[design] = summary(report, timings) | {"elapsed_s": round(time.perf_counter() - started, 1)}
            f = out[design]["fused"]
            print(
                f"{name:14s} {design:20s} R@10 {f['recall@10']:.3f} para {out[design]['paraphrase_fused_recall@10']}"
                f" MRR {f['mrr']:.3f} grounded {out[design]['loop']['grounded_answer_rate']}"
                f" abstain {out[design]['loop']['abstain_rate']} leaks {out[design]['leaks']}",
                file=sys.stderr,
            )
    finally:
        components.close()
    return out


def default_ctx(ctx: EvalContext, retriever: Retriever) -> EvalContext:
    from dataclasses import replace

    return replace(ctx, retriever=retriever, retrieval=retriever.settings, reranker=retriever.reranker)


def _now() -> Any:
    from query.worker import default_as_of

    return default_as_of()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--variant", choices=("full", "ci"), default="full")
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/ranking[-ci].json")
    add_homes_option(parser)
    args = parser.parse_args()
    model = embed_model_path()
    started = time.perf_counter()
    sets = {name: run_set(name, args.variant, model, args.homes) for name in args.sets}
    report = {
        "benchmark": "ranking designs side by side on the evaluation sets (ragsync eval's harness)",
        "variant": args.variant,
        "designs": {
            "legacy-rrf10-3lists": "RRF k=10 over BM25, dense and the RRF top 50 ordered by best-sentence similarity",
            "rrf60": "RRF k=60 over BM25 and dense, no reranker",
            "rrf60-maxsim": "RRF k=60, top 50 reranked by best-sentence similarity blended with the fused order",
            "rrf60-rerank": "RRF k=60, top 50 reranked by the sentence reranker blended with the fused order (default)",
        },
        "notes": [
            "same stores, embedder and extractive model for every design; result cache off",
            "recall@k over answerable questions; loop = the bounded search loop, single = one search",
            "rank_ms = Retriever.rank per question after the evaluation warmed the vector caches",
        ],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "elapsed_s": round(time.perf_counter() - started, 1),
        "sets": sets,
    }
    out = args.out or RESULTS / f"ranking{'-ci' if args.variant == 'ci' else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
