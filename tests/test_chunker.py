"""Chunker behaviour: structure first, size second, stable anchors."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from indexer.chunker import CHUNKER_VERSION, Chunk, chunk_document

ANCHOR = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
PY_DOCS = Path("/usr/share/doc/python3.11/html")


def by_text(chunks: list[Chunk], needle: str) -> Chunk:
    found = [c for c in chunks if needle in c.text]
    assert len(found) == 1, f"{needle!r} in {len(found)} chunks: {chunks}"
    return found[0]


def assert_well_formed(chunks: list[Chunk], max_chars: int) -> None:
    anchors = [c.anchor for c in chunks]
    assert len(anchors) == len(set(anchors)), anchors
    for chunk in chunks:
        assert ANCHOR.match(chunk.anchor), chunk.anchor
        assert chunk.text.strip(), chunk
        assert len(chunk.text) <= max_chars, (len(chunk.text), chunk.anchor)


MARKDOWN = """---
title: Refunds
effective_from: 2026-01-01
---
# Refund policy

Customers may return goods within 30 days of delivery.

Refunds go back to the original payment method.

## Exceptions

Exceptions:

- Digital goods are not refundable once downloaded.
- Sale items:
  - final-sale items are never refunded
  - clearance items get store credit
- Gift cards.

### Regional rules

| Region | Window | Notes |
|--------|--------|-------|
| EU     | 14 days | statutory |
| US     | 30 days |  |

## Process

```python
def refund(order):

    return order.total
```

# Contact

