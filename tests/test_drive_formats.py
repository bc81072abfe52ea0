"""Drive formats (issue 13 item 1): PDF, DOCX, CSV/TSV and reST, from bytes to cited passages."""

from __future__ import annotations

import hashlib
import zipfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

import pytest
from format_fixtures import make_docx, make_pdf, scanned_pdf, set_outline_level
from pydantic import ValidationError

from connectors.base import content_metadata
from connectors.drive import DriveConnector
from connectors.formats import Unreadable, read_content
from connectors.formats.pdf import extract_pdf
from connectors.formats.word import extract_docx
from connectors.scan import scan
from connectors.state import ConnectorState
from indexer.chunker import chunk_document, chunk_extracted
from schemas.events import Event, UpsertPayload
from schemas.extracted import ExtractedDocument, Heading, ListItem, Paragraph, Table
from schemas.passages import location_of, url_at

TRAVEL = [
    [
        ("Travel policy", 0, ["This policy applies to every employee who travels for work."]),
        ("Rail", 1, ["Trains are preferred for trips under four hours."]),
    ],
    [("Hotel allowance", 1, ["The nightly hotel allowance is 180 euros in capital cities and 120 euros elsewhere."])],
    [("Meals", 1, ["Dinner is reimbursed up to 45 euros with a receipt."])],
]


def blocks_of(document: ExtractedDocument) -> list[tuple[str, str, int | None]]:
    return [(b.kind, getattr(b, "text", ""), b.page) for b in document.blocks]


# ------------------------------------------------------------------------------------------- PDF


@pytest.mark.parametrize("outline", [True, False], ids=["outline", "font-sizes"])
def test_pdf_headings_paragraphs_and_pages(outline: bool) -> None:
    pdf = extract_pdf(make_pdf(TRAVEL, title="Travel policy", outline=outline))
    assert pdf.title == "Travel policy" and pdf.document.pages == 3
    assert blocks_of(pdf.document) == [
        ("heading", "Travel policy", 1),
        ("para", "This policy applies to every employee who travels for work.", 1),
        ("heading", "Rail", 1),
        ("para", "Trains are preferred for trips under four hours.", 1),
        ("heading", "Hotel allowance", 2),
        ("para", "The nightly hotel allowance is 180 euros in capital cities and 120 euros elsewhere.", 2),
        ("heading", "Meals", 3),
        ("para", "Dinner is reimbursed up to 45 euros with a receipt.", 3),
    ], "the running footer 'Acme internal - page N' is gone"
    levels = [b.level for b in pdf.document.blocks if isinstance(b, Heading)]
    assert levels == [1, 2, 2, 2]
    chunks = chunk_extracted(pdf.document)
    hotel = next(c for c in chunks if "180 euros" in c.text)
    assert hotel.heading_path == ("Travel policy", "Hotel allowance")
    assert str(hotel.locus) == "page 2" and hotel.locus is not None and hotel.locus.fragment == "page=2"


def test_a_pdf_paragraph_cut_across_pages_keeps_each_page_and_the_passage_spans_them() -> None:
    long = "Each receipt must be uploaded within thirty days of the trip. " * 3
    pdf = extract_pdf(make_pdf([[("Receipts", 0, [long])], [("Receipts", 1, ["Late receipts need approval."])]]))
    pages = {b.page for b in pdf.document.blocks if isinstance(b, Paragraph)}
    assert pages == {1, 2}
    merged = extract_pdf(make_pdf([[("Receipts", 0, ["Short one."])], [("Receipts", 1, ["Short two."])]]))
    assert len(merged.document.blocks) == 4


def test_pdf_long_lines_are_one_paragraph_and_a_larger_gap_starts_the_next() -> None:
    first = "Per diems are paid for every night spent away from home on company business. " * 4
    second = "Cash advances are settled within a week of returning."
    pdf = extract_pdf(make_pdf([[("Per diems", 0, [first, second])]], footer=None))
    paragraphs = [b.text for b in pdf.document.blocks if isinstance(b, Paragraph)]
    assert paragraphs == [first.strip(), second], "wrapped lines joined with one space, the gap kept as a break"


def test_a_pdf_encrypted_only_against_editing_is_read() -> None:
    pdf = extract_pdf(make_pdf(TRAVEL, owner_password="only-the-owner-edits"))
    assert any("180 euros" in getattr(b, "text", "") for b in pdf.document.blocks)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (make_pdf(TRAVEL, user_password="s3cret"), "encrypted PDF: it needs a password to open"),
        (scanned_pdf(3), "no text layer: none of its 3 page(s) has text to extract (a scan? ragsync does not do OCR)"),
        (b"%PDF-1.7\n1 0 obj <<>> endobj\n", "not a readable PDF"),
        (make_pdf(TRAVEL)[:1500], "not a readable PDF"),
        (b"not a pdf at all", "not a readable PDF"),
    ],
    ids=["password", "scanned", "garbage", "truncated", "not-pdf"],
)
def test_an_unreadable_pdf_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(Unreadable) as caught:
        read_content("pdf", data)
    assert str(caught.value).startswith(reason) and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------ DOCX

