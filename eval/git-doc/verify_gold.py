#!/usr/bin/env python3
"""Gold-quote check of the Git manual's question file.

eval/corpuskit.py `verify`, with this generator's chrome skipped. run.sh runs it before each evaluation;
it exits non-zero when a gold quote is not in its page.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpuskit import VERIFY_DOC, verify, verify_main  # noqa: E402

SKIP_CLASSES: tuple[str, ...] = ()
"""AsciiDoc's xhtml11 pages carry no permalink anchors or other inline chrome to drop."""

__all__ = ["SKIP_CLASSES", "verify"]

if __name__ == "__main__":
    verify_main(HERE / "build" / "full" / "questions.jsonl", SKIP_CLASSES, f"{__doc__}\n{VERIFY_DOC}")
