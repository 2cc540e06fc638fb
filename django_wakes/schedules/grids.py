"""A chain's slots as a :class:`Grid`: the ``every`` grid (elapsed time) and :func:`grid_for` a wake.

Grid arithmetic never reads the wall clock for *where* the next slot is: it always starts from the
slot the settled occurrence stood for, so late firing never drifts the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings

from ..durations import parse_duration
from ..exceptions import InvalidDuration, InvalidSchedule
from ..models import Wake
from .cron import CronGrid
from .dst import DstPolicy


class Grid(Protocol):
    """The slots of a chain, as aware UTC instants, in strictly increasing order."""

    def next_after(self, moment: datetime) -> datetime | None:
        """The first slot strictly after ``moment`` (``None`` if the schedule never fires again)."""

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The newest slot at or before ``moment`` (``None`` if there is none)."""

    def count(self, after: datetime, until: datetime) -> int:
        """How many slots lie in ``(after, until]``."""


# --------------------------------------------------------------------------------------------------
# every: an elapsed-time grid
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EveryGrid:
    """Slots ``base + k * step`` for every integer ``k``: pure arithmetic, constant work.

    ``step`` is elapsed time, so a chain of ``every="24h"`` drifts by an hour of *wall* time across
    a DST change; use a cron expression to stay at a local time of day.
    """

    step: timedelta
    base: datetime

    def _index(self, moment: datetime) -> int:
        """The ``k`` of the newest slot at or before ``moment`` (floor division, also for the past)."""
        return (moment - self.base) // self.step

    def next_after(self, moment: datetime) -> datetime | None:
        try:
            return self.base + (self._index(moment) + 1) * self.step
        except OverflowError:
            return None

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        try:
            return self.base + self._index(moment) * self.step
        except OverflowError:
            return None

    def count(self, after: datetime, until: datetime) -> int:
        if until <= after:
            return 0
        return self._index(until) - self._index(after)


def _every(every: Any) -> timedelta:
    try:
        step = parse_duration(every, name="every", allow_zero=False)
    except InvalidDuration as exc:
        raise InvalidSchedule(str(exc)) from exc
    if step <= timedelta(0):  # pragma: no cover - parse_duration already refuses it
        raise InvalidSchedule(f"every: must be positive, got {every!r}")
    return step


def grid_for(wake: Wake) -> Grid:
    """The slot grid of a recurring wake (``every`` grids are anchored on the wake's own slot)."""
    if wake.cron:
        return CronGrid(wake.cron, wake.tz or settings.TIME_ZONE, DstPolicy.of(wake))
    if wake.every is None or wake.fire_at is None:
        raise InvalidSchedule(f"wake {wake.pk} is not a recurring occurrence")
    return EveryGrid(wake.every, wake.fire_at)
