#!/usr/bin/env python3
"""Check that every gold quote of a question file occurs in the HTML of the document it names.

A gold quote that is not in its page would turn a correct retrieval into a "miss" and make every
figure of the evaluation wrong, so this runs before each evaluation and exits non-zero on any failure.

The page text is read with the standard library's HTML parser, independently of the project's chunker
(scripts, styles and Sphinx's pilcrow links dropped, block elements separated), then whitespace is
folded and case dropped, the same normalisation the evaluation applies to passages.

With --passages the quotes are also looked up in the chunker's passages: a quote that spans two
passages can never be cited, which the evaluation reports as "not_in_store". That is a finding about
the chunker (or a quote to shorten), so it is printed as a warning, not a failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parent
_SPACE = re.compile(r"\s+")
_SKIP = {"script", "style", "head", "title"}
_BLOCK = {
    "p", "div", "section", "li", "ul", "ol", "dl", "dt", "dd", "pre", "table", "tr", "td", "th",
    "h1", "h2", "h3", "h4", "h5", "h6", "br", "blockquote",
}  # fmt: skip


def normalize(text: str) -> str:
    """Same folding as indexer.text.normalize (kept here so the check does not import the code it checks)."""
    return _SPACE.sub(" ", text).strip().casefold()


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._headerlink = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        if tag == "a" and any(k == "class" and v and "headerlink" in v for k, v in attrs):
            self._headerlink += 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP and self._skip:
            self._skip -= 1
        if tag == "a" and self._headerlink:
            self._headerlink -= 1
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip and not self._headerlink:
            self.parts.append(data)


def page_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return normalize("".join(parser.parts))


def passages_of(path: Path) -> list[str]:
    sys.path.insert(0, str(HERE.parents[1]))
    from indexer.chunker import chunk_document

    return [normalize(c.text) for c in chunk_document(path.read_text(encoding="utf-8"), "html")]


def verify(questions: Path, corpus: Path, check_passages: bool = False) -> tuple[list[str], list[str], int]:
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
            path = corpus / doc_id.removeprefix("corpus:")  # the source name the corpus is synced with
            if not path.is_file():
                failures.append(f"{where}: no such document under {corpus}")
                continue
            if doc_id not in texts:
                texts[doc_id] = page_text(path)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions", type=Path, nargs="?", default=HERE / "build" / "full" / "questions.jsonl")
    parser.add_argument("--corpus", type=Path, default=None, help="default: corpus/ beside the question file")
    parser.add_argument("--passages", action="store_true", help="also warn about quotes that span passages")
    args = parser.parse_args()
    corpus = args.corpus or args.questions.parent / "corpus"
    failures, warnings, checked = verify(args.questions, corpus, args.passages)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"{checked - len(failures)}/{checked} gold quotes found in their documents ({len(warnings)} warnings)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
