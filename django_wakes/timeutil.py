"""Validate and normalise the points in time the public API accepts."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone

from .exceptions import InvalidTime


def to_datetime(value: datetime | int | float, *, name: str) -> datetime:
    """Return ``value`` as an aware UTC datetime.

    Accept an aware ``datetime`` or epoch milliseconds. A naive datetime is refused rather than
    guessed at (the caller's zone is unknowable here, and a guess is an early or late fire), except
    with ``USE_TZ = False``: there Django's own convention says a naive datetime is local time in
    ``TIME_ZONE`` (what ``timezone.now()`` returns), so it is read so.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            if settings.USE_TZ:
                raise InvalidTime(f"{name}: naive datetime {value!r}; pass an aware datetime")
            value = value.replace(tzinfo=timezone.get_default_timezone())
        return value.astimezone(UTC)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTime(f"{name}: expected an aware datetime or epoch milliseconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidTime(f"{name}: {value!r} is not a finite epoch-milliseconds value")
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidTime(f"{name}: {value!r} is out of range") from exc
