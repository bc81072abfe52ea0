#!/usr/bin/env python3
"""Check that every gold quote of the Python manual's question file occurs in the HTML of the document it names.

A gold quote that is not in its page would turn a correct retrieval into a "miss" and make every figure
of the evaluation wrong, so run.sh runs this before each evaluation and it exits non-zero on any failure.
The page text is read with the standard library's HTML parser (eval/corpuskit.py), independently of the
project's chunker, then whitespace is folded and case dropped, as the evaluation does for passages.
With --passages it also warns when a quote spans two of the chunker's passages (it could never be cited).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpuskit import verify, verify_main  # noqa: E402

SKIP_CLASSES: tuple[str, ...] = ("headerlink",)
"""Sphinx's pilcrow permalinks after every heading and definition."""

__all__ = ["SKIP_CLASSES", "verify"]

if __name__ == "__main__":
    verify_main(HERE / "build" / "full" / "questions.jsonl", SKIP_CLASSES, __doc__ or "")
