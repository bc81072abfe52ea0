"""A live Retriever that ranks by a `Method` of bench/loo_rank.py, so the method a set's held-out
protocol chose is evaluated end to end by `ragsync eval`'s harness (answers, loop, permissions).

It reads the same permission-filtered candidate lists as `Retriever.rank` and replays them with the
same functions the grid was measured with (`loo_rank.lists`, weighted `fuse`, `SentenceReranker`,
`blend`); the sentence max-sim list, when the method uses one, comes from the store's sentence vectors
when the home holds them (`search_sentences`), else brute force over the sentence vectors of every
passage the asker may read; the per-sentence list is `Retriever.subquery_hits`. The deny set is not
consulted: evaluation homes have none.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from loo_collect import ALL, _Vectors
from loo_rank import Method, QuestionFeatures, lists

from query.rerank import SentenceReranker
from query.retrieval import Ranking, Retriever, _rerank_input
from query.rrf import blend, fuse
from schemas.passages import Passage
from schemas.principal import AccessFilter


class MethodRetriever(Retriever):
    def __init__(self, base: Retriever, method: Method) -> None:
        settings = replace(
            base.settings,
            dense_floor=-1.0,
            rrf_k=method.rrf_k,
            rerank_depth=method.rerank_depth,
            sentence_weight=method.sentence_weight,
            subquery_weight=method.subquery_weight,
        )
        assert base.embedder is not None
        reranker = SentenceReranker(
            base.embedder,
            sentence_coverage=method.sentence_coverage,
            passage_coverage=method.passage_coverage,
            passage_meaning=method.passage_meaning,
        )
        super().__init__(base.lexical, base.vector, base.embedder, None, settings, reranker)
        self.method = method
        self.vectors = _Vectors(base.embedder)
        self.readable: dict[tuple[str, ...], list[Passage]] = {}

    def _sentence_list(self, query: str, access: AccessFilter) -> list[tuple[str, float]]:
        assert self.embedder is not None and self.vector is not None
        if self.vector.sentence_vectors:
            return [(h.passage.passage_id, h.score) for h in self.sentence_hits(query, access)]
        key = (access.tenant, *access.entries, access.as_of.isoformat())
        qv = np.asarray(self.embedder.embed_query(query), dtype=np.float32)
        if key not in self.readable:
            ids = [h.passage_id for h in self.vector.search(qv, access, ALL, -1.0)]
            self.readable[key] = self.lexical.passages(access, ids)
        best = []
        for p in self.readable[key]:
            _, _, matrix = self.vectors.passage(p)
            best.append((p.passage_id, float(np.max(matrix[:-1] @ qv))))
        best.sort(key=lambda t: (-t[1], t[0]))
        return best[: self.settings.candidates]

    def rank(self, query: str, access: AccessFilter) -> Ranking:
        m = self.method
        lexical, dense = self.candidates(query, access)  # dense unfloored (settings), floored in `lists`
        sentence = self._sentence_list(query, access) if m.sentence_weight > 0 else []
        subquery = [(h.passage.passage_id, h.score) for h in self.subquery_hits(query, access)]
        feats = QuestionFeatures(
            "",
            "",
            "",
            0,
            [],
            [(h.passage.passage_id, h.score) for h in lexical],
            [(h.passage.passage_id, h.score) for h in dense],
            sentence,
            subquery=subquery,
        )
        by_id: dict[str, Passage] = {}
        for h in (*lexical, *dense):
            by_id.setdefault(h.passage.passage_id, h.passage)
        lex_ids, dense_ids, sent_ids = lists(feats, m)
        sub_ids = [pid for pid, s in subquery if s >= m.dense_floor]
        missing = [pid for pid in (*sent_ids, *sub_ids) if pid not in by_id]
        for p in self.lexical.passages(access, missing):
            by_id[p.passage_id] = p
        sent_ids = [pid for pid in sent_ids if pid in by_id]
        sub_ids = [pid for pid in sub_ids if pid in by_id]
        named = [
            (lex_ids, m.bm25_weight),
            (dense_ids, 1.0),
            (sent_ids, m.sentence_weight),
            (sub_ids, m.subquery_weight),
        ]
        used = [(ids, w) for ids, w in named if w > 0]
        fused = fuse([ids for ids, _ in used], k=m.rrf_k, weights=[w for _, w in used])
        lex_kept, dense_kept = set(lex_ids), set(dense_ids)
        ranking = Ranking(
            [h for h in lexical if h.passage.passage_id in lex_kept],
            [h for h in dense if h.passage.passage_id in dense_kept],
            fused,
            by_id,
            rrf=fused,
        )
        if self.reranker is not None and len(fused) > 1 and m.rerank_depth > 0:
            head = [pid for pid, _ in fused[: m.rerank_depth]]
            scores = self.reranker.score(query, [_rerank_input(by_id[pid]) for pid in head])
            ranking.rerank_scores = dict(zip(head, scores, strict=True))
            ranking.fused = blend(head, scores, m.fusion_weight) + fused[m.rerank_depth :]
            ranking.reranked = True
        return ranking