EXPENSES = [
    ("Normal", "Read this before you book anything."),
    ("Heading 1", "Meals"),
    ("Normal", "Dinner is covered up to 40 euros."),
    ("Normal", "Exceptions:"),
    ("List Bullet", "Client dinners need a named client."),
    ("List Bullet 2", "Alcohol is never reimbursed."),
    ("List Bullet", "Team events follow the events policy."),
    ("Heading 2", "City limits"),
    ("Normal", "Hotel limits by city:"),
]
LIMITS = [["City", "Limit", "Currency"], ["Paris", "210", "EUR"], ["Lyon", "140", "EUR"]]


def test_docx_headings_from_styles_lists_and_tables_as_rows() -> None:
    word = extract_docx(make_docx("Expenses handbook", EXPENSES, {8: LIMITS}))
    assert word.title == "Expenses handbook"
    kinds = [(b.kind, getattr(b, "level", None)) for b in word.document.blocks]
    assert kinds[:3] == [("heading", 1), ("para", None), ("heading", 2)], "Title is level 1, Heading 1 below it"
    items = [(b.text, b.depth) for b in word.document.blocks if isinstance(b, ListItem)]
    assert items == [
        ("Client dinners need a named client.", 0),
        ("Alcohol is never reimbursed.", 1),
        ("Team events follow the events policy.", 0),
    ]
    [table] = [b for b in word.document.blocks if isinstance(b, Table)]
    assert table.header_rows == 1 and table.rows[1] == ("Paris", "210", "EUR")
    chunks = chunk_extracted(word.document)
    paris = next(c for c in chunks if "Paris" in c.text)
    assert paris.text == "Hotel limits by city:\n| City | Limit | Currency |\n| Paris | 210 | EUR |"
    assert paris.heading_path == ("Expenses handbook", "Meals", "City limits") and paris.locus is None
    client = next(c for c in chunks if "Client dinners" in c.text)
    assert client.text == "Exceptions:\nClient dinners need a named client.\n- Alcohol is never reimbursed."


def test_docx_outline_levels_make_headings_whatever_the_style_is_called() -> None:
    data = set_outline_level(make_docx(None, [("Normal", "Überblick"), ("Normal", "Text darunter.")]), "Überblick", 0)
    word = extract_docx(data)
    assert blocks_of(word.document) == [("heading", "Überblick", None), ("para", "Text darunter.", None)]
    assert word.title == "Überblick"


def test_docx_core_title_and_explicit_header_rows() -> None:
    word = extract_docx(make_docx(None, [("Normal", "Limits:")], {0: LIMITS}, core_title="Limits", header_row=True))
    assert word.title == "Limits"
    [table] = [b for b in word.document.blocks if isinstance(b, Table)]
    assert table.header_rows == 1


def _zip(files: dict[str, bytes], zeros: int = 0) -> bytes:
    """A ZIP package; `zeros` MiB of zeros as word/document.xml (a ZIP bomb, written without holding it)."""
    out = BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in files.items():
            package.writestr(name, data)
        if zeros:
            with package.open("word/document.xml", "w") as member:
                chunk = bytes(1 << 20)
                for _ in range(zeros):
                    member.write(chunk)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512), "encrypted or legacy Word file (an OLE container"),
        (make_docx("T", EXPENSES)[:2000], "not a readable DOCX (not a ZIP package"),
        (_zip({"hello.txt": b"hi"}), "not a readable DOCX (no word/document.xml in the package)"),
        (_zip({"word/document.xml": b"<w:document"}), "not a readable DOCX ("),
        (_zip({"[Content_Types].xml": b"<Types/>"}, zeros=600), "DOCX expands to 629145608 bytes (limit"),
    ],
    ids=["ole", "truncated", "other-zip", "broken-xml", "zip-bomb"],
)
def test_an_unreadable_docx_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(Unreadable) as caught:
        read_content("docx", data)
    assert str(caught.value).startswith(reason) and "\n" not in str(caught.value)


def test_an_empty_docx_is_reported_not_indexed_as_nothing() -> None:
    with pytest.raises(Unreadable, match="no text in this DOCX file"):
        read_content("docx", make_docx(None, []))


# -------------------------------------------------------------------------------------- CSV, TSV

PRICES = 'Product,Price,Notes\nWidget,12.50,"sold in packs of 10, boxed"\n\nGadget,99,\n"Multi\nline",1,x\n'


