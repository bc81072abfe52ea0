#!/usr/bin/env python3
"""Build the evaluation corpus from the Python 3.11 HTML manual (Debian package python3.11-doc).

Nobody on the project wrote these pages, so retrieval is measured on real, structured technical prose
(Sphinx HTML with API signatures, admonitions, tables and code) rather than on fixtures written to pass.

The corpus is a drive folder for `ragsync sync`: pages are copied under two tenants with the committed
ACL manifests (manifests/) laid over them, so permission correctness is measured too:

    pydocs/   tenant pydocs, read: group:staff
      library/  reference pages
      howto/    read: group:core-devs only
      faq/      read: group:staff, except design.html: user:guido and group:core-devs
    pyschool/ tenant pyschool, read: group:students (the tutorial)

Two sizes, because embedding costs about 10-50 passages/s on 2 cores:
  full (~2,100 passages, a few minutes to sync)   ci (~400 passages, under a minute to embed)
The question file is filtered to the questions whose gold documents are in the chosen subset.

Copies keep the manual's mtimes (copy2), so re-running the build and `ragsync sync` re-indexes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANUAL = Path("/usr/share/doc/python3.11/html")
SOURCE = "corpus"
"""The corpus is synced with `--source corpus`: gold doc IDs are `corpus:<path in the corpus>`."""
TENANTS = ("pydocs", "pyschool")
"""The tenants the corpus is synced with (`ragsync sync --tenant`, as in run.sh): its manifests name only these."""


def corpus_path(doc_id: str) -> str:
    """The corpus path of a gold doc ID (`corpus:pydocs/library/json.html` -> `pydocs/library/json.html`)."""
    return doc_id.removeprefix(f"{SOURCE}:")


DEBIAN_PACKAGE = "python3.11-doc"

_LIBRARY_FULL = [
    "functions", "exceptions", "json", "os.path", "pathlib", "itertools", "functools", "collections",
    "subprocess", "shutil", "tempfile", "random", "math", "heapq", "bisect", "textwrap", "csv", "secrets",
    "dataclasses", "contextlib", "queue", "timeit", "copy", "tomllib", "glob", "fnmatch", "gzip", "venv",
    "warnings", "uuid", "statistics", "pprint",
]  # fmt: skip
_LIBRARY_CI = ["json", "functools", "bisect", "heapq", "secrets", "tomllib", "copy", "shutil", "tempfile", "os.path"]

# (page in the manual, path in the corpus); the corpus path is the doc_id the questions name.
SUBSETS: dict[str, list[tuple[str, str]]] = {
    "full": [
        *((f"library/{p}.html", f"pydocs/library/{p}.html") for p in _LIBRARY_FULL),
        *((f"howto/{p}.html", f"pydocs/howto/{p}.html") for p in ("sorting", "descriptor", "argparse", "unicode")),
        ("faq/design.html", "pydocs/faq/design.html"),
        *(
            (f"tutorial/{p}.html", f"pyschool/tutorial/{p}.html")
            for p in (
                "errors",
                "controlflow",
                "datastructures",
                "classes",
                "modules",
                "inputoutput",
                "floatingpoint",
                "venv",
            )
        ),
    ],
    "ci": [
        *((f"library/{p}.html", f"pydocs/library/{p}.html") for p in _LIBRARY_CI),
        ("howto/sorting.html", "pydocs/howto/sorting.html"),
        ("faq/design.html", "pydocs/faq/design.html"),
        ("tutorial/errors.html", "pyschool/tutorial/errors.html"),
        ("tutorial/floatingpoint.html", "pyschool/tutorial/floatingpoint.html"),
    ],
}


def ensure_manual(manual: Path) -> None:
    """Install the Debian package when the manual is missing; `apt-get update` only if the first try fails."""
    if manual.is_dir():
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        sys.exit(f"{manual} is missing: install it with `apt-get install -y {DEBIAN_PACKAGE}` (as root)")
    install = ["apt-get", "install", "-y", "--no-install-recommends", DEBIAN_PACKAGE]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(install, env=env, check=True)
    if not manual.is_dir():
        sys.exit(f"{DEBIAN_PACKAGE} is installed but {manual} does not exist")


CI_SKIP_TYPES = ("situation",)
"""The situation questions (issue 23) are in the full set only: the CI subset stays the one the gate in
tests/ was measured on, until the gate's thresholds are re-measured with them."""


def build(variant: str, out: Path, manual: Path = MANUAL, questions: Path = HERE / "questions.jsonl") -> dict[str, int]:
    corpus = out / "corpus"
    wanted = {dst: manual / src for src, dst in SUBSETS[variant]}
    corpus.mkdir(parents=True, exist_ok=True)
    # Remove pages that are no longer in the subset, so a sync reflects the subset exactly.
    for path in sorted(corpus.rglob("*.html")):
        if path.relative_to(corpus).as_posix() not in wanted:
            path.unlink()
    for dst, src in wanted.items():
        target = corpus / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        st = src.stat()
        if not target.exists() or (target.stat().st_size, target.stat().st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            shutil.copy2(src, target)
    for manifest in (HERE / "manifests").rglob(".ragsync-acl.toml"):
        target = corpus / manifest.relative_to(HERE / "manifests")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != manifest.read_bytes():
            shutil.copyfile(manifest, target)
    kept = 0
    with questions.open(encoding="utf-8") as src_file, (out / "questions.jsonl").open("w", encoding="utf-8") as dst:
        for line in src_file:
            text = line.strip()
            if not text or text.startswith("#"):
                dst.write(line)
                continue
            item = json.loads(text)
            if variant == "ci" and item.get("type") in CI_SKIP_TYPES:
                continue
            if all(corpus_path(g["doc_id"]) in wanted for g in item.get("gold", [])):
                dst.write(line)
                kept += 1
    return {"pages": len(wanted), "bytes": sum(p.stat().st_size for p in wanted.values()), "questions": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=sorted(SUBSETS), default="full")
    parser.add_argument("--ci", action="store_const", const="ci", dest="variant", help="same as --variant ci")
    parser.add_argument("--out", type=Path, default=None, help="default: build/<variant> beside this script")
    parser.add_argument("--manual", type=Path, default=MANUAL)
    args = parser.parse_args()
    ensure_manual(args.manual)
    out = args.out or HERE / "build" / args.variant
    summary = build(args.variant, out, args.manual)
    print(
        f"{args.variant} corpus: {summary['pages']} pages ({summary['bytes'] / 1e6:.1f} MB) in {out / 'corpus'}; "
        f"{summary['questions']} questions in {out / 'questions.jsonl'}"
    )


if __name__ == "__main__":
    main()
