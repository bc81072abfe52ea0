"""A drive of PDF, DOCX, CSV and reST files, synced and asked through the CLI with the model loaded.

Each answer quotes its passage verbatim and says where in the file the quote is: the page of a PDF
(`#page=N` in the source URL, "page N" in the answer), the row of a CSV, the section of a DOCX or
reST file. Unreadable files are reported with their reason and do not stop the others.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import MODEL_PATH
from format_fixtures import make_docx, make_pdf, scanned_pdf

from indexer.text import normalize
from query.tokens import issue_token
from ragsync.cli import main
from schemas.principal import Principal

SECRET = "formats-secret"

TRAVEL = [
    [
        ("Travel policy", 0, ["This policy applies to every employee who travels for work."]),
        ("Rail", 1, ["Trains are preferred for trips under four hours."]),
    ],
    [("Hotel allowance", 1, ["The nightly hotel allowance is 180 euros in capital cities and 120 euros elsewhere."])],
    [("Meals abroad", 1, ["Dinner abroad is reimbursed up to 45 euros with a receipt."])],
]
EXPENSES = [
    ("Normal", "Read this before you submit an expense claim."),
    ("Heading 1", "Mileage"),
    ("Normal", "Private cars are reimbursed at 30 cents per kilometre driven on company business."),
    ("Heading 1", "Equipment"),
    ("Normal", "Equipment budgets per role:"),
]
BUDGETS = [
    ["Role", "Budget"],
    ["Engineer", "2500 euros every three years"],
    ["Designer", "3000 euros every three years"],
]
"""Rows of at least four words: a quote needs four, and a row is quoted without its header (query.sentences)."""
SUPPLIERS = (
    "Supplier,Contact,Payment terms\n"
    "Northwind Traders,orders@northwind.example,30 days net\n"
    "Contoso Paper,billing@contoso.example,60 days net\n"
    "Fabrikam Couriers,ops@fabrikam.example,14 days net\n"
)
RST = """\
Security handbook
=================

Laptops
-------

Every laptop is encrypted with a recovery key held by the IT service desk.

Visitors
--------

