"""Lead-ins, sizing and merging: structural units become passages no longer than max_chars."""

from __future__ import annotations

from indexer.chunking.sentences import pack, split_part
from indexer.chunking.units import LEAD_TARGETS, MERGEABLE, Piece, Unit, span, too_amplified

_LEAD_IN_MAX_FRACTION = 4


def apply_lead_ins(units: list[Unit], max_chars: int) -> list[Unit]:
    out: list[Unit] = []
    lead: tuple[int, str] | None = None
    for i, unit in enumerate(units):
        if lead is not None and unit.group == lead[0] and unit.kind in LEAD_TARGETS:
            unit.prefix.insert(0, lead[1])
            out.append(unit)
            continue
        lead = None
        nxt = units[i + 1] if i + 1 < len(units) else None
        if (
            unit.kind == "para"
            and len(unit.parts) == 1
            and nxt is not None
            and nxt.kind in LEAD_TARGETS
            and nxt.block == unit.block
        ):
            text = unit.parts[0][0].strip()
            if text.endswith(":") and len(text) <= max_chars // _LEAD_IN_MAX_FRACTION:
                lead = (nxt.group, text)
                continue
        out.append(unit)
    return out


def size(units: list[Unit], max_chars: int, limit: int | None = None) -> list[Piece]:
    """Pieces of at most max_chars; Unchunkable once their text passes `limit` characters.

    A unit's prefix (a table's header, a lead-in) is repeated on each of its pieces and a header on
    every row, so the passages can hold many times the document's text: 10 MB of one-character CSV
    rows under a 300-character header would make 1.5 GB of them. `limit` stops that as it happens,
    holding at most one unit past it in memory.
    """
    pieces: list[Piece] = []
    total = 0
    for unit in units:
        parts = [(t, code, i in unit.glued) for i, (t, code) in enumerate(unit.parts) if t.strip()]
        prefix = "\n".join(p for p in unit.prefix if p)
        body = "\n".join(t for t, _, _ in parts)
        whole = f"{prefix}\n{body}" if prefix and body else prefix or body
        if len(whole) <= max_chars:
            texts = [whole]
        else:
            if prefix and len(prefix) <= max_chars // 3:
                budget = max_chars - len(prefix) - 1
            else:
                parts = [(p, False, False) for p in unit.prefix if p] + parts
                prefix, budget = "", max_chars
            packed = pack(_segments(parts, budget), "\n", budget)
            texts = [f"{prefix}\n{p}" if prefix else p for p in packed]
        for text in texts:
            if text.strip():
                piece = Piece(unit.kind, unit.heading_path, unit.heading_id, unit.block, text, unit.locus, unit.aside)
                pieces.append(piece)
                total += len(text)
        if limit is not None and total > limit:
            raise too_amplified(limit)
    return pieces


def _segments(parts: list[tuple[str, bool, bool]], budget: int) -> list[str]:
    """The parts cut to fit `budget`; a glued part (a definition's term) is joined to the first
    segment after it, so a cut never leaves a term at the end of one piece and its body in the next."""
    out: list[str] = []
    carry = ""
    for text, code, glued in parts:
        segs = split_part(text, code, budget)
        if carry:
            if len(carry) + 1 + len(segs[0]) <= budget:
                segs[0] = f"{carry}\n{segs[0]}"
            else:
                out.append(carry)
            carry = ""
        if glued:
            carry = segs.pop()
        out.extend(segs)
    if carry:
        out.append(carry)
    return out


def merge(pieces: list[Piece], max_chars: int) -> list[Piece]:
    """Small neighbouring paragraphs become one passage; items, rows and definitions stay citable alone."""
    out: list[Piece] = []
    for piece in pieces:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.kind in MERGEABLE
            and piece.kind in MERGEABLE
            and prev.block == piece.block
            and prev.heading_id == piece.heading_id
            and len(prev.text) + 2 + len(piece.text) <= max_chars
        ):
            prev.text = f"{prev.text}\n\n{piece.text}"
            prev.locus = span(prev.locus, piece.locus)
        else:
            out.append(piece)
    return out
