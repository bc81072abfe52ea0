"""CI quality gate: the Python-manual evaluation on its CI subset, through the same code path as run.sh.

Builds the CI corpus (14 manual pages, ~400 passages, two tenants with restricted folders), verifies every
gold quote against the HTML, syncs it with the real embedding model on the embedded profile and runs
`ragsync eval` with gates. The thresholds sit slightly below the figures measured when they were set
(eval/python-manual/README.md has the table), so a drop means a regression in chunking, ranking,
fusion, the answering model or the permission filter, not noise: every stage is deterministic except
latency, which is reported but not gated.

Skipped only when the manual (Debian package python3.11-doc) cannot be had; CI installs it with
`apt-get install -y --no-install-recommends python3.11-doc`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH

from ragsync.cli import main

HERE = Path(__file__).resolve().parents[1] / "eval" / "python-manual"

# Measured on the CI subset (48 questions: 33 answerable, 15 expect abstain, 7 of them denied by design).
# One question is worth ~0.03 of recall or answer rate; each threshold leaves about one question of slack.
# Re-measured after the ranking work (issue 12: RRF k=60 over BM25 and dense, the fused top 50 reranked by
# the sentence reranker blended with the fused order; the extractive model's name gate and min_score 2.07).
MIN_FUSED_RECALL_AT_10 = 0.96  # measured 1.000
MIN_BM25_RECALL_AT_10 = 0.90  # measured 0.939
MIN_DENSE_RECALL_AT_10 = 0.93  # measured 0.970
MIN_FUSED_MRR = 0.76  # measured 0.790 (0.792 before the reranker weighed the whole passage's vector)
# Answers re-measured with the answer rule chosen leave one set out (min_score 1.9 and the name rule:
# bench/answer_rule.py, bench/results/answer-rule-ci.json): answered and grounded 0.636 -> 0.667.
# Then with query.answer_form's readings of the best sentence (form 0.3, subject 0.15: bench/answer_rule.py,
# chosen leave one set out; held out here the same readings, so the figures below are held-out figures):
# answered and grounded 0.667 -> 0.727.
MIN_ANSWER_RATE = 0.69  # measured 0.727 (24/33) held out and tuned: one paraphrase answered
MIN_GROUNDED_RATE = 0.69  # measured 0.727 (24/33) held out and tuned
# Every expect-abstain question must abstain (measured 15/15): the evidence heading no longer carries the
# page <title>, whose "— Python 3.11.2 documentation" once lent "python 3 11" to every sentence.
MIN_ABSTAIN_RATE = 1.0
MAX_LEAKS = 0


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _manual_or_skip(build_corpus: ModuleType) -> None:
    manual: Path = build_corpus.MANUAL
    if manual.is_dir():
        return
    try:
        build_corpus.ensure_manual(manual)  # apt-get install when run as root with apt-get
    except (SystemExit, Exception) as exc:  # any failure to install means "cannot be had" here
        pytest.skip(f"{manual} cannot be had ({exc}); install it: apt-get install -y python3.11-doc")
    if not manual.is_dir():
        pytest.skip(f"{manual} cannot be had; install it: apt-get install -y python3.11-doc")


@pytest.mark.slow
def test_python_manual_ci_subset_meets_the_quality_gates(tmp_path: Path) -> None:
    build_corpus = _load("build_corpus")
    verify_gold = _load("verify_gold")
    _manual_or_skip(build_corpus)
    assert (MODEL_PATH / "model.onnx").is_file(), f"the gate needs the real embedding model at {MODEL_PATH}"

    out = tmp_path / "ci"
    summary = build_corpus.build("ci", out)
    assert summary["pages"] == 14 and summary["questions"] >= 40
    failures, _, checked = verify_gold.verify(out / "questions.jsonl", out / "corpus")
    assert failures == [] and checked >= 30

    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_PROFILE": "embedded",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "eval-gate",
        "RAGSYNC_CONFIG": os.devnull,  # repository defaults, not a developer's file
    }
    runner = CliRunner()
    started = time.perf_counter()
    synced = runner.invoke(
        main,
        [
            "sync",
            str(out / "corpus"),
            "--source",
            build_corpus.SOURCE,
            "--tenant",
            ",".join(build_corpus.TENANTS),
            "--json",
        ],
        env=env,
        catch_exceptions=False,
    )
    assert synced.exit_code == 0, synced.output
    sync_report = json.loads(synced.output)
    assert sync_report["dense"] is True and sync_report["errors"] == []
    assert sync_report["passages_embedded"] == sync_report["passages_written"] > 300
    sync_s = time.perf_counter() - started

    report_path = tmp_path / "eval-python-manual-ci.json"
    args = [
        "eval",
        str(out / "questions.jsonl"),
        "--k",
        "10",
        "--json",
        "--out",
        str(report_path),
        "--min-recall",
        str(MIN_FUSED_RECALL_AT_10),
        "--max-leaks",
        str(MAX_LEAKS),
        "--min-answer-rate",
        str(MIN_ANSWER_RATE),
        "--min-abstain-rate",
        str(MIN_ABSTAIN_RATE),
    ]
    result = runner.invoke(main, args, env=env, catch_exceptions=False)
    report: dict[str, Any] = json.loads(report_path.read_text())
    _publish(report, sync_s)
    failed = [g for g in report["gates"] if not g["passed"]]
    assert result.exit_code == 0, f"gates failed: {failed}; misses: {report['misses']}"

    overall = report["overall"]
    assert report["permissions"]["leak_count"] == 0, report["permissions"]["leaks"]
    perms = report["permissions"]
    assert perms["denied_questions"] >= 6 and perms["denied_questions_abstained"] == perms["denied_questions"]
    assert report["design_mismatches"] == []
    assert overall["retrieval"]["bm25"]["recall@10"] >= MIN_BM25_RECALL_AT_10, overall["retrieval"]
    assert overall["retrieval"]["dense"]["recall@10"] >= MIN_DENSE_RECALL_AT_10, overall["retrieval"]
    assert overall["retrieval"]["fused"]["mrr"] >= MIN_FUSED_MRR, overall["retrieval"]
    assert overall["loop"]["grounded_answer_rate"] >= MIN_GROUNDED_RATE, overall["loop"]
    assert "not_in_store" not in report["miss_stages"], "a gold quote is not in any stored passage (chunking)"
    assert overall["single"]["searches_per_question"] == 1.0


def _publish(report: dict[str, Any], sync_s: float) -> None:
    """Leave the report where CI can pick it up (bench/results/), without failing the gate over it."""
    target = os.environ.get("RAGSYNC_EVAL_REPORT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps({**report, "sync_s": round(sync_s, 1)}, indent=2) + "\n")
