"""The instant a question is answered as of: the same rules on the API (`as_of`) and the CLI (`--as-of`).

A date (`2026-11-30`, midnight UTC) or an ISO 8601 datetime, read by the one instant parser in
schemas.instants, so an unreadable or out-of-range value is a ValueError everywhere (422 on the
API, exit 2 on the CLI), never an OverflowError. It may not lie in the future: a future instant
would show passages whose effective date has not arrived yet, which effective dating exists to hide.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from schemas._time import InvalidInstant, utcnow
from schemas.instants import EXPECTED_FORM, parse_instant

__all__ = ["AS_OF_FORM", "AS_OF_SKEW", "InvalidInstant", "parse_as_of"]

AS_OF_SKEW = timedelta(seconds=60)
"""Clock skew allowed between a caller and this server before an as_of counts as the future."""

AS_OF_FORM = f"{EXPECTED_FORM}, not in the future"


def parse_as_of(value: object, *, now: Callable[[], datetime] = utcnow, field: str = "as_of") -> datetime:
    """A UTC instant no later than now (plus skew); InvalidInstant (a ValueError) naming the problem."""
    instant = parse_instant(value, field=field)
    if instant > now() + AS_OF_SKEW:
        raise InvalidInstant(f"{field} {instant.isoformat()} is in the future; ask about now or the past")
    return instant