def test_csv_one_passage_per_row_with_its_header_and_row_number() -> None:
    chunks = chunk_document(PRICES, "csv")
    assert [(c.text, str(c.locus)) for c in chunks] == [
        ("| Product | Price | Notes |\n| Widget | 12.50 | sold in packs of 10, boxed |", "row 2"),
        ("| Product | Price | Notes |\n| Gadget | 99 |  |", "row 4"),  # row 3 is blank, as a spreadsheet shows it
        ("| Product | Price | Notes |\n| Multi line | 1 | x |", "row 5"),
    ]
    assert len({c.anchor for c in chunks}) == 3


@pytest.mark.parametrize(
    ("content", "content_type", "row"),
    [
        ("Land;Frist\nDE;14 Tage\nFR;30 jours\n", "csv", "| DE | 14 Tage |"),  # Excel's ";" locales
        ("Land\tFrist\nDE\t14 Tage\n", "tsv", "| DE | 14 Tage |"),
        ("a|b\nx|y\n", "csv", "| x | y |"),
        ("a,b\n1,2,3\n", "csv", "| 1 | 2 | 3 |"),  # ragged: the header is padded
        ('a,b\n1,"never closed\n2,3\n', "csv", "| 1 | never closed 2,3 |"),  # nothing lost
        ("pipe|in,cell\nx,a|b\n", "csv", "| x | a\\|b |"),
    ],
)
def test_delimited_variants(content: str, content_type: str, row: str) -> None:
    texts = [c.text for c in chunk_document(content, content_type)]  # type: ignore[arg-type]
    assert any(t.endswith(row) for t in texts), texts


def test_a_header_only_csv_is_one_passage() -> None:
    [chunk] = chunk_document("Product,Price\n", "csv")
    assert chunk.text == "| Product | Price |" and str(chunk.locus) == "row 1"


# ------------------------------------------------------------------------------------------ reST

RST = """\
==================
Security handbook
==================

:effective_from: 2026-02-01
:author: Security team

Every laptop is encrypted with a recovery key held by IT.

Passwords
=========

Passwords have at least **sixteen** characters.

Rotation:

* Service passwords rotate every 90 days.
* Personal passwords rotate only after an incident.

MFA
   Required for every remote login.

.. note:: Hardware keys are issued on request.

.. include:: /etc/passwd

.. raw:: html

   <script>alert(1)</script>

.. code-block:: shell

   ragsync sync ./docs

=======  ========
Level    Reviewer
=======  ========
Public   Anyone
Secret   CISO
=======  ========

.. contents::
"""


def test_rst_structure_to_passages() -> None:
    chunks = chunk_document(RST, "rst")
    by = {c.text: c for c in chunks}
    assert "Every laptop is encrypted with a recovery key held by IT." in by
    assert by["Passwords have at least sixteen characters."].heading_path == ("Security handbook", "Passwords")
    assert "Rotation:\nService passwords rotate every 90 days." in by, "a lead-in repeated on each item"
    assert "MFA\nRequired for every remote login." in by
    assert "| Level | Reviewer |\n| Secret | CISO |" in by
    joined = "\n".join(by)
    assert "Note: Hardware keys are issued on request." in joined and "ragsync sync ./docs" in joined
    assert "root:" not in joined and "include" not in joined, "include is disabled: no server file is read"
    assert "<script>" not in joined and "raw" not in joined, "raw is disabled; docutils' own messages dropped"
    assert "Contents" not in joined, "a generated table of contents is navigation"
    assert "Security team" not in joined, "docinfo is metadata"


def test_rst_metadata_title_and_effective_date() -> None:
    meta = content_metadata("rst", RST)
    assert meta.title == "Security handbook" and meta.effective_from == datetime(2026, 2, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="invalid effective_from '2026-02-30'"):
        content_metadata("rst", "Title\n=====\n\n:effective_from: 2026-02-30\n\nText.\n")
    with pytest.raises(ValueError, match="nested too deeply"):
        content_metadata("rst", "".join(" " * i + "x\n\n" for i in range(300)))
    assert content_metadata("rst", "Just text.\n").title is None


# ------------------------------------------------------------------------------------ the payload


def test_extracted_formats_travel_as_blocks_never_as_content() -> None:
    doc = ExtractedDocument(blocks=(Paragraph(text="x", page=1),), pages=1)
    base = {"content_hash": "0" * 16, "acl": ("group:staff",), "source_url": "a.pdf"}
    assert UpsertPayload(content_type="pdf", extracted=doc, **base).content == ""
    with pytest.raises(ValidationError, match="travels as `extracted` text blocks"):
        UpsertPayload(content_type="pdf", content="%PDF-1.7 ...", **base)
    with pytest.raises(ValidationError, match="travels as `extracted` text blocks"):
        UpsertPayload(content_type="docx", content="x", extracted=doc, **base)
    with pytest.raises(ValidationError, match="travels as `content`"):
        UpsertPayload(content_type="markdown", content="x", extracted=doc, **base)
    again = UpsertPayload.model_validate_json(
        UpsertPayload(content_type="pdf", extracted=doc, **base).model_dump_json()
    )
    assert again.extracted == doc, "the blocks survive the event log"


