"""Every text path is linear in its input (issue 8 item 7).

No timings are asserted: each input below took minutes to hours with the quadratic code (a 1 MB
file of dots ran for hours in the sentence splitter; 200 KB of "<!--" or "<a " took minutes in the
HTML paths) and takes well under a second now, so the timeout only catches a return to quadratic.
"""

from __future__ import annotations

import pytest

from connectors.base import content_metadata
from indexer.chunker import chunk_document, split_sentences
from indexer.text import html_for_parser
from query.extractive import sentences

MB = 1_000_000


@pytest.mark.timeout(20)
@pytest.mark.parametrize("content_type", ["markdown", "html", "text"])
def test_a_megabyte_of_dots_chunks(content_type: str) -> None:
    dots = "." * MB
    chunks = chunk_document(dots, content_type)  # type: ignore[arg-type]
    assert "".join(c.text for c in chunks) == dots  # cut by characters, nothing lost
    assert split_sentences(dots) == [dots]
    assert content_metadata(content_type, dots).effective_from is None  # type: ignore[arg-type]


@pytest.mark.timeout(20)
def test_sentence_cuts_with_no_spaces_are_linear() -> None:
    text = "Word.\nNext" * (MB // 10)  # every cut's word lookup used to scan back to the start
    assert len(split_sentences(text)) == MB // 10 + 1
    assert len(sentences("It works well here. " * (MB // 20))) == MB // 20


ADVERSARIAL = ["<!--", "<a ", "<a b='", "<div class=x ", '<span "', "</", "<?", "<div>\n<x"]
"""`"<a "*N + ">"` and `"<div>\n<x"*N + ">"` were still quadratic in the HTML reader: removing link tags
left the last "<a " open for HTMLParser to rescan, and 20,000 unclosed <div>s overflowed a recursive walk."""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("unit", "content_type"), [(u, t) for t in ("markdown", "html") for u in ADVERSARIAL])
def test_unclosed_markup_is_linear(unit: str, content_type: str) -> None:
    text = unit * (200_000 // len(unit)) + ">"
    chunk_document(text, content_type)  # type: ignore[arg-type]
    content_metadata(content_type, text)  # type: ignore[arg-type]


def test_unclosed_tags_before_real_content_leave_the_content() -> None:
    """Tags named "x<div" (HTMLParser reads "<x<div>" so) hide nothing that follows them."""
    chunks = chunk_document("<div>\n<x" * 3 + "<p>After the divs.</p>", "html")
    assert [c.text for c in chunks] == ["After the divs."]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("content_type", ["csv", "tsv", "rst"])
@pytest.mark.parametrize(
    "unit", [".", "a,", '"', "a\t", "* x\n", "x\n=\n", ":a: b\n", "`a <", "| a |\n", "<a "], ids=repr
)
def test_the_new_text_formats_read_anything_linearly(content_type: str, unit: str) -> None:
    """docutils is linear but slow (~40 µs a line, parsed by the connector and by the indexer): 40 KB of reST."""
    size = 40_000 if content_type == "rst" else 100_000
    text = unit * (size // len(unit))
    chunks = chunk_document(text, content_type)  # type: ignore[arg-type]
    assert all(len(c.text) <= 1000 for c in chunks)
    content_metadata(content_type, text)  # type: ignore[arg-type]


def test_html_for_parser_keeps_what_a_browser_would_show() -> None:
    assert html_for_parser("<p>a</p><!-- never closed <p>b</p>") == "<p>a</p>"
    assert html_for_parser("<p>a</p><!-- x --><p>b") == "<p>a</p><!-- x --><p>b"
    assert html_for_parser("<p>1 < 2 and <b") == "<p>1 &lt; 2 and &lt;b"
    assert html_for_parser("<p>ok</p>") == "<p>ok</p>"
    [chunk] = chunk_document("<p>1 < 2 and <b", "html")
    assert chunk.text == "1 < 2 and <b"
