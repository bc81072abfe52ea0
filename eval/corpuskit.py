"""Shared parts of the evaluation sets built from Debian documentation packages (git-doc, flex-doc).

Each set under eval/ is a drive folder for `ragsync sync` made of pages that nobody on this project
wrote, copied from a Debian package pinned to one version, with committed ACL manifests laid over
them, and a question file whose gold quotes are checked against the pages before every evaluation.
This module holds what the sets share, so a set's own scripts only say which package, which pages
and which manifests:

* `ensure_package` installs the pinned version when the pages are missing and reports the version
  that is installed (a different version is a warning: the gold verifier decides whether the
  questions still hold, since a point release rarely changes documentation);
* `build` copies a subset of pages (keeping mtimes, so a re-sync re-indexes nothing), the manifests,
  and the questions whose gold documents are in that subset;
* `verify` checks every gold quote against the page text read with the standard library's HTML
  parser, independently of the chunker it is meant to test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = "corpus"
"""Every set's corpus is synced with `--source corpus` (the default name of its `corpus/` folder too), so
gold doc IDs are the IDs as indexed: `corpus:<path in the corpus>` (doc IDs are namespaced by source)."""


def corpus_path(doc_id: str) -> str:
    """The path in the corpus of a gold doc ID (`corpus:gitdocs/commands/git-stash.html` -> `gitdocs/...`)."""
    return doc_id.removeprefix(f"{SOURCE}:")


_SPACE = re.compile(r"\s+")
_SKIP_TAGS = {"script", "style", "head", "title"}
_BLOCK = {
    "p", "div", "section", "li", "ul", "ol", "dl", "dt", "dd", "pre", "table", "tr", "td", "th",
    "h1", "h2", "h3", "h4", "h5", "h6", "br", "blockquote", "hr",
}  # fmt: skip


@dataclass(frozen=True)
class DebianDoc:
    """A documentation package at the version the questions were written against."""

    package: str
    version: str
    root: Path
    """Where the package puts the HTML pages."""


def installed_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Status} ${Version}", package], capture_output=True, text=True, check=False
    )
    words = done.stdout.split()
    # "install ok installed <version>"
    if done.returncode != 0 or len(words) < 4 or words[2] != "installed":
        return None
    return words[3]


def ensure_package(doc: DebianDoc) -> str | None:
    """Install the pinned version when the pages are missing; `apt-get update` only if the first try fails.

    Returns the installed version (None when dpkg cannot tell, e.g. pages copied by hand).
    """
    if not doc.root.is_dir():
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            sys.exit(f"{doc.root} is missing: `apt-get install -y {doc.package}={doc.version}` (as root)")
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", f"{doc.package}={doc.version}"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if subprocess.run(install, env=env, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
            if subprocess.run(install, env=env, check=False).returncode != 0:
                sys.exit(
                    f"cannot install {doc.package}={doc.version} (the pinned version); if the mirror has moved on, "
                    f"install the current one (`apt-get install -y {doc.package}`) and let verify_gold.py decide"
                )
        if not doc.root.is_dir():
            sys.exit(f"{doc.package} is installed but {doc.root} does not exist")
    version = installed_version(doc.package)
    if version is not None and version != doc.version:
        print(
            f"warning: {doc.package} {version} is installed, the questions were written against {doc.version}; "
            "verify_gold.py checks whether every gold quote still holds",
            file=sys.stderr,
        )
    return version


def build(
    pages: Sequence[tuple[str, str]],
    out: Path,
    root: Path,
    manifests: Path,
    questions: Path,
    meta: Mapping[str, object] | None = None,
    skip_types: Collection[str] = (),
) -> dict[str, int]:
    """Copy (source page, corpus path) pairs into out/corpus, lay the manifests over them, filter the questions.

    The corpus path is the doc_id the questions name. Questions of `skip_types` are left out (the gated
    CI subsets keep the question types their gates were measured on). Pages no longer in the subset are removed, so a
    sync reflects the subset exactly; unchanged pages keep their mtime and are not re-indexed.
    """
    corpus = out / "corpus"
    wanted = {dst: root / src for src, dst in pages}
    missing = [str(src) for src in wanted.values() if not src.is_file()]
    if missing:
        sys.exit(f"pages missing from {root}: {', '.join(missing[:5])}")
    corpus.mkdir(parents=True, exist_ok=True)
    for path in sorted(corpus.rglob("*.html")):
        if path.relative_to(corpus).as_posix() not in wanted:
            path.unlink()
    for dst, src in wanted.items():
        target = corpus / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        st = src.stat()
        if not target.exists() or (target.stat().st_size, target.stat().st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            shutil.copy2(src, target)
    for manifest in manifests.rglob(".ragsync-acl.toml"):
        target = corpus / manifest.relative_to(manifests)
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
            if item.get("type") in skip_types:
                continue
            if all(corpus_path(g["doc_id"]) in wanted for g in item.get("gold", [])):
                dst.write(line)
                kept += 1
    summary = {"pages": len(wanted), "bytes": sum(p.stat().st_size for p in wanted.values()), "questions": kept}
    (out / "corpus.json").write_text(json.dumps({**(meta or {}), **summary}, indent=2) + "\n")
    return summary


def normalize(text: str) -> str:
    """Same folding as indexer.text.normalize (kept here so the check does not import the code it checks)."""
    return _SPACE.sub(" ", text).strip().casefold()


class _Text(HTMLParser):
    """Page text with blocks on their own lines; scripts, styles, the head and elements of the skipped
    classes (permalink anchors) dropped whole. A skipped element is left at the end tag of its own name
    and depth, so unclosed inner tags (<p>, <li>) cannot extend it."""

    def __init__(self, skip_classes: frozenset[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_classes = skip_classes
        self.parts: list[str] = []
        self._skip_tags = 0
        self._skip_name: str | None = None
        self._skip_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip_tags += 1
        if self._skip_name is not None:
            if tag == self._skip_name:
                self._skip_depth += 1
        elif any(c in self.skip_classes for k, v in attrs if k == "class" and v for c in v.split()):
            self._skip_name, self._skip_depth = tag, 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS and self._skip_tags:
            self._skip_tags -= 1
        if tag == self._skip_name:
            self._skip_depth -= 1
            if self._skip_depth == 0:
                self._skip_name = None
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip_tags and self._skip_name is None:
            self.parts.append(data)


def page_text(path: Path, skip_classes: Iterable[str] = ()) -> str:
    parser = _Text(frozenset(skip_classes))
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return normalize("".join(parser.parts))


def passages_of(path: Path) -> list[str]:
    sys.path.insert(0, str(REPO))
    from indexer.chunker import chunk_document

    return [normalize(c.text) for c in chunk_document(path.read_text(encoding="utf-8", errors="replace"), "html")]


def verify(
    questions: Path, corpus: Path, check_passages: bool = False, skip_classes: Iterable[str] = ()
) -> tuple[list[str], list[str], int]:
    """(failures, warnings, quotes checked): a failure is a gold quote missing from its page."""
    failures: list[str] = []
    warnings: list[str] = []
    texts: dict[str, str] = {}
    passages: dict[str, list[str]] = {}
    checked = 0
    for number, line in enumerate(questions.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        item = json.loads(line)
        for gold in item.get("gold", []):
            doc_id, quote = gold["doc_id"], normalize(gold["quote"])
            where = f"{questions.name}:{number} {item['id']}: {doc_id}"
            path = corpus / corpus_path(doc_id)
            if not path.is_file():
                failures.append(f"{where}: no such document under {corpus}")
                continue
            if doc_id not in texts:
                texts[doc_id] = page_text(path, skip_classes)
            checked += 1
            if quote not in texts[doc_id]:
                failures.append(f"{where}: quote not in the page: {gold['quote']!r}")
                continue
            if check_passages:
                if doc_id not in passages:
                    passages[doc_id] = passages_of(path)
                if not any(quote in p for p in passages[doc_id]):
                    warnings.append(f"{where}: quote is in the page but spans passages: {gold['quote']!r}")
    return failures, warnings, checked


VERIFY_DOC = """A gold quote that is not in its page would turn a correct retrieval into a "miss" and make every
figure of the evaluation wrong. The page text is read with the standard library's HTML parser,
independently of the project's chunker, then whitespace is folded and case dropped, as the evaluation
does for passages. With --passages it also warns when a quote spans two of the chunker's passages (it
could never be cited: the evaluation's "not_in_store")."""


