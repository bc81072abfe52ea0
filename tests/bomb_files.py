"""Hostile files of every drive format, generated in the run (issue 18): each one is small on disk and
costs a naive reader minutes or gigabytes. Shared by the tests and bench/bombs.py."""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

_DOCX_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    "</Types>"
)
_DOCX_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="word/document.xml"/></Relationships>'
)
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def docx_bomb(expanded_bytes: int = 450 * 1024 * 1024) -> bytes:
    """A valid DOCX whose word/document.xml expands to `expanded_bytes` of tiny paragraphs (~1.5 MB
    on disk for 450 MB), under the package's 512 MiB expansion cap: it passes every size check."""
    paragraph = b"<w:p><w:r><w:t>Lorem ipsum dolor sit amet.</w:t></w:r></w:p>"
    head = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="{_W}"><w:body>'.encode()
    tail = b"</w:body></w:document>"
    block = paragraph * (1 << 14)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as package:
        package.writestr("[Content_Types].xml", _DOCX_TYPES)
        package.writestr("_rels/.rels", _DOCX_RELS)
        with package.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(head)
            written = len(head) + len(tail)
            while written + len(block) <= expanded_bytes:
                part.write(block)
                written += len(block)
            part.write(tail)
    return out.getvalue()


def pdf_operators_bomb(operators: int = 150_000, pages: int = 1) -> bytes:
    """A PDF whose content stream shows `operators` short strings, each at a text matrix of its own:
    pypdf spends ~0.15-0.3 ms on each (150k: 20-60 s on two shared cores) in a 29 KB file. pypdf's own
    per-stream limit (2M tokens) stops one stream at ~250k operators, so more work takes `pages`
    pages, all showing the same stream: N times the time, not one byte more per page."""
    body = b"BT /F1 9 Tf " + b"".join(b"1 0 0 1 %d 800 Tm (ab) Tj " % (i % 500) for i in range(operators)) + b"ET"
    stream = zlib.compress(body, 9)
    kids = b" ".join(b"%d 0 R" % (5 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 3 0 R >>"
    ] * pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + obj + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def nested_html(depth: int = 200_000, closed: bool = False) -> bytes:
    """`depth` nested <div>s around one sentence (2 MB for 200k), left open unless `closed`."""
    text = "<html><body>" + "<div>" * depth + "<p>The deepest sentence.</p>"
    if closed:
        text += "</div>" * depth
    return (text + "</body></html>").encode()


def deep_rst_list(depth: int = 2000) -> bytes:
    """A bullet list nested `depth` deep, each item two columns further in (3.9 MB for 2,000)."""
    lines = [f"{'  ' * level}- item {level}\n\n" for level in range(depth)]
    return ("Deep\n====\n\n" + "".join(lines)).encode()


def one_line_csv(size: int = 9 * 1024 * 1024) -> bytes:
    """A header and one record on a single line each, `size` bytes in all: over half a million columns."""
    cells = size // 2 // 8
    header = ",".join(f"c{i:06d}" for i in range(cells))
    record = ",".join("v" * 7 for _ in range(cells))
    return f"{header}\n{record}\n".encode()


def one_line_text(size: int = 9 * 1024 * 1024) -> bytes:
    """One line of `size` bytes without a sentence end or a space: words and sentences cannot cut it."""
    return b"x" * size


@dataclass(frozen=True)
class RestrictedFolder:
    """The drive a hostile file shares with a revocation: the tenant's root readable by staff, one folder
    granted by the root's manifest ([folders]) to its readers and to the one group that keeps it, its own
    manifest reading `readers`, one document in it, and an ordinary document beside it. `narrow` is the
    revocation: the folder's manifest keeps only `kept_by`."""

    folder: str  # under acme/
    readers: tuple[str, ...]
    kept_by: str
    document: str  # file name in the folder
    text: str

    def write(self, root: Path) -> Path:
        granted = ", ".join(f'"{entry}"' for entry in (*self.readers, self.kept_by))
        readers = ", ".join(f'"{entry}"' for entry in self.readers)
        files = {
            "acme/.ragsync-acl.toml": (
                f'tenant = "acme"\nread = ["group:staff"]\n\n[folders."{self.folder}"]\nread = [{granted}]\n'
            ),
            f"acme/{self.folder}/.ragsync-acl.toml": f"read = [{readers}]\n",
            f"acme/{self.folder}/{self.document}": self.text,
            "acme/refunds.md": "# Refunds\n\nRefunds are paid within 14 days.\n",
        }
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    def narrow(self, root: Path) -> None:
        (root / f"acme/{self.folder}/.ragsync-acl.toml").write_text(f'read = ["{self.kept_by}"]\n')

    @property
    def path(self) -> str:
        return f"acme/{self.folder}/{self.document}"
