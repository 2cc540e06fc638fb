"""Preview: a schedule's next fire times, in the chain's own zone, with its DST transitions marked."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter

from ..durations import Duration
from ..exceptions import InvalidSchedule
from ..states import DstMissing
from ..timeutil import to_datetime
from .cron import CronGrid, _cron_grid
from .dst import _transitions, _zone_name, dst_policy
from .grids import EveryGrid, Grid, _every

_ONE_SECOND = timedelta(seconds=1)
_TINY = timedelta(microseconds=1)

#: A preview lists at most this many occurrences (the admin's chain page and ``wakes preview -n``).
PREVIEW_MAX = 500


@dataclass(frozen=True)
class Occurrence:
    """One fire time of a preview: the instant, its local wall time, and what DST did around it.

    ``changes``: the zone's offset changes since the previous occurrence of the preview (or its
    start), in words, with any wall time the change skipped or repeated. ``note``: what DST did to
    *this* occurrence (moved out of a skipped hour, or which instance of a repeated one), else ``""``.
    """

    at: datetime
    local: datetime
    changes: tuple[str, ...] = ()
    note: str = ""

    @property
    def marked(self) -> bool:
        """Whether DST touched this occurrence or the time before it (what a DST column flags)."""
        return bool(self.changes or self.note)


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def _describe_change(zone: tzinfo, moment: datetime, grid: Grid) -> str:
    """``clocks go back 03:00 → 02:00 (CEST → CET)``, plus the cron times that change skipped."""
    before = (moment - _ONE_SECOND).astimezone(zone)
    after = moment.astimezone(zone)
    old_wall = (moment + (before.utcoffset() or timedelta(0))).replace(tzinfo=None)
    new_wall = after.replace(tzinfo=None)
    direction = "forward" if new_wall > old_wall else "back"
    text = (
        f"{after:%Y-%m-%d}: clocks go {direction} {_hhmm(old_wall)} → {_hhmm(new_wall)}"
        f" ({before.tzname()} → {after.tzname()})"
    )
    if isinstance(grid, CronGrid) and direction == "forward":
        gone = [wall for wall in _cron_walls_between(grid, old_wall, new_wall)]
        if gone:
            fate = "skipped" if grid.dst.missing == DstMissing.SKIP else f"fire at {_hhmm(new_wall)}"
            text += f"; {', '.join(_hhmm(w) for w in gone[:6])}{' …' if len(gone) > 6 else ''} not on the clock: {fate}"
    return text


def _cron_walls_between(grid: CronGrid, start: datetime, end: datetime) -> list[datetime]:
    """The expression's wall times in the naive ``[start, end)`` (a skipped hour's worth at most)."""
    walls = []
    for wall in grid._walls(start - _TINY):
        if wall >= end:
            break
        walls.append(wall)
    return walls


def _note(grid: Grid, zone: tzinfo, moment: datetime) -> str:
    """What DST did to the occurrence at ``moment``, or ``""``: which instance of a repeated time, or a move."""
    local = moment.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first != second:  # the wall time is repeated this night
        which = "second" if moment == second else "first"
        return f"repeated {_hhmm(wall)}: the {which} one ({local.tzname()})"
    if isinstance(grid, CronGrid) and not croniter.match(grid.expression, wall):
        # Not a wall time of the expression: the shift out of a skipped hour, onto the change itself.
        before = moment + ((moment - _ONE_SECOND).astimezone(zone).utcoffset() or timedelta(0))
        gone = _cron_walls_between(grid, before.replace(tzinfo=None), wall)
        named = ", ".join(_hhmm(w) for w in gone[:6]) or "its time"
        return f"moved to {_hhmm(wall)}: {named} not on the clock"
    return ""


def upcoming(grid: Grid, *, after: datetime, n: int, zone: tzinfo, until: datetime | None = None) -> list[Occurrence]:
    """The first ``n`` slots of ``grid`` strictly after ``after`` (none past ``until``), shown in ``zone``."""
    found: list[Occurrence] = []
    previous = after
    while len(found) < n:
        try:
            moment = grid.next_after(previous)
        except OverflowError:
            break
        if moment is None or (until is not None and moment > until):
            break
        changes = tuple(_describe_change(zone, t, grid) for t in _transitions(zone, previous, moment))
        found.append(Occurrence(moment, moment.astimezone(zone), changes, _note(grid, zone, moment)))
        previous = moment
    return found


def preview(
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    n: int = 10,
    start: datetime | int | float | None = None,
    dst: Any = None,
) -> list[Occurrence]:
    """The next ``n`` fire times of a schedule, as :func:`plan_chain` would lay them out from ``start``.

    ``start`` defaults to now. cron: the slots strictly after ``start`` under the ``dst`` policy;
    every: ``start + every``, ``start + 2 * every`` … Each :class:`Occurrence` has the UTC instant,
    the local time in ``tz`` (default ``settings.TIME_ZONE``) and the DST changes and adjustments.
    Bad input raises :class:`InvalidSchedule` (or :class:`~django_wakes.exceptions.InvalidTime`).
    """
    from .. import clock  # the injectable clock: a preview under fake_clock starts at the fake now

    if (cron is None) == (every is None):
        raise InvalidSchedule("preview: pass exactly one of cron or every")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= PREVIEW_MAX:
        raise InvalidSchedule(f"n: expected a whole number from 1 to {PREVIEW_MAX}, got {n!r}")
    zone_name = _zone_name(tz)
    zone = ZoneInfo(zone_name)
    begin = to_datetime(start, name="start") if start is not None else clock.now()
    rule = dst_policy(dst)
    grid: Grid
    if cron is not None:
        grid = _cron_grid(cron, zone_name, rule)
    else:
        if not rule.is_default:
            raise InvalidSchedule("dst: applies only to cron (every is elapsed time, untouched by DST)")
        grid = EveryGrid(_every(every), begin)
    return upcoming(grid, after=begin, n=n, zone=zone)
