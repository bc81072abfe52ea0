"""Stable anchors: `<section slug>-<ordinal>`, unique within the document."""

from __future__ import annotations

import re
import unicodedata

from indexer.chunking.units import Chunk, Piece

_SLUG_MAX = 60
_NON_SLUG = re.compile(r"[^a-z0-9]+")


def _slug(path: tuple[str, ...]) -> str:
    if not path:
        return "root"
    ascii_text = unicodedata.normalize("NFKD", "-".join(path)).encode("ascii", "ignore").decode()
    slug = _NON_SLUG.sub("-", ascii_text.lower()).strip("-")
    return slug[:_SLUG_MAX].strip("-") or "section"


def anchor_pieces(pieces: list[Piece]) -> list[Chunk]:
    """`<section slug>-<ordinal>`; the ordinal is digits only, so unique section slugs make unique anchors."""
    slugs: dict[int, str] = {}
    used: set[str] = set()
    tried: dict[str, int] = {}  # base slug -> the last suffix taken: 100k sections named "A" stay linear
    ordinals: dict[int, int] = {}
    chunks: list[Chunk] = []
    for piece in pieces:
        text = piece.text.strip("\n")
        if not text.strip():
            continue
        slug = slugs.get(piece.heading_id)
        if slug is None:
            base = slug = _slug(piece.heading_path)
            n = tried.get(base, 1)
            if n > 1:
                slug = f"{base}-{n}"
            while slug in used:
                n += 1
                slug = f"{base}-{n}"
            tried[base] = n
            used.add(slug)
            slugs[piece.heading_id] = slug
        ordinals[piece.heading_id] = ordinal = ordinals.get(piece.heading_id, 0) + 1
        chunks.append(Chunk(f"{slug}-{ordinal}", piece.heading_path, text, piece.locus))
    return chunks
