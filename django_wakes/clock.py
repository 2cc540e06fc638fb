"""The one clock every engine decision reads, swappable for tests (see :mod:`django_wakes.testing`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


_clock: Clock = SystemClock()


def now() -> datetime:
    """Return the current aware UTC time from the installed clock."""
    return _clock.now()


def install(clock: Clock) -> Clock:
    """Install ``clock`` and return the previous one (used by ``fake_clock``)."""
    global _clock
    previous, _clock = _clock, clock
    return previous
