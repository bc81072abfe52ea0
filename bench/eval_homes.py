"""Where the evaluation sets' homes and questions are, for the benchmarks that read them
(bench/ranking.py, bench/calibrate_answers.py): one rule, so both measure the same homes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETS = ("python-manual", "git-doc", "flex-doc", "debian-handbook", "sqlite-doc")


def add_homes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--homes",
        type=Path,
        default=None,
        help="a folder holding home-<set> per set (another model's homes); default eval/<set>/build/<variant>/home",
    )


def set_paths(name: str, variant: str, homes: Path | None) -> tuple[Path, Path]:
    """(the set's build folder, with questions.jsonl; its home), or exit saying which run.sh builds it."""
    base = ROOT / "eval" / name / "build" / variant
    home = homes / f"home-{name}" if homes is not None else base / "home"
    if not home.is_dir():
        sys.exit(f"no home at {home}: run eval/{name}/run.sh{' --ci' if variant == 'ci' else ''} first")
    return base, home


def embed_model_path() -> Path:
    return Path(os.environ.get("RAGSYNC_EMBED_MODEL_PATH", ROOT.parent / "shared/models/all-MiniLM-L6-v2-onnx"))
