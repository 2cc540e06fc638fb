"""How close two consecutive occurrences of a chain can come: what an agent budget checks every occurrence against.

A session's budgets (``SESSION_MIN_DELAY``, ``SESSION_COOLDOWN``) say how soon a turn may follow;
a chain made for an agent books its occurrences itself, one after another, so each must keep them.
:func:`closest` answers "do two consecutive occurrences ever come closer than this?" for a chain's
grid over a span of time, without visiting every occurrence:

* ``every``: the step; nothing else.
* ``cron``: in wall time, the occurrences of a matching day are the hours x minutes product, the same
  every day, so the closest pair is either two neighbours of that product (``0,1 * * * *``: a minute)
  or the last of one matching day and the first of the next (``0,59 0,23 * * *``: 23:59 to 00:00).
  The matching days are walked (one croniter step per day, stopping at the first two consecutive
  ones) to find the fewest days between two; irregular ones (``0 0 28 2 *`` with ``0 0 1 3 *``
  folded in) come out of the walk. Around a daylight-saving change wall time and elapsed time part:
  a spring-forward gap moves the wall times in it to its end (``59 1`` and ``1 3`` on a spring-forward
  night are two minutes apart), and a repeated hour fired twice (``dst.ambiguous="both"``) puts an
  occurrence less than the jump after another. So within the jump plus an hour of each transition of
  the span, the occurrences are enumerated as the chain will fire them (:meth:`CronGrid.next_after`).

The span is the chain's life (its ``end_at``), or :data:`OPEN_SPAN` for a chain with no end: 28
years, a full cycle of weekdays over dates (1901-2099), so a weekday/date coincidence that comes
once in years is seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta

from croniter import CroniterBadDateError, croniter

from ..states import DstAmbiguous
from .cron import CronGrid
from .dst import _transitions, _wall
from .grids import EveryGrid, Grid

__all__ = ["OPEN_SPAN", "Gap", "closest"]

#: How far ahead a chain without an end is checked: 28 years, one full cycle of weekdays over dates.
OPEN_SPAN = timedelta(days=28 * 365 + 7)
_DAY = timedelta(days=1)
_MINUTE = timedelta(minutes=1)
#: Around a transition, occurrences this far beyond the jump are enumerated (as ``CronGrid.count`` does).
_MARGIN = timedelta(hours=1)
#: The largest daylight-saving jump of any zone today (Antarctica/Troll's, two hours): how much a
#: transition can bring two occurrences of a chain closer together in elapsed time than in wall time.
_LARGEST_JUMP = timedelta(hours=2)
_YEAR = timedelta(days=366)
#: How far the wall-time walk around a transition reaches beyond it: more than any zone's jump.
_WALL_MARGIN = timedelta(hours=3)
_TINY = timedelta(microseconds=1)


@dataclass(frozen=True)
class Gap:
    """Two consecutive occurrences closer than asked: ``after`` follows ``before`` by ``gap``.

    ``before``/``after`` are local wall times (naive) for people: in a message, ``09:03`` and
    ``09:04`` say more than two UTC instants.
    """

    gap: timedelta
    before: datetime
    after: datetime


def closest(grid: Grid, start: datetime, end: datetime | None, below: timedelta) -> Gap | None:
    """Two consecutive occurrences of ``grid`` in ``[start, end]`` less than ``below`` apart, or ``None``.

    ``start`` is the chain's first occurrence; ``end`` its ``end_at`` (``None``: :data:`OPEN_SPAN`).
    """
    until = end if end is not None else start + OPEN_SPAN
    if isinstance(grid, EveryGrid):
        if grid.step >= below:
            return None
        first = start.replace(tzinfo=None)
        return Gap(grid.step, first, first + grid.step)
    assert isinstance(grid, CronGrid)  # the only other grid
    return _cron_closest(grid, start, until, below)


def _cron_closest(grid: CronGrid, start: datetime, until: datetime, below: timedelta) -> Gap | None:
    times = [timedelta(hours=h, minutes=m) for h in grid.hours for m in grid.minutes]
    days = _day_pairs(grid, start, until)
    if days.first is None:  # pragma: no cover - the chain's first occurrence is on a matching day
        return None
    wall = min(
        (
            Gap(current - previous, days.first + previous, days.first + current)
            for previous, current in zip(times, times[1:], strict=False)
        ),
        key=lambda gap: gap.gap,
        default=None,
    )
    if days.closest is not None:
        before, after = days.closest
        across = Gap(after - before + times[0] - times[-1], before + times[-1], after + times[0])
        wall = across if wall is None or across.gap < wall.gap else wall
    if wall is not None and wall.gap < below:
        return wall
    doubles = grid.dst.ambiguous == DstAmbiguous.BOTH or (grid.dst.ambiguous == DstAmbiguous.AUTO and grid.every_hour)
    if not doubles and (wall is None or wall.gap - _LARGEST_JUMP >= below):
        return None  # a transition moves two occurrences closer by at most its jump, and none fires twice
    span_end = until if not days.every_day else min(until, start + _YEAR)  # every day alike: one year of changes
    return _around_transitions(grid, start, span_end, until, below)


@dataclass(frozen=True)
class _Days:
    first: datetime | None  # the first matching day (midnight, naive)
    closest: tuple[datetime, datetime] | None  # the two consecutive matching days nearest each other
    every_day: bool  # the expression matches every day (no day-of-month, month or weekday restriction)


def _day_pairs(grid: CronGrid, start: datetime, until: datetime) -> _Days:
    """The first matching day in the span and the pair of consecutive matching days fewest days apart.

    One croniter step per matching day; stops at two consecutive days (nothing is closer).
    """
    first_day, last_day = _wall(start, grid.zone).date(), _wall(until, grid.zone).date()
    walk = croniter(grid.day_expression, datetime.combine(first_day, time()) - timedelta(microseconds=1))
    first: datetime | None = None
    best: tuple[datetime, datetime] | None = None
    previous: datetime | None = None
    while True:
        try:
            day: datetime = walk.get_next(datetime)
        except CroniterBadDateError:
            break
        if day.date() > last_day:
            break
        if first is None:
            first = day
        if previous is not None and (best is None or day - previous < best[1] - best[0]):
            best = (previous, day)
            if day - previous <= _DAY:
                break
        previous = day
    every_day = all(values == ["*"] for values in walk.expanded[2:5])
    return _Days(first, best, every_day)


def _around_transitions(
    grid: CronGrid, start: datetime, span_end: datetime, until: datetime, below: timedelta
) -> Gap | None:
    """Enumerate the occurrences near each DST transition up to ``span_end`` (as they fire): a close pair."""
    for moment in _transitions(grid.zone, start - _DAY, span_end):
        after = moment.astimezone(grid.zone).utcoffset() or timedelta(0)
        jump = abs(after - ((moment - _MINUTE).astimezone(grid.zone).utcoffset() or timedelta(0)))
        low, high = moment - jump - _MARGIN, moment + jump + _MARGIN
        found = _close_pair(_fired(grid, start, low, high, until), below)
        if found is not None:
            return Gap(found[1] - found[0], _wall(found[0], grid.zone), _wall(found[1], grid.zone))
    return None


def _fired(grid: CronGrid, start: datetime, low: datetime, high: datetime, until: datetime) -> list[datetime]:
    """The occurrences from the last one at or before ``low`` to the first one after ``high``, in order.

    One croniter walk over the wall times in between, each mapped to the instants it fires at under
    the chain's DST rule (:meth:`CronGrid._instants`); the occurrences are those instants, sorted, each
    once (wall times a spring-forward gap moves to its end are one occurrence), as
    :meth:`CronGrid.next_after` steps through them.
    """
    first = grid.latest_at_or_before(low)
    if first is None or first < start:
        first = grid.next_after(max(low, start) - _TINY)
    if first is None or first > until:
        return []
    instants = {first}
    stop = _wall(high, grid.zone) + _WALL_MARGIN
    for wall in grid._walls(_wall(max(first, low), grid.zone) - _WALL_MARGIN):
        if wall > stop:
            break
        instants.update(i for i in grid._instants(wall) if first <= i <= until)
    fired = sorted(instants)
    upcoming = grid.next_after(fired[-1] if fired else first)
    if upcoming is not None and upcoming <= until:
        fired.append(upcoming)
    return fired


def _close_pair(fired: list[datetime], below: timedelta) -> tuple[datetime, datetime] | None:
    return next(((a, b) for a, b in zip(fired, fired[1:], strict=False) if b - a < below), None)
