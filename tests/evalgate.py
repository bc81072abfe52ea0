"""The CI quality gate of an evaluation set under eval/, through the same code path as its run.sh.

Each set's gate test (tests/test_eval_gate_<set>.py) holds its own thresholds, set just below the
figures measured on its CI subset; this module does the work they share: build the CI corpus from the
Debian package, verify every gold quote against the HTML, sync with the real embedding model on the
embedded profile, run `ragsync eval` with the gates and check what the CLI gates do not cover (per-ranker
recall, MRR, every denied question abstaining, no gold outside the store).

Every stage is deterministic except latency, which is reported but never gated, so a drop below a
threshold means a regression in extraction, chunking, ranking, fusion, the answering model or the
permission filter, not noise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH

from ragsync.cli import main

EVAL = Path(__file__).resolve().parents[1] / "eval"
sys.path.insert(0, str(EVAL))

import corpuskit  # noqa: E402  (eval/corpuskit.py: what every set's build_corpus.py is made of)


@dataclass(frozen=True)
class Limits:
    """Lower bounds on the CI subset's figures (fused/bm25/dense recall@10, fused MRR, loop rates)."""

    fused_recall_at_10: float
    bm25_recall_at_10: float
    dense_recall_at_10: float
    fused_mrr: float
    answer_rate: float
    grounded_rate: float
    abstain_rate: float = 1.0
    denied_abstain_rate: float = 1.0
    """Share of denied-by-design questions that abstain. Below 1 only when the figure measured is: an answer
    to one is never a leak (every cited passage is re-checked), but it is a wrong answer from readable text."""
    max_leaks: int = 0


def load(set_name: str, module: str) -> ModuleType:
    path = EVAL / set_name / f"{module}.py"
    spec = importlib.util.spec_from_file_location(f"eval_{set_name.replace('-', '_')}_{module}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _package_or_skip(build_corpus: ModuleType) -> None:
    doc = build_corpus.DOC
    if doc.root.is_dir():
        return
    try:
        build_corpus.ensure_package(doc)  # apt-get install of the pinned version, when run as root
    except (SystemExit, Exception) as exc:  # any failure to install means "cannot be had" here
        pytest.skip(f"{doc.root} cannot be had ({exc}); install it: apt-get install -y {doc.package}={doc.version}")
    if not doc.root.is_dir():
        pytest.skip(f"{doc.root} cannot be had; install it: apt-get install -y {doc.package}={doc.version}")


def run_gate(set_name: str, tmp_path: Path, limits: Limits, min_passages: int, min_denied: int) -> dict[str, Any]:
    """Build, verify, sync and evaluate the set's CI subset; assert every limit; return the report."""
    build_corpus = load(set_name, "build_corpus")
    verify_gold = load(set_name, "verify_gold")
    _package_or_skip(build_corpus)
    assert (MODEL_PATH / "model.onnx").is_file(), f"the gate needs the real embedding model at {MODEL_PATH}"

    out = tmp_path / "ci"
    pages = build_corpus.SUBSETS["ci"]
    # The gated subsets keep the question types their limits were measured on (eval/<set>/build_corpus.py).
    _, summary = corpuskit.build_variant(
        build_corpus.DOC, build_corpus.SUBSETS, EVAL / set_name, "ci", out, build_corpus.CI_SKIP_TYPES
    )
    assert summary["pages"] == len(pages) and summary["questions"] >= 40, summary
    failures, _, checked = verify_gold.verify(
        out / "questions.jsonl", out / "corpus", skip_classes=verify_gold.SKIP_CLASSES
    )
    assert failures == [] and checked >= 40, failures

    env = {
        "RAGSYNC_HOME": str(tmp_path / "home"),
        "RAGSYNC_PROFILE": "embedded",
        "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH),
        "RAGSYNC_SESSION_SECRET": "eval-gate",
        "RAGSYNC_CONFIG": os.devnull,  # repository defaults, not a developer's file
    }
    runner = CliRunner()
    started = time.perf_counter()
    sync_args = ["sync", str(out / "corpus"), "--source", "corpus", "--json"]
    sync_args += [f"--tenant={tenant}" for tenant in build_corpus.TENANTS]
    synced = runner.invoke(main, sync_args, env=env, catch_exceptions=False)
    assert synced.exit_code == 0, synced.output
    sync_report = json.loads(synced.output)
    assert sync_report["dense"] is True and sync_report["errors"] == []
    assert sync_report["passages_embedded"] == sync_report["passages_written"] >= min_passages, sync_report
    sync_s = time.perf_counter() - started
    report_meta = {"sync_s": round(sync_s, 1)}

    report_path = tmp_path / f"eval-{set_name}-ci.json"
    args = [
        "eval",
        str(out / "questions.jsonl"),
        "--k",
        "10",
        "--json",
        "--out",
        str(report_path),
        "--min-recall",
        str(limits.fused_recall_at_10),
        "--max-leaks",
        str(limits.max_leaks),
        "--min-answer-rate",
        str(limits.answer_rate),
        "--min-abstain-rate",
        str(limits.abstain_rate),
    ]
    result = runner.invoke(main, args, env=env, catch_exceptions=False)
    report: dict[str, Any] = json.loads(report_path.read_text())
    _publish(report, report_meta)
    failed = [g for g in report["gates"] if not g["passed"]]
    assert result.exit_code == 0, f"gates failed: {failed}; misses: {report['misses']}"

    overall = report["overall"]
    perms = report["permissions"]
    assert perms["leak_count"] == 0, perms["leaks"]
    assert perms["denied_questions"] >= min_denied, perms
    denied_abstained = perms["denied_questions_abstained"] / perms["denied_questions"]
    assert denied_abstained >= limits.denied_abstain_rate, (perms, report["unexpected_answers"])
    assert report["design_mismatches"] == []
    assert overall["retrieval"]["bm25"]["recall@10"] >= limits.bm25_recall_at_10, overall["retrieval"]
    assert overall["retrieval"]["dense"]["recall@10"] >= limits.dense_recall_at_10, overall["retrieval"]
    assert overall["retrieval"]["fused"]["mrr"] >= limits.fused_mrr, overall["retrieval"]
    assert overall["loop"]["grounded_answer_rate"] >= limits.grounded_rate, overall["loop"]
    assert "not_in_store" not in report["miss_stages"], "a gold quote is not in any stored passage (extraction)"
    assert overall["single"]["searches_per_question"] == 1.0
    return {**report, **report_meta}


def _publish(report: dict[str, Any], meta: dict[str, Any]) -> None:
    """Leave the report where the caller asked (RAGSYNC_EVAL_REPORT, a file path), before any limit is
    checked, so a failed gate's figures can be read too."""
    target = os.environ.get("RAGSYNC_EVAL_REPORT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps({**report, **meta}, indent=2) + "\n")
