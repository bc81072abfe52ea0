"""Numbers written in text by someone else (headers, IDs, CLI arguments): ASCII digits only.

`str.isdigit()` is true for '²', '١' or '５', and `int()` then either raises on them ('²': an
unauthenticated HTTP 500) or reads them as a number ('١' is 1, so "doc@١#a" would parse as the
passage "doc@1#a" although no passage is ever written that way). Every parse of such text goes
through here instead, so the only accepted form is the one ragsync itself writes.
"""

from __future__ import annotations


def ascii_uint(text: str, *, max_digits: int = 18) -> int | None:
    """The non-negative integer `text` spells in ASCII digits ('0'-'9', nothing else: no sign, space,
    underscore or other script), at most `max_digits` of them; None for anything else."""
    if not text or len(text) > max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)
