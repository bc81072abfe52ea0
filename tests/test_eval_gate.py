"""CI quality gate: the Python-manual evaluation on its CI subset, through the same code path as run.sh.

Builds the CI corpus (14 manual pages, ~400 passages, two tenants with restricted folders), verifies every
gold quote against the HTML, syncs it with the real embedding model on the embedded profile and runs
`ragsync eval` with gates (tests/evalgate.py). The thresholds sit slightly below the figures measured
when they were set (eval/python-manual/README.md has the table), so a drop means a regression in chunking,
ranking, fusion, the answering model or the permission filter, not noise: every stage is deterministic
except latency, which is reported but not gated.

Skipped only when the manual (Debian package python3.11-doc) cannot be had; CI installs it with
`apt-get install -y --no-install-recommends python3.11-doc`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evalgate import Limits, run_gate

# Measured on the CI subset (48 questions: 33 answerable, 15 expect abstain, 7 of them denied by design).
# One question is worth ~0.03 of recall or answer rate; each threshold leaves about one question of slack.
# Re-measured after the ranking work (issue 12: RRF k=60 over BM25 and dense, the fused top 50 reranked by
# the sentence reranker blended with the fused order; the extractive model's name gate and min_score 2.07).
LIMITS = Limits(
    fused_recall_at_10=0.96,  # measured 1.000
    bm25_recall_at_10=0.90,  # measured 0.939
    dense_recall_at_10=0.93,  # measured 0.970
    fused_mrr=0.76,  # measured 0.790 (0.792 before the reranker weighed the whole passage's vector)
    # Answers re-measured with the answer rule chosen leave one set out (min_score 1.9 and the name rule:
    # bench/answer_rule.py, bench/results/answer-rule-ci.json): answered and grounded 0.636 -> 0.667.
    # Then with query.answer_form's readings of the best sentence (form 0.3, subject 0.15: bench/answer_rule.py,
    # chosen leave one set out; held out here the same readings, so the figures below are held-out figures):
    # answered and grounded 0.667 -> 0.727.
    answer_rate=0.69,  # measured 0.727 (24/33) held out and tuned: one paraphrase answered
    grounded_rate=0.69,  # measured 0.727 (24/33) held out and tuned
    # Every expect-abstain question must abstain (measured 15/15): the evidence heading no longer carries the
    # page <title>, whose "— Python 3.11.2 documentation" once lent "python 3 11" to every sentence.
    abstain_rate=1.0,
)


@pytest.mark.slow
def test_python_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    run_gate("python-manual", tmp_path, LIMITS, min_passages=301, min_denied=6)
