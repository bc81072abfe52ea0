"""The one error a format reader raises for a file it cannot read, with the reason for the report."""

from __future__ import annotations


class Unreadable(ValueError):
    """The file is of a supported type but cannot be read (corrupt, encrypted, no text): not indexed."""