Write to support.
"""


def test_version_is_declared() -> None:
    assert CHUNKER_VERSION == "structure-v5"


def test_markdown_structure() -> None:
    chunks = chunk_document(MARKDOWN, "markdown")
    assert_well_formed(chunks, 1000)
    texts = "\n".join(c.text for c in chunks)
    assert "effective_from" not in texts and "title: Refunds" not in texts

    intro = chunks[0]
    assert intro.heading_path == ("Refund policy",)
    assert intro.text == (
        "Customers may return goods within 30 days of delivery.\n\nRefunds go back to the original payment method."
    )

    digital = by_text(chunks, "Digital goods")
    assert digital.heading_path == ("Refund policy", "Exceptions")
    assert digital.text == "Exceptions:\nDigital goods are not refundable once downloaded."
    sale = by_text(chunks, "Sale items")
    assert sale.text == (
        "Exceptions:\nSale items:\n- final-sale items are never refunded\n- clearance items get store credit"
    )
    assert by_text(chunks, "Gift cards").text == "Exceptions:\nGift cards."
    assert not [c for c in chunks if c.text == "Exceptions:"], "the lead-in is not a passage of its own"

    eu = by_text(chunks, "EU")
    assert eu.heading_path == ("Refund policy", "Exceptions", "Regional rules")
    assert eu.text == "| Region | Window | Notes |\n| EU | 14 days | statutory |"
    assert by_text(chunks, "US").text == "| Region | Window | Notes |\n| US | 30 days |  |"

    code = by_text(chunks, "def refund")
    assert code.heading_path == ("Refund policy", "Process")
    assert code.text == "def refund(order):\n\n    return order.total"

    contact = by_text(chunks, "Write to support")
    assert contact.heading_path == ("Contact",)


def test_markdown_heading_path_after_going_back_up() -> None:
    md = "# A\n\na\n\n## B\n\nb\n\n### C\n\nc\n\n## D\n\nd\n\n#### E\n\ne\n\n# F\n\nf\n"
    paths = {c.text: c.heading_path for c in chunk_document(md, "markdown")}
    assert paths == {
        "a": ("A",),
        "b": ("A", "B"),
        "c": ("A", "B", "C"),
        "d": ("A", "D"),
        "e": ("A", "D", "E"),
        "f": ("F",),
    }


def test_markdown_items_and_rows_are_never_merged_but_paragraphs_are() -> None:
    md = "# S\n\none.\n\ntwo.\n\n- x\n- y\n\n| h |\n|---|\n| 1 |\n| 2 |\n\nthree.\n\n# T\n\nfour.\n"
    texts = [c.text for c in chunk_document(md, "markdown")]
    assert texts == ["one.\n\ntwo.", "x", "y", "| h |\n| 1 |", "| h |\n| 2 |", "three.", "four."]


def test_table_rows_are_quotable_from_the_markdown_source() -> None:
    md = (
        "Fees per plan:\n\n| Plan   | Fee (EUR) | Notes |\n|:-------|----------:|-------|\n"
        "| Basic  | 10        | a \\| b |\n| Pro    | 50        | `x`   |\n\n"
        "- Item with a table:\n\n  | k | v |\n  |---|---|\n  | a | 1 |\n"
    )
    chunks = chunk_document(md, "markdown")
    assert [c.text for c in chunks] == [
        "Fees per plan:\n| Plan | Fee (EUR) | Notes |\n| Basic | 10 | a \\| b |",
        "Fees per plan:\n| Plan | Fee (EUR) | Notes |\n| Pro | 50 | x |",
        "Item with a table:\n| k | v |\n| a | 1 |",
    ]
    flat_source = " ".join(md.split())
    basic_row = chunks[0].text.splitlines()[-1]
    assert " ".join(basic_row.split()) in flat_source


def test_oversized_table_row_repeats_its_header() -> None:
    md = "| Name | Description |\n|---|---|\n| alpha | " + "Long words here. " * 20 + "|\n"
    chunks = chunk_document(md, "markdown", max_chars=120)
    assert_well_formed(chunks, 120)
    assert len(chunks) > 2 and all(c.text.startswith("| Name | Description |\n") for c in chunks)


def test_long_lead_in_is_kept_as_its_own_passage() -> None:
    lead = "This paragraph is long and merely happens to precede the list, " * 5 + "as follows:"
    md = f"{lead}\n\n- alpha\n- beta\n"
    texts = [c.text for c in chunk_document(md, "markdown", max_chars=400)]
    assert texts == [lead, "alpha", "beta"]


HTML = """<!doctype html><html><head><title>Guide</title>
<script>document.write("<p>script text</p>")</script><style>p { color: red }</style></head>
<body>
<nav><p>Home | Products</p></nav>
<header><p>Site banner</p></header>
<div role="navigation"><p>Side menu</p></div>
<h1>Guide &amp; Manual<a class="headerlink" href="#g">¶</a></h1>
<p>Intro    text
   with &lt;entities&gt; &eacute;t&eacute;.</p>
<section id="setup"><h2>Setup</h2>
  <p>Install it.</p>
  <p>Exceptions:</p>
  <ul><li>Windows<ul><li>needs admin</li></ul></li><li>macOS</ul>
  <ol><li>Download<li>Run</ol>
  <section><h3>Proxy</h3><p>Set HTTPS_PROXY.</p></section>
  <p>Back in setup.</p>
</section>
<section><h2>Limits</h2>
<table><thead><tr><th>Plan</th><th>Seats</th></tr></thead>
<tbody><tr><td>Basic</td><td>5</td></tr><tr><td>Pro<td>50</tbody></table>
<dl><dt>timeout</dt><dd><p>Seconds to wait.</p></dd><dt>retries</dt><dt>tries</dt><dd>How often to retry.</dd></dl>
<pre>  indented
     code   here</pre>
