"""CI quality gate: the Git-manual evaluation (eval/git-doc, AsciiDoc pages) on its CI subset.

Builds the CI corpus (15 pages of Debian's git-doc, ~440 passages, two tenants with an ops-only folder
and a single-user page), verifies every gold quote, syncs with the real embedding model on the embedded
profile and runs `ragsync eval` with gates (tests/evalgate.py). Skipped only when the package cannot be
had; the test command installs it (`scripts/machine.sh`). The retrieval work raises these thresholds as
it improves the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evalgate import Limits, run_gate

# Measured on the CI subset (79 questions: 64 answerable, 15 expect abstain, 8 of them denied by design)
# on chunker structure-v2. One answerable question is worth ~0.016; each threshold leaves about one
# question of slack, abstentions and leaks none.
# Re-measured after the ranking work (issue 12: RRF k=60 over BM25 and dense, the fused top 50 reranked by
# the sentence reranker blended with the fused order; the extractive model's name gate and min_score 2.07,
# calibrated with a leave-one-set-out margin, which costs answers here: grounded 0.5625 -> 0.531), then
# after the reranker weighed the whole passage's vector (full-set paraphrases 0.714 -> 0.810; MRR here
# 0.718 -> 0.708).
LIMITS = Limits(
    fused_recall_at_10=0.94,  # measured 0.961
    bm25_recall_at_10=0.85,  # measured 0.875
    dense_recall_at_10=0.85,  # measured 0.867
    fused_mrr=0.69,  # measured 0.708
    # Answers re-measured with the answer rule chosen leave one set out (min_score 1.9 and the name rule:
    # bench/answer_rule.py): answered 0.672 -> 0.719, grounded 0.547 -> 0.609.
    # Then with query.answer_form's readings of the best sentence (bench/answer_rule.py; the default is the
    # choice on all five sets, form 0.3, subject 0.15; held out, chosen on the other four, form 0.5): answered
    # 0.719 (0.750 now), 0.781 held out; grounded 0.625 now, 0.594 held out. The limits sit below both.
    answer_rate=0.73,  # measured 0.750 (48/64); held out 0.781
    grounded_rate=0.59,  # measured 0.625 (40/64); held out 0.594 (38/64)
    abstain_rate=1.0,  # measured 15/15
)


@pytest.mark.slow
def test_git_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    run_gate("git-doc", tmp_path, LIMITS, min_passages=400, min_denied=8)
