"""One parser for every date a person or a pusher writes: what it accepts, and how it refuses."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from schemas._time import to_utc
from schemas.events import UpsertPayload
from schemas.instants import Instant, InvalidInstant, instant_validator, parse_instant


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-15", datetime(2026, 1, 15, tzinfo=UTC)),  # a date is midnight UTC
        (" 2026-01-15 ", datetime(2026, 1, 15, tzinfo=UTC)),
        ("2026-01-15T09:00:00+01:00", datetime(2026, 1, 15, 8, 0, tzinfo=UTC)),
        ("2026-01-15T09:00:00Z", datetime(2026, 1, 15, 9, 0, tzinfo=UTC)),
        ("2026-01-15 09:30", datetime(2026, 1, 15, 9, 30, tzinfo=UTC)),  # no offset: UTC
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
        (date(2026, 1, 15), datetime(2026, 1, 15, tzinfo=UTC)),  # what YAML front matter yields
        (datetime(2026, 1, 15, 9, 0), datetime(2026, 1, 15, 9, 0, tzinfo=UTC)),
    ],
)
def test_accepted_forms(value: object, expected: datetime) -> None:
    parsed = parse_instant(value)
    assert parsed == expected and parsed.tzinfo is UTC


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0001-01-01T00:00:00+14:00", "'0001-01-01T00:00:00+14:00' is out of range"),  # was OverflowError
        ("9999-12-31T23:00:00-05:00", "is out of range"),
        (datetime(1, 1, 1, tzinfo=datetime.fromisoformat("2026-01-01T00:00+14:00").tzinfo), "out of range"),
        ("2026-13-01", "invalid effective_from '2026-13-01': expected YYYY-MM-DD or an ISO 8601"),
        ("next tuesday", "invalid effective_from 'next tuesday'"),
        ("", "invalid effective_from ''"),
        (20260115, "invalid effective_from 20260115"),  # numbers are not guessed at
        (True, "invalid effective_from True"),
        (None, "invalid effective_from None"),
        ("9" * 10_000, "..."),  # the message shows a bounded prefix, not 10 KB
    ],
)
def test_refused_values_are_one_clear_value_error(value: object, message: str) -> None:
    with pytest.raises(InvalidInstant) as caught:
        parse_instant(value, field="effective_from")
    assert isinstance(caught.value, ValueError)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 200


def test_to_utc_overflow_is_a_value_error_not_an_overflow_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        to_utc(datetime.fromisoformat("0001-01-01T00:00:00+14:00"))


class _Request(BaseModel):
    as_of: Annotated[datetime, instant_validator("as_of")]
    when: Instant | None = None


def test_pydantic_boundaries_turn_bad_instants_into_validation_errors() -> None:
    assert _Request.model_validate({"as_of": "2026-11-30"}).as_of == datetime(2026, 11, 30, tzinfo=UTC)
    with pytest.raises(ValidationError) as caught:
        _Request.model_validate({"as_of": "0001-01-01T00:00:00+14:00"})
    assert "as_of '0001-01-01T00:00:00+14:00' is out of range" in str(caught.value)
    with pytest.raises(ValidationError, match="invalid as_of 'soon'"):
        _Request.model_validate_json('{"as_of": "soon"}')


def test_an_event_with_an_instant_outside_utc_is_invalid_not_a_crash() -> None:
    """A worker validating a hostile event must dead-letter it (ValidationError), not die (OverflowError)."""
    body = {
        "content": "x",
        "content_type": "text",
        "content_hash": "0" * 64,
        "acl": [],
        "source_url": "",
        "effective_from": "0001-01-01T00:00:00+14:00",
    }
    with pytest.raises(ValidationError):
        UpsertPayload.model_validate(body)
