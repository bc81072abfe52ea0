#!/usr/bin/env python3
"""Build the evaluation corpus from the SQLite 3.40 documentation (Debian package sqlite3-doc, pinned below).

The sqlite.org site as shipped in Debian: hand-written Tcl-generated HTML, one topic per page, each opening
with the site's menu and search box (`class=nosearch`), many pages with a generated table of contents
(`fancy-toc*`), and the SQL language pages carrying large inline SVG railroad diagrams. A fifth generator
besides Sphinx (Python), AsciiDoc (Git), Texinfo (flex) and Publican (the Debian handbook). The corpus is a
drive folder for `ragsync sync`, under two tenants with the committed ACL manifests (manifests/) laid over it:

    sqlapp/     tenant sqlapp, read: group:developers
      lang/       the SQL language pages and SQL functions
      guides/     data types, WAL, pragmas, FAQ, limits, query planning; howtocorrupt.html: user:rita, group:dbcore
      internals/  read: group:dbcore only (file format, atomic commit, locking, temporary files)
    sqlcli/     tenant sqlcli, read: group:analysts (the command-line shell and its CSV import)

Two sizes: full (51 pages) and ci (16 pages). Copies keep the package's mtimes, so a re-sync re-indexes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from corpuskit import DebianDoc, build, build_main, ensure_package  # noqa: E402

DOC = DebianDoc("sqlite3-doc", "3.40.1-2+deb12u2", Path("/usr/share/doc/sqlite3"))
TENANTS = ("sqlapp", "sqlcli")
"""The tenants the corpus is synced with (`ragsync sync --tenant`, as in run.sh): its manifests name only these."""

_LANG_FULL = [
    "lang_createtable", "lang_altertable", "lang_upsert", "lang_vacuum", "lang_with", "lang_datefunc",
    "lang_transaction", "lang_attach", "lang_insert", "lang_returning", "lang_corefunc", "lang_aggfunc",
    "windowfunctions", "lang_createindex", "lang_conflict", "lang_expr", "lang_analyze", "partialindex", "expridx",
    "gencol", "json1", "fts5",
]  # fmt: skip
_LANG_CI = ["lang_upsert", "lang_vacuum", "lang_datefunc", "lang_altertable", "json1", "lang_corefunc"]
_GUIDES_FULL = [
    "datatype3", "autoinc", "foreignkeys", "wal", "pragma", "faq", "limits", "eqp", "queryplanner", "inmemorydb",
    "uri", "isolation", "useovernet", "quirks", "stricttables", "rowidtable", "withoutrowid", "nulls", "backup",
    "whentouse", "howtocorrupt", "c3ref/busy_timeout", "c3ref/last_insert_rowid",
]  # fmt: skip
_GUIDES_CI = ["datatype3", "autoinc", "foreignkeys", "wal", "faq", "howtocorrupt", "inmemorydb"]
_INTERNALS_FULL = ["fileformat2", "atomiccommit", "lockingv3", "tempfiles"]
_INTERNALS_CI = ["atomiccommit", "lockingv3"]
_CLI_FULL = ["cli", "csv"]
_CLI_CI = ["cli"]


def _name(page: str) -> str:
    """c3ref/busy_timeout -> c3ref-busy_timeout: the C API pages sit in a subfolder of the package."""
    return page.replace("/", "-")


def _pages(lang: list[str], guides: list[str], internals: list[str], cli: list[str]) -> list[tuple[str, str]]:
    return [
        *((f"{p}.html", f"sqlapp/lang/{_name(p)}.html") for p in lang),
        *((f"{p}.html", f"sqlapp/guides/{_name(p)}.html") for p in guides),
        *((f"{p}.html", f"sqlapp/internals/{_name(p)}.html") for p in internals),
        *((f"{p}.html", f"sqlcli/shell/{_name(p)}.html") for p in cli),
    ]


# (page in the package, path in the corpus); the corpus path is the doc_id the questions name.
SUBSETS: dict[str, list[tuple[str, str]]] = {
    "full": _pages(_LANG_FULL, _GUIDES_FULL, _INTERNALS_FULL, _CLI_FULL),
    "ci": _pages(_LANG_CI, _GUIDES_CI, _INTERNALS_CI, _CLI_CI),
}

__all__ = ["DOC", "SUBSETS", "build", "ensure_package"]

if __name__ == "__main__":
    build_main(DOC, SUBSETS, HERE, __doc__ or "")
