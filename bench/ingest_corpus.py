"""The corpora bench/ingest.py syncs: the evaluation's Python manual (large HTML pages) and
generated small Markdown notes (many files of ~3 passages), the two shapes whose costs differ most
(model time against per-document overhead). Seeded, so a before/after pair syncs the same text.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_manual(variant: str, out: Path) -> Path:
    """The python-manual evaluation corpus, built into `out` by the evaluation's own script (the
    manual installed once), so a benchmark reads exactly the pages the evaluation scores."""
    here = ROOT / "eval" / "python-manual"
    spec = importlib.util.spec_from_file_location("build_corpus", here / "build_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import corpuskit  # importable once a set's build_corpus.py has run (it puts eval/ on the path)

    corpuskit.build_variant(module.DOC, module.SUBSETS, here, variant, out, module.CI_SKIP_TYPES)
    return Path(out / "corpus")


def default_corpus() -> Path:
    """The CI subset of the Python manual."""
    return python_manual("ci", ROOT / "eval" / "python-manual" / "build" / "ci")


_WORDS = [
    "account",
    "access",
    "approval",
    "archive",
    "audit",
    "backup",
    "badge",
    "budget",
    "calendar",
    "contract",
    "customer",
    "deadline",
    "deploy",
    "desk",
    "device",
    "expense",
    "export",
    "firewall",
    "holiday",
    "invoice",
    "laptop",
    "ledger",
    "license",
    "meeting",
    "network",
    "office",
    "onboarding",
    "password",
    "payroll",
    "policy",
    "printer",
    "project",
    "refund",
    "release",
    "renewal",
    "report",
    "review",
    "roadmap",
    "salary",
    "schedule",
    "security",
    "server",
    "shipment",
    "storage",
    "support",
    "ticket",
    "training",
    "travel",
    "vendor",
    "visitor",
    "warranty",
]


def small_files(root: Path, files: int, seed: int = 7) -> Path:
    """`files` Markdown notes of three sections of 3-5 sentences: about 3 passages of ~400 characters each."""
    rng = random.Random(seed)
    team = root / "team"
    team.mkdir(parents=True, exist_ok=True)
    (team / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    for i in range(files):
        parts = [f"# Note {i}: {rng.choice(_WORDS)} {rng.choice(_WORDS)}\n"]
        for j in range(3):
            sentences = [
                " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
                for _ in range(rng.randint(3, 5))
            ]
            parts.append(f"## Section {j} {rng.choice(_WORDS)}\n\n{' '.join(sentences)}\n")
        (team / f"note-{i:04d}.md").write_text("\n".join(parts))
    return root
