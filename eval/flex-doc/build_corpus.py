#!/usr/bin/env python3
"""Build the evaluation corpus from the flex 2.6.4 HTML manual (Debian package flex-doc, pinned below).

Texinfo (makeinfo 6.8) output split one node per page: every page opens with a navigation header
("Next: ..., Previous: ..., Up: ..."), definitions carry permalink pilcrows, and many FAQ pages are a
few lines of mail quoted in <pre>. A third generator besides Sphinx (Python) and AsciiDoc (Git).
The corpus is a drive folder for `ragsync sync`, under two tenants with the committed ACL manifests
(manifests/) laid over it, so permission correctness is measured too:

    lexdocs/    tenant lexdocs, read: group:engineers
      manual/     the manual's chapters and sections; Performance.html: user:vern and group:maintainers
      internals/  read: group:maintainers only (serialized tables, DFA internals)
    lexfaq/     tenant lexfaq, read: group:students (the FAQ)

Two sizes: full (the whole manual without its indices and placeholder nodes: 118 pages, 472 passages) and ci (25 pages,
143 passages, what the CI gate syncs). Copies keep the package's mtimes, so a re-sync re-indexes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpuskit import DebianDoc, build, build_main, ensure_package  # noqa: E402

DOC = DebianDoc("flex-doc", "2.6.4-8.2", Path("/usr/share/doc/flex-doc/html"))
TENANTS = ("lexdocs", "lexfaq")
"""The tenants the corpus is synced with (`ragsync sync --tenant`, as in run.sh): its manifests name only these."""

_MANUAL_FULL = [
    "Introduction", "Simple-Examples", "Format", "Definitions-Section", "Rules-Section", "User-Code-Section",
    "Comments-in-the-Input", "Patterns", "Matching", "Actions", "Generated-Scanner", "Start-Conditions",
    "Multiple-Input-Buffers", "EOF", "Misc-Macros", "User-Values", "Yacc", "Scanner-Options",
    "Options-for-Specifying-Filenames", "Options-Affecting-Scanner-Behavior", "Code_002dLevel-And-API-Options",
    "Options-for-Scanner-Speed-and-Size", "Debugging-Options", "Miscellaneous-Options", "Performance", "Cxx",
    "Reentrant", "Reentrant-Uses", "Reentrant-Overview", "Reentrant-Example", "Reentrant-Detail",
    "Specify-Reentrant", "Extra-Reentrant-Argument", "Global-Replacement", "Init-and-Destroy-Functions",
    "Accessor-Methods", "Extra-Data", "About-yyscan_005ft", "Reentrant-Functions", "Lex-and-Posix",
    "Memory-Management", "The-Default-Memory-Management", "Overriding-The-Default-Memory-Management",
    "A-Note-About-yytext-And-Memory", "Diagnostics", "Limitations", "Bibliography", "Appendices",
    "Makefiles-and-Flex", "Bison-Bridge", "M4-Dependency", "Common-Patterns", "Numbers", "Identifiers",
    "Quoted-Constructs", "Addresses", "Reporting-Bugs",
]  # fmt: skip
_MANUAL_CI = [
    "Matching", "Actions", "Generated-Scanner", "Start-Conditions", "Multiple-Input-Buffers", "EOF", "Misc-Macros",
    "User-Values", "Options-Affecting-Scanner-Behavior", "Options-for-Scanner-Speed-and-Size",
    "The-Default-Memory-Management", "Performance",
]  # fmt: skip
_INTERNALS_FULL = [
    "Serialized-Tables", "Creating-Serialized-Tables", "Loading-and-Unloading-Serialized-Tables",
    "Tables-File-Format", "Can-you-discuss-some-flex-internals_003f", "How-does-flex-compile-the-DFA-so-quickly_003f",
]  # fmt: skip
_INTERNALS_CI = ["Serialized-Tables", "Creating-Serialized-Tables", "Loading-and-Unloading-Serialized-Tables"]
_FAQ_CI = [
    "I-get-an-error-about-undefined-yywrap_0028_0029_002e",
    "Whenever-flex-can-not-match-the-input-it-says-_0022flex-scanner-jammed_0022_002e",
    "How-can-I-use-more-than-8192-rules_003f",
    "Why-doesn_0027t-flex-have-non_002dgreedy-operators-like-perl-does_003f",
    "Flex-is-not-matching-my-patterns-in-the-same-order-that-I-defined-them_002e",
    "Memory-leak-_002d-16386-bytes-allocated-by-malloc_002e",
    "Why-doesn_0027t-yyrestart_0028_0029-set-the-start-state-back-to-INITIAL_003f",
    "The-period-isn_0027t-working-the-way-I-expected_002e",
    "How-do-I-execute-code-only-during-initialization-_0028only-before-the-first-scan_0029_003f",
    "When-was-flex-born_003f",
]


def _faq_full(root: Path) -> list[str]:
    """Every titled FAQ node (its header's Up link is the FAQ), without the internals ones moved above."""
    if not root.is_dir():
        return []
    pages = []
    for path in sorted(root.glob("*.html")):
        name = path.stem
        if name.startswith(("unnamed_002dfaq", "ERASEME", "deleteme")) or name in _INTERNALS_FULL:
            continue
        if 'rel="up">FAQ</a>' in path.read_text(encoding="utf-8", errors="replace"):
            pages.append(name)
    return pages


def _pages(manual: list[str], internals: list[str], faq: list[str]) -> list[tuple[str, str]]:
    return [
        *((f"{p}.html", f"lexdocs/manual/{p}.html") for p in manual),
        *((f"{p}.html", f"lexdocs/internals/{p}.html") for p in internals),
        *((f"{p}.html", f"lexfaq/faq/{p}.html") for p in faq),
    ]


# (page in the package, path in the corpus); the corpus path is the doc_id the questions name.
SUBSETS: dict[str, list[tuple[str, str]]] = {
    "full": _pages(_MANUAL_FULL, _INTERNALS_FULL, _faq_full(DOC.root)),
    "ci": _pages(_MANUAL_CI, _INTERNALS_CI, _FAQ_CI),
}

CI_SKIP_TYPES = ("situation",)
"""The situation questions (issue 23) are in the full set only: the CI subset stays the one the gate in
tests/ was measured on, until the gate's thresholds are re-measured with them."""

__all__ = ["CI_SKIP_TYPES", "DOC", "SUBSETS", "build", "ensure_package"]

if __name__ == "__main__":
    build_main(DOC, SUBSETS, HERE, __doc__ or "", CI_SKIP_TYPES)
