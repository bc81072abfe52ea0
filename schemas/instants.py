"""The one parser for every date or instant a person or a pusher writes: front matter, HTML meta,
webhook pushes, `as_of` on the API and `ask --as-of` on the CLI.

One function, so one value means one instant everywhere (a date is midnight UTC, a time without
an offset is UTC) and every bad value fails the same way: `InvalidInstant`, a ValueError with a
message that names the field and the expected form. Python's own parsers raise ValueError for
"2026-13-01" but OverflowError for "0001-01-01T00:00:00+14:00" (its UTC instant falls before
year 1), which nothing expects; here both are the same clear error, so callers catch ValueError
only (pydantic turns it into a validation error, 422; the CLI into exit 2; a scan into one
document's error).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Annotated

from pydantic import BeforeValidator

from schemas._time import InvalidInstant, to_utc

__all__ = ["EXPECTED_FORM", "Instant", "InvalidInstant", "instant_validator", "parse_instant"]

EXPECTED_FORM = "YYYY-MM-DD or an ISO 8601 date and time such as 2026-01-15T09:00:00+01:00"
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_SHOWN = 60  # a 10 MB "date" must not become a 10 MB error message


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def parse_instant(value: object, *, field: str = "date") -> datetime:
    """A timezone-aware UTC datetime from a string, a date or a datetime; InvalidInstant otherwise.

    Accepted: `YYYY-MM-DD` (midnight UTC) and ISO 8601 as Python reads it (`T` or a space,
    optional seconds and fraction, `Z` or an offset; no offset means UTC). Dates and datetimes
    (as YAML front matter yields them) take the same meaning. The instant must exist in UTC:
    years 1 to 9999 after applying the offset. Booleans and numbers are refused rather than
    guessed (is 20260115 a date or seconds since 1970?).
    """
    if isinstance(value, datetime):
        return to_utc(value)  # InvalidInstant when the offset pushes it out of range
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str):
        raise InvalidInstant(f"invalid {field} {_shown(value)}: expected {EXPECTED_FORM}")
    text = value.strip()
    try:
        if _DATE_ONLY.fullmatch(text):
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInstant(f"invalid {field} {_shown(value)}: expected {EXPECTED_FORM}") from None
    try:
        return to_utc(parsed)
    except InvalidInstant:
        raise InvalidInstant(
            f"{field} {_shown(value)} is out of range: in UTC it must fall between 0001-01-01 and 9999-12-31"
        ) from None


def instant_validator(field: str) -> BeforeValidator:
    """`Annotated[datetime, instant_validator("as_of")]`: a pydantic field parsed by `parse_instant`,
    so a bad value is a ValidationError naming the field (HTTP 422), never an OverflowError (500)."""

    def check(value: object) -> object:
        return parse_instant(value, field=field)

    return BeforeValidator(check)


Instant = Annotated[datetime, instant_validator("date")]
"""A pydantic field type for an instant at a boundary (see `instant_validator`)."""
