"""CI quality gate: the flex-manual evaluation (eval/flex-doc, Texinfo pages) on its CI subset.

Builds the CI corpus (25 node pages of Debian's flex-doc, ~140 passages, two tenants with a
maintainers-only folder and a single-user chapter), verifies every gold quote, syncs with the real
embedding model on the embedded profile and runs `ragsync eval` with gates (tests/evalgate.py).
Skipped only when the package cannot be had; the test command installs it (`scripts/machine.sh`).
The retrieval work raises these thresholds as it improves the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evalgate import Limits, run_gate

# Measured on the CI subset at the commit that added the set (83 questions: 68 answerable, 15 expect
# abstain, 9 of them denied by design), on chunker structure-v2. One answerable question is worth ~0.015;
# each threshold leaves about one question of slack, leaks none.
LIMITS = Limits(
    # Re-measured after the ranking work (issue 12: RRF k=60 + the sentence reranker blended with the fused
    # order; the extractive model's name gate, consistent stemming and min_score 2.07), then after the
    # reranker weighed the whole passage's vector (Git paraphrases 0.714 -> 0.810 on the full sets; here one
    # question less grounded and MRR 0.798 -> 0.782). Then with lexical_analyzer = "standard" (no stemming,
    # as Elasticsearch; eval/README.md): BM25 R@10 0.971 -> 0.941 (two paraphrases), fused R@10 the same,
    # fused MRR 0.782 -> 0.803, answered 0.559 -> 0.574, grounded 0.515 -> 0.529; the other limits hold.
    fused_recall_at_10=0.97,  # measured 0.985
    bm25_recall_at_10=0.92,  # measured 0.941 (0.971 with Porter stemming)
    dense_recall_at_10=0.83,  # measured 0.853
    fused_mrr=0.77,  # measured 0.782
    # Answers re-measured with the answer rule chosen leave one set out (min_score 1.9 and the name rule:
    # bench/answer_rule.py): answered 0.574 -> 0.691, grounded 0.529 -> 0.618.
    # Then with query.answer_form's readings of the best sentence (bench/answer_rule.py; the default is the
    # choice on all five sets, form 0.3, subject 0.15; held out, chosen on the other four, form 0.5):
    # answered 0.750 (0.765 held out), grounded 0.662 (0.632 held out). The limits sit below both.
    answer_rate=0.73,  # measured 0.750 (51/68); held out 0.765
    grounded_rate=0.61,  # measured 0.662 (45/68); held out 0.632 (43/68)
    abstain_rate=1.0,  # measured 15/15
    denied_abstain_rate=1.0,  # measured 9/9
)


@pytest.mark.slow
def test_flex_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    run_gate("flex-doc", tmp_path, LIMITS, min_passages=120, min_denied=9)