def test_citation_urls_name_the_page_or_row() -> None:
    assert url_at("handbook.pdf", "page=3") == "handbook.pdf#page=3"
    assert url_at("https://x/a.pdf#view=Fit", "page=3") == "https://x/a.pdf#view=Fit&page=3"
    assert location_of("handbook.pdf#page=3") == "page 3"
    assert location_of("prices.csv#row=12") == "row 12"
    assert location_of("prices.csv#row=12-14") == "rows 12-14"
    assert location_of("notes.md") is None and location_of("page=3.md") is None


# ------------------------------------------------------------------------------------------ scan


async def test_a_scan_indexes_every_format_and_reports_each_unreadable_file(tmp_path: Path) -> None:
    root = tmp_path / "drive"
    root.mkdir()
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    good = {
        "travel.pdf": make_pdf(TRAVEL, title="Travel policy"),
        "expenses.docx": make_docx("Expenses handbook", EXPENSES, {8: LIMITS}),
        "prices.csv": PRICES.encode(),
        "limits.tsv": b"City\tLimit\nParis\t210\n",
        "security.rst": RST.encode(),
    }
    bad = {
        "locked.pdf": make_pdf(TRAVEL, user_password="s3cret"),
        "scan.pdf": scanned_pdf(),
        "broken.docx": b"PK\x03\x04 not really a zip",
    }
    for name, data in {**good, **bad}.items():
        (root / name).write_bytes(data)
    events: list[Event] = []
    report = await scan(DriveConnector(root, tenants=["acme"]), ConnectorState(tmp_path / "state.db"), events.append)
    payloads = {e.doc_id.removeprefix("drive:"): e.payload for e in events}
    assert set(payloads) == set(good) and report.upserts == len(good)
    assert {s.path: s.reason for s in report.skipped} == dict.fromkeys(bad, "unreadable")
    details = {s.path: s.detail for s in report.skipped}
    assert details["locked.pdf"].startswith("encrypted PDF")
    assert details["scan.pdf"].startswith("no text layer")
    assert details["broken.docx"].startswith("not a readable DOCX")
    assert sorted(e.split(":")[0] for e in report.errors) == sorted(bad), "each is also that document's error"
    assert not report.deletes_skipped, "an unreadable file is a content error, not a failed listing"

    pdf = payloads["travel.pdf"]
    assert isinstance(pdf, UpsertPayload) and pdf.content == "" and pdf.extracted is not None
    assert pdf.content_hash == hashlib.sha256(good["travel.pdf"]).hexdigest(), "the hash is of the file"
    assert pdf.title == "Travel policy" and len(pdf.model_dump_json()) < len(good["travel.pdf"])
    rst = payloads["security.rst"]
    assert isinstance(rst, UpsertPayload) and rst.effective_from == datetime(2026, 2, 1, tzinfo=UTC)
    assert rst.title == "Security handbook"
    csv = payloads["prices.csv"]
    assert isinstance(csv, UpsertPayload) and (csv.content_type, csv.title) == ("csv", "prices")


async def test_a_document_whose_event_would_not_fit_the_log_is_reported_too_large(tmp_path: Path) -> None:
    """Published, it would be refused by Kafka and stop every later scan; its ACL still moves."""
    from schemas.events import MAX_EVENT_BYTES
    from streams.kafka_admin import MAX_MESSAGE_BYTES

    assert MAX_EVENT_BYTES == MAX_MESSAGE_BYTES, "the connector's limit is what the log accepts"
    root = tmp_path / "drive"
    root.mkdir()
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (root / "big.csv").write_text("a,b\n" + "x,y\n" * 2000)
    (root / "small.md").write_text("# Small\n\nFits.\n")
    events: list[Event] = []
    state = ConnectorState(tmp_path / "state.db")
    report = await scan(DriveConnector(root, tenants=["acme"]), state, events.append, max_event_bytes=4000)
    assert [e.doc_id for e in events] == ["drive:small.md"]
    [skipped] = report.skipped
    assert (skipped.path, skipped.reason) == ("big.csv", "too large")
    assert skipped.detail.startswith("its text makes a ") and skipped.detail.endswith("-byte event, limit 4000")
    assert report.errors == [f"big.csv: too large to index: {skipped.detail}"]
    assert not report.deletes_skipped
