"""CI quality gate: the Git-manual evaluation (eval/git-doc, AsciiDoc pages) on its CI subset.

Builds the CI corpus (15 pages of Debian's git-doc, ~440 passages, two tenants with an ops-only folder
and a single-user page), verifies every gold quote, syncs with the real embedding model on the embedded
profile and runs `ragsync eval` with gates (tests/evalgate.py). Skipped only when the package cannot be
had; CI installs it (`.ci/run`). The retrieval work raises these thresholds as it improves the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evalgate import Limits, run_gate

# Measured on the CI subset (79 questions: 64 answerable, 15 expect abstain, 8 of them denied by design)
# on chunker structure-v2. One answerable question is worth ~0.016; each threshold leaves about one
# question of slack, abstentions and leaks none.
# Re-measured after the retrieval work (issue 12). Fused recall on this subset went 0.938 -> 0.906 while the
# full set went 0.864 -> 0.892 (paraphrases 0.571 -> 0.762): two exact questions (bm25 rank 7, dense rank 7/12)
# now sit at fused 11-12, outvoted by the best-sentence list; the trade was measured on both full sets.
LIMITS = Limits(
    fused_recall_at_10=0.89,  # measured 0.906
    bm25_recall_at_10=0.85,  # measured 0.875
    dense_recall_at_10=0.85,  # measured 0.867
    fused_mrr=0.70,  # measured 0.722
    answer_rate=0.65,  # measured 0.672 (43/64)
    grounded_rate=0.54,  # measured 0.5625 (36/64): the extractive model still answers no paraphrase
    abstain_rate=1.0,  # measured 15/15
)


@pytest.mark.slow
def test_git_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    run_gate("git-doc", tmp_path, LIMITS, min_passages=400, min_denied=8)
