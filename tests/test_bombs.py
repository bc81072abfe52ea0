"""Resource bombs (issue 18): each hostile file costs at most its budget and is that file's error.

The scanner reads PDF, DOCX, reST and large text files in a child process within a time and memory
budget (connectors/extract.py); the indexer chunks reST and large documents the same way
(indexer.chunker.IsolatedChunker), and its readers are linear. Each bomb below once stalled a scan
for minutes or took the process to gigabytes; here each is bounded by a budget a test can afford,
and a revocation in the same scan still goes out. Figures (full budgets, peak memory): bench/bombs.py.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import pytest
from bomb_files import (
    RestrictedFolder,
    deep_rst_list,
    docx_bomb,
    nested_html,
    one_line_csv,
    one_line_text,
    pdf_operators_bomb,
)
from conftest import MODEL_PATH

from connectors.drive import DriveConnector
from connectors.extract import Budget, Extractor, OverBudget
from connectors.scan import scan
from connectors.state import ConnectorState
from indexer.chunker import IsolatedChunker, Unchunkable, chunk_document
from query.tokens import issue_token
from ragsync.pipeline import sync_source
from ragsync.settings import Settings
from ragsync.wiring import build
from schemas.events import AclPayload, EventKind, doc_path
from schemas.principal import Principal
from streams.ports import TOPIC_DLQ

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
BUDGET = Budget(timeout_s=8.0, memory_bytes=384 * MIB)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {
        "acme/bombs/operators.pdf": pdf_operators_bomb(150_000, pages=4),  # a minute or more for pypdf
        "acme/bombs/expands.docx": docx_bomb(),
        "acme/bombs/deep.rst": deep_rst_list(),
    }


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


HR = RestrictedFolder(
    "hr", ("group:hr",), "group:hr-leads", "salaries.md", "# Salaries\n\nThe senior band is 90,000 EUR.\n"
)


async def test_each_bomb_is_its_own_error_and_the_revocation_of_its_scan_goes_first(
    tmp_path: Path, bombs: dict[str, bytes]
) -> None:
    drive = HR.write(tmp_path / "drive")
    state = ConnectorState(tmp_path / "connectors.db")
    events: list[tuple[float, object]] = []
    with Extractor(BUDGET) as extractor:
        await scan(
            DriveConnector(drive, tenants=["acme"]),
            state,
            lambda e: events.append((time.monotonic(), e)),
            extract=extractor.read,
        )
        for rel, data in bombs.items():
            (drive / rel).parent.mkdir(parents=True, exist_ok=True)
            (drive / rel).write_bytes(data)
        HR.narrow(drive)  # a revocation
        peak_before = _peak_rss()
        started = time.monotonic()
        report = await scan(
            DriveConnector(drive, tenants=["acme"]),
            state,
            lambda e: events.append((time.monotonic(), e)),
            extract=extractor.read,
        )
        elapsed = time.monotonic() - started
    state.close()

    errors = {line.split(": ", 1)[0]: line for line in report.errors}
    assert errors.keys() == set(bombs), report.errors
    assert "extraction exceeded 8 s" in errors["acme/bombs/operators.pdf"]
    assert "extraction exceeded 384 MiB of memory" in errors["acme/bombs/expands.docx"]
    assert "nested too deeply" in errors["acme/bombs/deep.rst"]
    skipped = {s.path: (s.reason, s.detail) for s in report.skipped}
    assert skipped["acme/bombs/operators.pdf"] == ("over budget", "extraction exceeded 8 s")
    assert skipped["acme/bombs/expands.docx"] == ("over budget", "extraction exceeded 384 MiB of memory")
    assert not report.deletes_skipped, "a bomb is a content error, not a failed listing"

    [(acl_at, acl)] = [(t, e) for t, e in events if getattr(e, "kind", None) is EventKind.ACL]
    assert doc_path(acl.doc_id) == HR.path and acl.payload == AclPayload(acl=(HR.kept_by,))
    assert acl_at - started < 2.0, "published before any bomb was read"
    assert elapsed < 3 * BUDGET.timeout_s + 60, "each bomb costs its budget, not minutes"
    assert _peak_rss() - peak_before < 200 * MIB, "the bombs' memory was the child's, never the scanner's"


def test_chunking_is_linear_on_200k_nested_divs() -> None:
    """16k nested <div>s took 5.9 s and 200k more than 90 s (an ancestor walk per node, a stack
    search per tag): within a budget that quadratic chunking could never meet, it is read whole."""
    with IsolatedChunker(Budget(timeout_s=60.0, memory_bytes=512 * MIB, inline_bytes=0)) as chunker:
        for closed in (False, True):
            html = nested_html(200_000, closed=closed).decode()
            chunks = chunker.chunk(html, "html", max_chars=1000, title="")
            assert [c.text for c in chunks] == ["The deepest sentence."]


@pytest.mark.parametrize(
    ("name", "content_type", "make"),
    [
        ("a 9 MB one-line CSV of a million columns", "csv", one_line_csv),
        ("a 9 MB line of one word", "text", one_line_text),
    ],
)
def test_huge_single_lines_are_chunked_within_the_budget(name: str, content_type: str, make: object) -> None:
    assert callable(make)
    text = make().decode()
    with IsolatedChunker(Budget(timeout_s=60.0, memory_bytes=768 * MIB)) as chunker:
        chunks = chunker.chunk(text, content_type, max_chars=1000, title="")
    assert chunks and all(len(c.text) <= 1000 for c in chunks), name
    assert sum(len(c.text) for c in chunks) >= len(text) // 2


def test_deep_rest_list_is_refused_before_docutils_spends_a_gigabyte() -> None:
    """2,000 nested list levels (3.9 MB) reached 1.24 GB in docutils before it gave up."""
    budget = Budget(timeout_s=30.0, memory_bytes=256 * MIB)
    with IsolatedChunker(budget) as chunker, pytest.raises(Unchunkable, match="nested too deeply"):
        chunker.chunk(deep_rst_list().decode(), "rst", max_chars=1000, title="")


def test_markdown_table_of_tiny_cells_is_over_the_chunking_budget_not_over_the_worker() -> None:
    """markdown-it holds ~700 bytes of tokens per byte of a table of one-character cells (a 3.5 MB
    table: 2 GB): in the child it is the document's error, the indexer's memory is untouched."""
    columns = 40_000
    table = "|" + "h|" * columns + "\n|" + "-|" * columns + "\n" + ("|" + "a|" * columns + "\n") * 40
    peak_before = _peak_rss()
    budget = Budget(timeout_s=60.0, memory_bytes=256 * MIB)
    with IsolatedChunker(budget) as chunker, pytest.raises(Unchunkable, match=r"chunking exceeded (256 MiB|60 s)"):
        chunker.chunk(table, "markdown", max_chars=1000, title="")
    assert _peak_rss() - peak_before < 100 * MIB


def test_a_header_repeated_on_a_million_tiny_rows_is_refused_not_amplified() -> None:
    """A 1,200-character header over 400k one-character rows would make 500 MB of passages from
    800 KB: refused as soon as the passages pass 8 times the text (plus 4 MiB)."""
    csv = ",".join(f"column{i:04d}" for i in range(110)) + "\n" + "v\n" * 400_000
    with pytest.raises(Unchunkable, match="repeated on every row"):
        chunk_document(csv, "csv")


def test_extractor_keeps_its_child_and_starts_another_after_an_overrun() -> None:
    with Extractor(Budget(timeout_s=3.0, memory_bytes=256 * MIB)) as extractor:
        first = extractor.read("rst", b"Title\n=====\n\nA paragraph.\n")
        second = extractor.read("rst", b"Other\n=====\n\nAnother one.\n")
        assert (first.title, second.title, extractor.started) == ("Title", "Other", 1), "one child for both"
        with pytest.raises(OverBudget, match="extraction exceeded 3 s"):
            extractor.read("pdf", pdf_operators_bomb(150_000, pages=4))
        assert extractor.read("rst", b"Back\n====\n\nFine.\n").title == "Back"
        assert extractor.started == 2, "the overrun child was killed, a fresh one answers"
        small = extractor.read("markdown", b"# Small\n\nRead in-process.\n")
        assert small.title == "Small" and extractor.started == 2


@pytest.mark.skipif(not (MODEL_PATH / "model.onnx").is_file(), reason=f"no embedding model at {MODEL_PATH}")
def test_unchunkable_document_is_dead_lettered_and_the_rest_of_the_sync_applies(tmp_path: Path) -> None:
    """The scanner does not chunk: a CSV whose passages would amplify passes it, and the worker
    dead-letters it with the reason instead of retrying it forever; the revocation beside it applies."""
    drive = HR.write(tmp_path / "drive")
    settings = Settings(
        home=tmp_path / "home", embed_model_path=MODEL_PATH, session_secret="b" * 32, extract_timeout_s=20.0
    )
    components = build(settings)
    try:
        assert sync_source(components, DriveConnector(drive, tenants=["acme"])).scan.upserts == 2
        (drive / "acme/amplifies.csv").write_text(
            ",".join(f"column{i:04d}" for i in range(110)) + "\n" + "v\n" * 400_000
        )
        HR.narrow(drive)
        second = sync_source(components, DriveConnector(drive, tenants=["acme"]))
        assert second.scan.errors == [] and (second.scan.upserts, second.scan.acl_changes) == (1, 1)
        assert second.stats is not None and second.stats.dead_lettered == 1 and second.stats.applied == 1
        [letter] = [json.loads(r.value) for r in components.events.poll(TOPIC_DLQ, "inspect", 10)]
        assert "cannot chunk" in letter["reason"] and "repeated on every row" in letter["reason"]
        hal = issue_token(settings.secret(), Principal(tenant="acme", user="hal", groups=("hr",)))
        assert not components.query_worker().ask_with_token(hal, "What is the senior salary band?").answered
    finally:
        components.close()
