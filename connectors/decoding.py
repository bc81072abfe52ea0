"""Bytes to text for every connector: UTF-8 first, else a detected encoding (reported), else binary.

Issue 13 item 2: decoding with errors="replace" indexed Latin-1 files as "caf� Cr�me br�l�e" and
300 random bytes as an upsert, so questions about them abstained and garbage sat in the index. Now
nothing is indexed with replacement characters silently: UTF-8 (a BOM is dropped) decodes as is;
otherwise charset-normalizer proposes an encoding, taken only when the text it gives has no
control characters a text file would not hold (random bytes fail this: ~12% of them are C0);
otherwise the file is refused as binary. Short samples often score several single-byte code pages
equally; the tie goes to the Western ones (cp1252 is what Windows editors write), in that order.
"""

from __future__ import annotations

import codecs
import re

import charset_normalizer

from schemas.errors import BinaryContent as BinaryContent  # re-export (schemas.errors)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_PREFERRED = ("utf_8", "cp1252", "latin_1", "iso8859_15", "utf_16", "utf_32")
_TIE = 0.01


def decode_text(data: bytes) -> tuple[str, str | None]:
    """(text, the encoding detected, or None for UTF-8). Raises BinaryContent."""
    body = data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        if not _CONTROL.search(text):
            return text, None
        raise BinaryContent("binary content (control bytes in UTF-8), not indexed")
    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        raise BinaryContent("binary content (no text encoding fits), not indexed")
    best_chaos = min(m.chaos for m in matches)
    close = [m for m in matches if m.chaos <= best_chaos + _TIE]

    def rank(m: charset_normalizer.CharsetMatch) -> int:
        names = [m.encoding, *m.could_be_from_charset]
        return min((_PREFERRED.index(n) for n in names if n in _PREFERRED), default=len(_PREFERRED))

    chosen = min(close, key=rank)
    encoding = next((n for n in _PREFERRED if n in (chosen.encoding, *chosen.could_be_from_charset)), chosen.encoding)
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        encoding, text = chosen.encoding, str(chosen)
    text = text.removeprefix("\ufeff")
    if _CONTROL.search(text) or "\ufffd" in text:
        raise BinaryContent(f"binary content (not text, even as {encoding}), not indexed")
    return text, encoding
