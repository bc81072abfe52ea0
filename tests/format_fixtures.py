"""Documents of every drive format, generated in the test run (no binary fixtures in the repository)."""

from __future__ import annotations

import io
from collections.abc import Sequence

from docx import Document
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from fpdf import FPDF

Section = tuple[str, int, Sequence[str]]  # (heading, level 0/1, paragraphs); a new page before each level-0/1 heading


class _Pdf(FPDF):
    def __init__(self, footer: str | None) -> None:
        super().__init__()
        self.footer_text = footer

    def footer(self) -> None:
        if self.footer_text:
            self.set_y(-15)
            self.set_font("Helvetica", "", 8)
            self.cell(0, 10, f"{self.footer_text} - page {self.page_no()}", align="C")


def make_pdf(
    pages: Sequence[Sequence[Section]],
    *,
    title: str | None = None,
    outline: bool = True,
    footer: str | None = "Acme internal",
    user_password: str | None = None,
    owner_password: str | None = None,
) -> bytes:
    """One list of sections per page; headings at 20 pt (level 0) or 15 pt (level 1), body 11 pt."""
    pdf = _Pdf(footer)
    if title:
        pdf.set_title(title)
    if user_password is not None or owner_password is not None:
        pdf.set_encryption(owner_password=owner_password or "owner", user_password=user_password or "")
    for sections in pages:
        pdf.add_page()
        for heading, level, paragraphs in sections:
            pdf.set_font("Helvetica", "B", 20 if level == 0 else 15)
            if outline:
                pdf.start_section(heading, level=level)
            pdf.cell(0, 12, heading, new_x="LMARGIN", new_y="NEXT")
            pdf.set_font("Helvetica", "", 11)
            for paragraph in paragraphs:
                pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(4)
    return bytes(pdf.output())


def scanned_pdf(pages: int = 2) -> bytes:
    """Pages with drawings and no text: what a scanner without OCR produces."""
    pdf = FPDF()
    for _ in range(pages):
        pdf.add_page()
        pdf.rect(20, 20, 120, 160, style="F")
    return bytes(pdf.output())


def make_docx(
    title: str | None,
    body: Sequence[tuple[str, str]],
    tables: dict[int, Sequence[Sequence[str]]] | None = None,
    core_title: str | None = None,
    header_row: bool = False,
) -> bytes:
    """`body`: (style, text) pairs, e.g. ("Heading 1", "Meals"), ("List Bullet", "..."), ("Normal", "...");
    `tables`: a table inserted after body item N (its first row is the header)."""
    doc = Document()
    if core_title:
        doc.core_properties.title = core_title
    if title:
        doc.add_paragraph(title, style="Title")
    for index, (style, text) in enumerate(body):
        doc.add_paragraph(text, style=style)
        for rows in [(tables or {}).get(index)]:
            if rows is None:
                continue
            table = doc.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, cell in enumerate(row):
                    table.cell(r, c).text = cell
            if header_row:
                tr_pr = table.rows[0]._tr.get_or_add_trPr()
                tr_pr.append(OxmlElement("w:tblHeader"))
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def set_outline_level(docx_bytes: bytes, text: str, level: int) -> bytes:
    """Give the paragraph reading `text` an outline level (what a localised heading style carries)."""
    doc = Document(io.BytesIO(docx_bytes))
    for paragraph in doc.paragraphs:
        if paragraph.text == text:
            p_pr = paragraph._p.get_or_add_pPr()
            outline = OxmlElement("w:outlineLvl")
            outline.set(qn("w:val"), str(level))
            p_pr.append(outline)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()