<blockquote><p>Quoted one.</p><p>Quoted two.</p></blockquote>
</section>
<footer><p>Copyright</p></footer>
</body></html>"""


def test_html_structure() -> None:
    chunks = chunk_document(HTML, "html")
    assert_well_formed(chunks, 1000)
    texts = "\n".join(c.text for c in chunks)
    for ignored in ("script text", "color", "Home", "Site banner", "Side menu", "Copyright", "Guide\n"):
        assert ignored not in texts

    intro = chunks[0]
    assert intro.heading_path == ("Guide & Manual",)
    assert intro.text == "Intro text with <entities> été."

    assert by_text(chunks, "Install it").heading_path == ("Guide & Manual", "Setup")
    assert by_text(chunks, "Windows").text == "Exceptions:\nWindows\n- needs admin"
    assert by_text(chunks, "macOS").text == "Exceptions:\nmacOS"
    assert by_text(chunks, "Download").text == "1. Download"
    assert by_text(chunks, "Run").text == "2. Run"
    assert by_text(chunks, "HTTPS_PROXY").heading_path == ("Guide & Manual", "Setup", "Proxy")
    back = by_text(chunks, "Back in setup")
    assert back.heading_path == ("Guide & Manual", "Setup")
    assert back.text == "Back in setup.", "a section boundary ends the passage"

    assert by_text(chunks, "Basic").text == "| Plan | Seats |\n| Basic | 5 |"
    assert by_text(chunks, "Pro").text == "| Plan | Seats |\n| Pro | 50 |"
    assert by_text(chunks, "Pro").heading_path == ("Guide & Manual", "Limits")
    assert by_text(chunks, "timeout").text == "timeout\nSeconds to wait."
    assert by_text(chunks, "retries").text == "retries\ntries\nHow often to retry."
    code = by_text(chunks, "indented")
    assert code.text.startswith("  indented\n     code   here")
    assert "Quoted one.\nQuoted two." in by_text(chunks, "Quoted one").text


def test_html_prefers_sphinx_main_content_and_survives_bad_markup() -> None:
    page = """<html><body><div class="sphinxsidebar"><h3>Table of contents</h3><p>toc</p></div>
    <div class="document"><div class="body" role="main"><section id="x"><h1>Title<a class="headerlink">¶</a></h1>
    <p>Body <b>text<p>second</i> paragraph</div></div>
    <div class="footer-ish"><p>after main</p></div></body></html>"""
    chunks = chunk_document(page, "html")
    assert [(c.heading_path, c.text) for c in chunks] == [(("Title",), "Body text\n\nsecond paragraph")]

    broken = "<div><p>unclosed <span>spans <li>stray item</td></tr> text &amp more <h2>Late"
    chunks = chunk_document(broken, "html")
    assert "unclosed spans" in chunks[0].text
    assert any("stray item" in c.text for c in chunks)


def test_html_nested_api_definitions_get_their_own_passages_with_context() -> None:
    page = """<dl class="py class"><dt id="Deque">class Deque(items)</dt><dd><p>A queue.</p>
    <dl class="field-list"><dt>Parameters</dt><dd>items - the initial items</dd></dl>
    <dl class="py method"><dt id="Deque.pop">pop()</dt><dd><p>Remove the last item.</p></dd></dl>
    <p>Deques are thread-safe.</p></dd></dl>"""
    texts = [c.text for c in chunk_document(page, "html")]
    assert texts == [
        "class Deque(items)\nA queue.\nParameters\nitems - the initial items\nDeques are thread-safe.",
        "class Deque(items)\npop()\nRemove the last item.",
    ]


def test_long_paragraph_splits_at_sentence_boundaries() -> None:
    # No two neighbours fit in 60 chars together, so each sentence is one chunk; a wrong cut after
    # "e.g." would pack "Python 3.11 is fast. Linters, e.g." into the first chunk.
    sentences = [
        "Python 3.11 is fast.",
        "Linters, e.g. Ruff and Flake8, catch bugs early.",
        "The old API, i.e. Version 2, is deprecated now.",
        "See the chart in Fig. 3 for the numbers!",
        "Requires at least version 3.11.",
        "Then run the installer from the terminal.",
    ]
    chunks = chunk_document(" ".join(sentences), "text", max_chars=60)
    assert [c.text for c in chunks] == sentences

    text = " ".join(sentences * 6)
    chunks = chunk_document(text, "text", max_chars=150)
    assert_well_formed(chunks, 150)
    assert " ".join(c.text for c in chunks) == text
    assert all(any(c.text.startswith(s) for s in sentences) for c in chunks)
    assert len(chunks) < 36, "short sentences are packed together up to max_chars"


def test_long_sentence_splits_at_words_and_long_words_hard() -> None:
    sentence = " ".join(f"word{i}" for i in range(60))
    chunks = chunk_document(sentence + " " + "x" * 130, "text", max_chars=50)
    assert_well_formed(chunks, 50)
    assert all(re.fullmatch(r"(word\d+ ?)+|x+", c.text) for c in chunks), chunks
    assert "".join(c.text for c in chunks).replace(" ", "") == (sentence + "x" * 130).replace(" ", "")


def test_oversized_code_splits_by_lines_and_items_keep_their_lead_in() -> None:
    code = "\n".join(f"line_{i} = {i}" for i in range(40))
    md = f"```\n{code}\n```\n\nSteps:\n\n- " + "Do this carefully. " * 20 + "\n"
    chunks = chunk_document(md, "markdown", max_chars=100)
    assert_well_formed(chunks, 100)
    code_chunks = [c for c in chunks if c.text.startswith("line_")]
    assert len(code_chunks) > 1
    assert "\n".join(c.text for c in code_chunks) == code
    items = [c for c in chunks if "Do this" in c.text]
    assert len(items) > 1 and all(c.text.startswith("Steps:\nDo this carefully.") for c in items)


def test_anchors_unique_stable_and_url_safe() -> None:
    md = (
        "Preamble.\n\n# Setup\n\nA.\n\n## Examples\n\nB.\n\n# Usage\n\n## Examples\n\nC.\n\n- i1\n- i2\n\n"
        "# Setup\n\nD.\n\n# Examples 2\n\nE.\n\n# Überblick & *Ziele*\n\nF.\n\n# " + "Long " * 30 + "\n\nG.\n"
    )
    first = chunk_document(md, "markdown")
    assert first == chunk_document(md, "markdown")
    assert_well_formed(first, 1000)
    anchors = {c.text: c.anchor for c in first}
    assert anchors["Preamble."] == "root-1"
    assert anchors["A."] == "setup-1"
    assert anchors["B."] == "setup-examples-1"
    assert anchors["C."] == "usage-examples-1"
    assert anchors["i1"] == "usage-examples-2"
    assert anchors["i2"] == "usage-examples-3"
    assert anchors["D."] == "setup-2-1", "a second section with the same slug gets a suffix"
    assert anchors["E."] == "examples-2-1"
    assert anchors["F."] == "uberblick-ziele-1"
    long_anchor = anchors["G."]
    assert long_anchor.endswith("-1") and len(long_anchor.rsplit("-", 1)[0]) <= 60


def test_anchor_dedupe_never_collides_with_a_literal_heading() -> None:
    md = "# X\n\na\n\n# X\n\nb\n\n# X 2\n\nc\n\n# X\n\nd\n"
    chunks = chunk_document(md, "markdown")
    assert_well_formed(chunks, 1000)
    assert [c.anchor for c in chunks] == ["x-1", "x-2-1", "x-2-2-1", "x-3-1"]


def test_text_paragraphs_merge_and_title_line_becomes_heading() -> None:
    text = "Refund policy\n\nFirst para.\n\n  \nSecond para\nwith two lines.\n\n" + "Long. " * 30
    chunks = chunk_document(text, "text", max_chars=100, title="Refund Policy")
    assert chunks[0].heading_path == ("Refund policy",)
    assert chunks[0].text == "First para.\n\nSecond para\nwith two lines."
    assert chunks[0].anchor == "refund-policy-1"
    assert_well_formed(chunks, 100)
    untitled = chunk_document(text, "text", max_chars=100)[0]
    assert untitled.heading_path == ()
    assert untitled.text.startswith("Refund policy\n\nFirst para.")


def test_empty_and_whitespace_documents() -> None:
    assert chunk_document("", "markdown") == []
    assert chunk_document("  \n\n ", "text") == []
    assert chunk_document("<html><body><script>x</script></body></html>", "html") == []
    with pytest.raises(ValueError):
        chunk_document("x", "pdf")  # type: ignore[arg-type]


@pytest.mark.skipif(not (PY_DOCS / "library/functions.html").exists(), reason="python3.11-doc not installed")
def test_real_python_docs_page() -> None:
    page = (PY_DOCS / "library/functions.html").read_text(encoding="utf-8")
    chunks = chunk_document(page, "html", max_chars=1000)
    assert_well_formed(chunks, 1000)
    assert len(chunks) > 50
    assert {c.heading_path for c in chunks} == {("Built-in Functions",)}
    abs_chunk = next(c for c in chunks if c.text.startswith("abs(x)\n"))
    assert "absolute value" in abs_chunk.text
    assert "¶" not in "".join(c.text for c in chunks)
    assert not any("Navigation" in c.text or "Table of Contents" in c.text for c in chunks)
    opens = [c for c in chunks if c.text.startswith("open(file, mode='r'")]
    assert len(opens) > 3, "open()'s long description is split, each piece keeps the signature"

    page = (PY_DOCS / "library/collections.html").read_text(encoding="utf-8")
    chunks = chunk_document(page, "html")
    append = next(c for c in chunks if "\nappend(x)\n" in c.text)
    assert append.text.startswith("class collections.deque(")
    assert append.heading_path == ("collections — Container datatypes", "deque objects")


@pytest.mark.slow
@pytest.mark.skipif(not PY_DOCS.exists(), reason="python3.11-doc not installed")
def test_chunk_whole_python_docs_tree(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(PY_DOCS.rglob("*.html"))
    pages = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    started = time.perf_counter()
    total = 0
    for page in pages:
        chunks = chunk_document(page, "html")
        assert_well_formed(chunks, 1000)
        total += len(chunks)
    elapsed = time.perf_counter() - started
    megabytes = sum(len(p) for p in pages) / 1e6
    with capsys.disabled():
        print(
            f"\nchunked {len(files)} pages ({megabytes:.1f} MB) into {total} chunks in {elapsed:.1f}s "
            f"({megabytes / elapsed:.1f} MB/s)"
        )


def test_a_definition_term_starts_the_passage_of_its_body_when_a_long_definition_is_cut() -> None:
    # AsciiDoc's git-reset(1): the modes are a definition list inside the definition of
    # "git reset [<mode>]"; cut by size, "--hard" ended one passage and its body began the next.
    body = "Resets the index and the working tree to the named commit, discarding every change."
    page = f"""<dl><dt>git reset [&lt;mode&gt;]</dt><dd><p>Resets the head. The mode is one of:</p>
    <dl><dt>--soft</dt><dd><p>Touches neither the index nor the working tree, only the head.</p></dd>
    <dt>--mixed</dt><dd><p>Resets the index but not the working tree at all.</p></dd>
    <dt>--hard</dt><dd><p>{body}</p></dd>
    <dt>--merge</dt><dt>-m</dt><dd><p>Keeps what differs between the index and the working tree.</p></dd>
    </dl></dd></dl>"""
    chunks = chunk_document(page, "html", max_chars=240)
    assert_well_formed(chunks, 240)
    for term, first_line in (
        ("--hard", body),
        ("--soft", "Touches neither"),
        ("--mixed", "Resets the index but not"),
        ("-m", "Keeps what differs"),
    ):
        (holder,) = [c for c in chunks if first_line in c.text]
        lines = holder.text.split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith(first_line))
        assert lines[at - 1] == term, (term, holder.text)
        assert lines[0] == "git reset [<mode>]", "the enclosing term is still repeated on each piece"
    ends = [c.text.split("\n")[-1] for c in chunks]
    assert not {"--soft", "--mixed", "--hard", "--merge", "-m"} & set(ends), ends
    # the whole definition fits at the default size: one passage, exactly as before
    (whole,) = chunk_document(page, "html")
    assert whole.text.split("\n")[:4] == [
        "git reset [<mode>]",
        "Resets the head. The mode is one of:",
        "--soft",
        "Touches neither the index nor the working tree, only the head.",
    ]
