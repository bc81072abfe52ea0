"""CI quality gate: the flex-manual evaluation (eval/flex-doc, Texinfo pages) on its CI subset.

Builds the CI corpus (25 node pages of Debian's flex-doc, ~140 passages, two tenants with a
maintainers-only folder and a single-user chapter), verifies every gold quote, syncs with the real
embedding model on the embedded profile and runs `ragsync eval` with gates (tests/evalgate.py).
Skipped only when the package cannot be had; CI installs it (`.ci/run`). The retrieval work raises
these thresholds as it improves the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evalgate import Limits, run_gate

# Measured on the CI subset at the commit that added the set (83 questions: 68 answerable, 15 expect
# abstain, 9 of them denied by design), on chunker structure-v2. One answerable question is worth ~0.015;
# each threshold leaves about one question of slack, leaks none.
LIMITS = Limits(
    fused_recall_at_10=0.94,  # measured 0.956
    bm25_recall_at_10=0.95,  # measured 0.971
    dense_recall_at_10=0.83,  # measured 0.853
    fused_mrr=0.72,  # measured 0.746
    answer_rate=0.57,  # measured 0.588 (40/68)
    grounded_rate=0.42,  # measured 0.441 (30/68): the extractive model answers no paraphrase
    # 14/15 abstain: "Does adding more rules slow down a flex scanner?" (only the single-user performance
    # chapter answers it) is answered from a Start Conditions sentence that shares its words. Not a leak
    # (every cited passage is re-checked), a wrong answer; the answering-model work should bring it to 1.
    abstain_rate=0.93,
    denied_abstain_rate=0.88,  # measured 8/9
)


@pytest.mark.slow
def test_flex_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    run_gate("flex-doc", tmp_path, LIMITS, min_passages=120, min_denied=9)
