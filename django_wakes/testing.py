"""Helpers for testing code that uses django-wakes: a controllable clock and a throwaway sink registry."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from . import clock as _clock
from .durations import Duration, parse_duration
from .sinks import SinkRegistry, registry
from .timeutil import to_datetime


class FakeClock:
    """A clock that stands still until told to move."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, duration: Duration) -> datetime:
        """Move forward by ``duration`` ("90s", timedelta, ...) and return the new time."""
        delta = parse_duration(duration, name="advance")
        with self._lock:
            self._now = self._now + delta
            return self._now

    def set(self, moment: datetime | int | float) -> datetime:
        """Jump to ``moment`` (aware datetime or epoch milliseconds)."""
        with self._lock:
            self._now = to_datetime(moment, name="moment")
            return self._now


@contextmanager
def fake_clock(start: datetime | int | float | None = None) -> Iterator[FakeClock]:
    """Install a :class:`FakeClock` for the duration of the ``with`` block.

    ``start`` defaults to the real current time; everything the engine decides (due, expiry,
    leases, backoff, recurrence) follows this clock while it is installed.
    """
    fake = FakeClock(to_datetime(start, name="start") if start is not None else datetime.now(UTC))
    previous = _clock.install(fake)
    try:
        yield fake
    finally:
        _clock.install(previous)


@contextmanager
def isolated_sinks() -> Iterator[SinkRegistry]:
    """Yield the sink registry; on exit, put back exactly the sinks registered on entry.

    Whatever the ``with`` block registers is forgotten afterwards and whatever it unregisters comes
    back, so each test can install its own sinks without leaking them into the next. The engine's
    warn-once memory of unwakeable wakes (due wakes no sink can fire) is cleared on entry and on exit,
    so a test sees its own warnings. Blocks nest: each restores what it found.
    """
    from . import engine  # imports the models: not at import time of this module

    saved = registry.snapshot()
    engine.unwakeable_log.reset()
    try:
        yield registry
    finally:
        registry.restore(saved)
        engine.unwakeable_log.reset()
