"""The one error a format reader raises for a file it cannot read, with the reason for the report
(defined with the other cross-layer errors in schemas.errors)."""

from __future__ import annotations

from schemas.errors import Unreadable as Unreadable  # re-export (schemas.errors)