Visitors are escorted at all times and sign out at reception before they leave.
"""


def env(home: Path) -> dict[str, str]:
    return {"RAGSYNC_HOME": str(home), "RAGSYNC_EMBED_MODEL_PATH": str(MODEL_PATH), "RAGSYNC_SESSION_SECRET": SECRET}


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    if not (MODEL_PATH / "model.onnx").is_file():
        pytest.fail(
            f"no embedding model at {MODEL_PATH}: set RAGSYNC_EMBED_MODEL_PATH (the test runs with dense retrieval)"
        )
    tmp = tmp_path_factory.mktemp("formats")
    root = tmp / "drive"
    root.mkdir()
    (root / ".ragsync-acl.toml").write_text('tenant = "acme"\nread = ["group:staff"]\n')
    (root / "travel.pdf").write_bytes(make_pdf(TRAVEL, title="Travel policy"))
    (root / "expenses.docx").write_bytes(make_docx("Expenses handbook", EXPENSES, {4: BUDGETS}))
    (root / "suppliers.csv").write_text(SUPPLIERS)
    (root / "security.rst").write_text(RST)
    (root / "locked.pdf").write_bytes(make_pdf(TRAVEL, user_password="s3cret"))
    (root / "scan.pdf").write_bytes(scanned_pdf())
    (root / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    (root / "slides.pptx").write_bytes(b"PK\x03\x04")
    home = tmp / "home"
    out = CliRunner().invoke(main, ["sync", str(root), "--tenant", "acme", "--json"], env=env(home))
    assert out.exit_code == 3, out.output  # synced, with documents that could not be read
    return home, json.loads(out.stdout)


def ask(home: Path, question: str) -> dict[str, Any]:
    token = issue_token(SECRET, Principal(tenant="acme", user="ann", groups=("staff",)))
    out = CliRunner().invoke(main, ["ask", question, "--token", token, "--json"], env=env(home))
    assert out.exit_code == 0, out.output
    answer: dict[str, Any] = json.loads(out.stdout)
    assert answer["answered"], (question, answer)
    return answer


def cited(answer: dict[str, Any], needle: str) -> dict[str, Any]:
    claims = [c for c in answer["claims"] if needle in c["quote"]]
    assert claims, answer
    return claims[0]


def test_the_report_lists_what_was_not_indexed_and_why(synced: tuple[Path, dict[str, Any]]) -> None:
    _, report = synced
    assert report["upserts"] == 4 and report["dense"] is True
    assert report["passages_embedded"] == report["passages_written"] > 0
    reasons = {s["path"]: (s["reason"], s["detail"]) for s in report["skipped"]}
    assert reasons["slides.pptx"] == ("unsupported type", "")
    assert reasons["locked.pdf"][0] == "unreadable" and "needs a password" in reasons["locked.pdf"][1]
    assert reasons["scan.pdf"][0] == "unreadable" and reasons["scan.pdf"][1].startswith("no text layer")
    assert reasons["broken.docx"][0] == "unreadable" and "not a readable DOCX" in reasons["broken.docx"][1]
    assert sorted(e.split(":")[0] for e in report["errors"]) == ["broken.docx", "locked.pdf", "scan.pdf"]
    assert report["deletes_skipped"] is False


def test_a_pdf_answer_quotes_its_page(synced: tuple[Path, dict[str, Any]]) -> None:
    home, _ = synced
    claim = cited(ask(home, "What is the nightly hotel allowance in capital cities?"), "180 euros")
    assert normalize(claim["quote"]) in normalize(TRAVEL[1][0][2][0])
    assert claim["source_url"] == "travel.pdf#page=2" and claim["location"] == "page 2"
    assert claim["passage_id"].startswith("drive:travel.pdf@1#travel-policy-hotel-allowance-")
    claim = cited(ask(home, "How much is dinner abroad reimbursed?"), "45 euros")
    assert claim["location"] == "page 3"


def test_a_docx_answer_quotes_its_section_and_table_row(synced: tuple[Path, dict[str, Any]]) -> None:
    home, _ = synced
    claim = cited(ask(home, "How much are private cars reimbursed per kilometre?"), "30 cents per kilometre")
    assert normalize(claim["quote"]) in normalize(EXPENSES[2][1])
    assert claim["passage_id"].startswith("drive:expenses.docx@1#expenses-handbook-mileage-")
    assert claim["location"] is None and claim["source_url"] == "expenses.docx"
    claim = cited(ask(home, "What is the equipment budget for a designer?"), "Designer")
    assert "3000 euros" in claim["quote"]


def test_a_csv_answer_quotes_its_row(synced: tuple[Path, dict[str, Any]]) -> None:
    home, _ = synced
    claim = cited(ask(home, "What are the payment terms for Contoso Paper?"), "Contoso Paper")
    assert "60 days net" in claim["quote"]
    assert claim["source_url"] == "suppliers.csv#row=3" and claim["location"] == "row 3"


def test_a_rst_answer_quotes_its_section(synced: tuple[Path, dict[str, Any]]) -> None:
    home, _ = synced
    claim = cited(ask(home, "Who holds the laptop recovery key?"), "recovery key")
    assert normalize(claim["quote"]) in normalize(RST)
    assert claim["passage_id"].startswith("drive:security.rst@1#security-handbook-laptops-")


def test_the_text_answer_says_the_page(synced: tuple[Path, dict[str, Any]]) -> None:
    home, _ = synced
    token = issue_token(SECRET, Principal(tenant="acme", user="ann", groups=("staff",)))
    out = CliRunner().invoke(main, ["ask", "What is the nightly hotel allowance?", "--token", token], env=env(home))
    assert out.exit_code == 0, out.output
    assert "travel.pdf#page=2  (page 2)" in out.output


def test_fixing_an_unreadable_file_indexes_it_and_leaves_the_others_unchanged(
    synced: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    home, _ = synced
    root = home.parent / "drive"
    (root / "locked.pdf").write_bytes(
        make_pdf([[("Parking", 0, ["Parking at airports is reimbursed for up to five days."])]])
    )
    out = CliRunner().invoke(main, ["sync", str(root), "--tenant", "acme", "--json"], env=env(home))
    report = json.loads(out.stdout)
    assert report["upserts"] == 1 and report["unchanged"] == 4, report
    claim = cited(ask(home, "How many days of airport parking are reimbursed?"), "five days")
    assert claim["source_url"] == "locked.pdf#page=1"
