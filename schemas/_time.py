"""One time representation everywhere: timezone-aware UTC datetimes."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.errors import InvalidInstant as InvalidInstant  # re-export (schemas.errors)


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC so a date typed on the CLI compares with stored instants.

    0001-01-01T00:00:00+14:00 has no UTC form (it is 13:00 on 31 December of year 0): that is an
    InvalidInstant (a ValueError, so pydantic reports it as invalid input), never an OverflowError.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInstant(f"{value.isoformat()} is out of range: it names no instant in UTC") from None


def to_epoch_ms(value: datetime) -> int:
    return int(to_utc(value).timestamp() * 1000)


def from_epoch_ms(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1000, tz=UTC)