def verify_main(default_questions: Path, skip_classes: Iterable[str] = (), doc: str = VERIFY_DOC) -> None:
    """The command line of a set's verify_gold.py."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=Path, nargs="?", default=default_questions)
    parser.add_argument("--corpus", type=Path, default=None, help="default: corpus/ beside the question file")
    parser.add_argument("--passages", action="store_true", help="also warn about quotes that span passages")
    args = parser.parse_args()
    corpus = args.corpus or args.questions.parent / "corpus"
    failures, warnings, checked = verify(args.questions, corpus, args.passages, skip_classes)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"{checked - len(failures)}/{checked} gold quotes found in their documents ({len(warnings)} warnings)")
    sys.exit(1 if failures else 0)


def build_variant(
    doc: DebianDoc,
    subsets: Mapping[str, Sequence[tuple[str, str]]],
    here: Path,
    variant: str,
    out: Path,
    ci_skip_types: Collection[str] = (),
) -> tuple[str | None, dict[str, int]]:
    """A set's corpus as its build_corpus.py makes it (the package installed if missing): what the
    command line, the CI gates and the benchmarks that read a set all call. Returns (installed version,
    summary)."""
    version = ensure_package(doc)
    meta = {"package": doc.package, "pinned": doc.version, "installed": version, "variant": variant}
    skip = ci_skip_types if variant == "ci" else ()
    questions = here / "questions.jsonl"
    return version, build(subsets[variant], out, doc.root, here / "manifests", questions, meta, skip)


def build_main(
    doc: DebianDoc,
    subsets: Mapping[str, Sequence[tuple[str, str]]],
    here: Path,
    description: str,
    ci_skip_types: Collection[str] = (),
) -> None:
    """The command line of a set's build_corpus.py; `ci_skip_types` are left out of the ci variant only."""
    import argparse

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=sorted(subsets), default="full")
    parser.add_argument("--ci", action="store_const", const="ci", dest="variant", help="same as --variant ci")
    parser.add_argument("--out", type=Path, default=None, help="default: build/<variant> beside this script")
    parser.add_argument("--root", type=Path, default=doc.root, help=f"the package's pages (default {doc.root})")
    args = parser.parse_args()
    out = args.out or here / "build" / args.variant
    version, summary = build_variant(
        DebianDoc(doc.package, doc.version, args.root), subsets, here, args.variant, out, ci_skip_types
    )
    print(
        f"{args.variant} corpus from {doc.package} {version or '(version unknown)'}: {summary['pages']} pages "
        f"({summary['bytes'] / 1e6:.1f} MB) in {out / 'corpus'}; {summary['questions']} questions in "
        f"{out / 'questions.jsonl'}"
    )
