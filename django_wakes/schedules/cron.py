"""Cron expressions: parsing them (refusals that name the wrong field) and :class:`CronGrid`, their slots.

A cron grid walks the expression's wall times in the chain's zone and maps each to instants under
the chain's :class:`~django_wakes.schedules.dst.DstPolicy`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, CroniterError, croniter

from ..exceptions import InvalidSchedule
from ..models import Wake
from ..states import DstAmbiguous, DstMissing
from .dst import DstPolicy, _first_with_offset, _transitions, _wall

CRON_MAX_LENGTH: int = Wake._meta.get_field("cron").max_length or 120
_ONE_SECOND = timedelta(seconds=1)
_TINY = timedelta(microseconds=1)
#: Slots within this distance of a transition (plus the size of the jump) are counted one by one.
_TRANSITION_MARGIN = timedelta(hours=1)
#: A walk that meets no firing wall time this far from where it started gives up (``dst.missing="skip"``
#: with an expression that only ever names skipped times, ``30 2 * 3 L0`` in Europe/Paris, never fires).
_WALK_HORIZON = timedelta(days=366 * 30)
#: Random ("R") and hashed ("H") fields would put each occurrence on a different grid: refused.
_RANDOM_FIELD = re.compile(r"^[rh](?:\(|/|$)")


def _expand(values: list[Any], full: range) -> tuple[int, ...]:
    """A field's values; a ``*`` anywhere in it (``0,*`` expands to ``['*', 0]``) is every value."""
    return tuple(full) if "*" in values else tuple(sorted({int(v) for v in values}))


@dataclass(frozen=True)
class CronGrid:
    """The slots of a 5-field cron expression iterated in local wall time of ``tz``.

    The DST rule, applied to each wall time ``g`` the expression produces, is ``dst`` (a
    :class:`DstPolicy`); its default, described here, is the rule chains always had:

    * ``g`` exists once: it fires at that instant;
    * ``g`` falls in a spring-forward gap (it does not exist): it fires at the first valid instant
      after the gap — the transition instant itself. Several slots mapped there (``0,30 2 * * *``,
      or a slot in the gap and one at the gap's end) are one occurrence: the next occurrence is
      always strictly after the previous one in UTC;
    * ``g`` is ambiguous (fall-back repeats it): it fires at its first instance (``fold=0``) when
      the hour field is fixed, and at both instances when the hour field covers every hour
      (``*``, ``*/1``, ``0-23``), so ``0 * * * *`` fires at every real hour, none skipped, none
      doubled.

    ``dst`` changes the last two cases: ``missing="skip"`` drops a wall time in a gap; ``ambiguous``
    ``first`` / ``second`` / ``both`` fire at that instance (or both) whatever the hour field is.
    """

    expression: str
    tz: str
    dst: DstPolicy = DstPolicy()
    zone: tzinfo = field(init=False, repr=False, compare=False)
    every_hour: bool = field(init=False, repr=False, compare=False)
    minutes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    hours: tuple[int, ...] = field(init=False, repr=False, compare=False)
    day_expression: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parsed = croniter(self.expression, datetime(2000, 1, 1))  # parse only: the start is irrelevant
        set_ = object.__setattr__
        set_(self, "zone", ZoneInfo(self.tz))
        set_(self, "minutes", _expand(parsed.expanded[0], range(60)))
        set_(self, "hours", _expand(parsed.expanded[1], range(24)))
        set_(self, "every_hour", len(self.hours) == 24)
        # The day part of the expression, for walking matching days when counting missed slots.
        set_(self, "day_expression", "0 0 " + " ".join(parsed.expressions[2:5]))

    # -- mapping wall times to instants ------------------------------------------------------------

    def _instants(self, wall: datetime) -> tuple[datetime, ...]:
        """The instants (UTC, increasing) at which wall time ``wall`` fires under the DST rule."""
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        if first == second:
            return (first,)
        if _wall(first, self.zone) == wall:  # ambiguous: both instances are real (first < second)
            chosen = self.dst.ambiguous
            if chosen == DstAmbiguous.AUTO:
                chosen = DstAmbiguous.BOTH if self.every_hour else DstAmbiguous.FIRST
            if chosen == DstAmbiguous.BOTH:
                return (first, second)
            return (first,) if chosen == DstAmbiguous.FIRST else (second,)
        if self.dst.missing == DstMissing.SKIP:
            return ()
        # In a gap: fold=1 lands before the transition, fold=0 after it.
        before, after = sorted((first, second))
        return (_first_with_offset(self.zone, before, after),)

    def _margin(self, wall: datetime) -> timedelta:
        """How far an ambiguous wall time's two instances are apart (zero when it is not ambiguous)."""
        first = wall.replace(tzinfo=self.zone, fold=0).utcoffset() or timedelta(0)
        second = wall.replace(tzinfo=self.zone, fold=1).utcoffset() or timedelta(0)
        return max(first - second, timedelta(0))

    def _walls(self, start: datetime, *, backwards: bool = False) -> Iterator[datetime]:
        """Grid wall times strictly after (or before) the naive ``start``, in order."""
        it = croniter(self.expression, start)
        step = it.get_prev if backwards else it.get_next
        while True:
            try:
                yield step(datetime)
            except CroniterBadDateError:  # no match within croniter's search horizon (50 years)
                return

    # -- Grid ---------------------------------------------------------------------------------------

    def next_after(self, moment: datetime) -> datetime | None:
        """The first occurrence strictly after ``moment``.

        Under every policy the chosen first instants grow with wall time, and a second (fold=1)
        instance is never earlier than the first, so the walk can stop at the first wall time whose
        first instant is past ``moment`` (a skipped wall time has none and is walked past); it
        starts early enough to see second instances of an ambiguous hour that ``moment`` sits in.
        Bounded work: the slots of at most one ambiguous window.
        """
        wall = _wall(moment, self.zone)
        best: datetime | None = None
        for candidate in self._walls(wall - self._margin(wall)):
            if best is None and candidate - wall > _WALK_HORIZON:
                return None
            instants = self._instants(candidate)
            for instant in instants:
                if instant > moment and (best is None or instant < best):
                    best = instant
            if instants and instants[0] > moment:
                break
        return best

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The newest occurrence at or before ``moment`` (the mirror of :meth:`next_after`)."""
        wall = _wall(moment, self.zone)
        best: datetime | None = None
        for candidate in self._walls(wall + self._margin(wall) + _TINY, backwards=True):
            if best is None and wall - candidate > _WALK_HORIZON:
                return None
            instants = self._instants(candidate)
            for instant in instants:
                if instant <= moment and (best is None or instant > best):
                    best = instant
            if instants and instants[-1] <= moment:
                break
        return best

    def count(self, after: datetime, until: datetime) -> int:
        """How many occurrences lie in ``(after, until]``, exactly, without visiting each one.

        The span is cut at DST transitions. Away from them the offset is constant, so wall times map
        one-to-one onto instants and are counted per matching *day* (the hours x minutes product,
        with bisection for partial days). Within an hour (plus the jump) of a transition, where
        gaps collapse and ambiguous hours repeat, the occurrences are enumerated. The work is one
        croniter step per matching day of the span plus one offset probe per day, and at most a
        few hours of slots per transition — never one step per missed slot.
        """
        if until <= after:
            return 0
        windows: list[tuple[datetime, datetime]] = []
        for moment in _transitions(self.zone, after - _TRANSITION_MARGIN * 4, until + _TRANSITION_MARGIN * 4):
            jump = abs(
                (moment.astimezone(self.zone).utcoffset() or timedelta(0))
                - ((moment - _ONE_SECOND).astimezone(self.zone).utcoffset() or timedelta(0))
            )
            lo, hi = moment - jump - _TRANSITION_MARGIN, moment + jump + _TRANSITION_MARGIN
            if windows and lo <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(hi, windows[-1][1]))
            else:
                windows.append((lo, hi))
        total, cursor = 0, after
        for lo, hi in windows:
            if hi <= cursor or lo >= until:
                continue
            if lo > cursor:
                total += self._count_steady(cursor, lo)
                cursor = lo
            end = min(hi, until)
            total += self._count_enumerated(cursor, end)
            cursor = end
        if cursor < until:
            total += self._count_steady(cursor, until)
        return total

    def _count_enumerated(self, after: datetime, until: datetime) -> int:
        count, moment = 0, after
        while (upcoming := self.next_after(moment)) is not None and upcoming <= until:
            count, moment = count + 1, upcoming
        return count

    def _count_steady(self, after: datetime, until: datetime) -> int:
        """Count ``(after, until]`` where the offset does not change: wall times, one per instant."""
        return self._count_walls(_wall(after, self.zone), _wall(until, self.zone))

    def _count_le(self, moment: time) -> int:
        """How many (hour, minute) slots of one day are at or before the time of day ``moment``."""
        hours_before = bisect.bisect_left(self.hours, moment.hour)
        same_hour = bisect.bisect_right(self.minutes, moment.minute) if moment.hour in self.hours else 0
        return hours_before * len(self.minutes) + same_hour

    def _count_walls(self, start: datetime, end: datetime) -> int:
        """How many grid wall times lie in the naive ``(start, end]``: one croniter step per matching day."""
        per_day = len(self.hours) * len(self.minutes)
        first_day, last_day = start.date(), end.date()
        days = croniter(self.day_expression, datetime.combine(first_day, time()) - _TINY)
        total = 0
        while True:
            try:
                day: date = days.get_next(datetime).date()
            except CroniterBadDateError:
                break
            if day > last_day:
                break
            low = self._count_le(start.time()) if day == first_day else 0
            high = self._count_le(end.time()) if day == last_day else per_day
            total += high - low
        return total


#: The five fields of a cron expression: name, lowest and highest number, the names it also takes.
CRON_FIELDS = (
    ("minute", 0, 59, ""),
    ("hour", 0, 23, ""),
    ("day-of-month", 1, 31, ""),
    ("month", 1, 12, " or JAN-DEC"),
    ("day-of-week", 0, 7, " or SUN-SAT (0 and 7 are Sunday)"),
)
_CRON_ERRORS = (CroniterError, ValueError, TypeError, KeyError, IndexError)


def _cron_field_problem(index: int, text: str) -> str | None:
    """What is wrong with field ``index`` of an expression croniter refused, in our words; None if it is fine.

    The field is tried alone (every other field ``*``), so the answer names the field that is wrong
    rather than croniter's text for the whole expression.
    """
    probe = ["*"] * len(CRON_FIELDS)
    probe[index] = text
    try:
        croniter(" ".join(probe), datetime(2000, 1, 1))
    except _CRON_ERRORS:
        pass
    else:
        return None
    name, low, high, names = CRON_FIELDS[index]
    for item in text.split(","):
        base, _, step = item.partition("/")
        if step.isdigit() and int(step) == 0:
            return f"the {name} field {text!r} has a step of 0 (a step is at least 1)"
        for number in re.findall(r"\d+", base):
            if not low <= int(number) <= high:
                return f"the {name} field {text!r} has {number}, out of range ({low}-{high}{names})"
    return (
        f"the {name} field {text!r} is not valid: expected a number {low}-{high}{names}, *, a list (1,15), "
        "a range (1-5) or a step (*/15)"
    )


def _cron_grid(cron: Any, tz: str, dst: DstPolicy | None = None) -> CronGrid:
    """Parse ``cron`` now, so a bad expression is refused at create time rather than at settle time.

    The refusal is ours, naming what is wrong (how many fields, which field, which value), not
    croniter's text for the whole expression.
    """
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidSchedule("cron: expected a non-empty cron expression string")
    expression = " ".join(cron.split())
    if len(expression) > CRON_MAX_LENGTH:
        raise InvalidSchedule(f"cron: longer than {CRON_MAX_LENGTH} characters")
    fields = expression.split(" ")
    if not expression.startswith("@") and len(fields) != len(CRON_FIELDS):
        extra = " (seconds and years are not supported)" if len(fields) > len(CRON_FIELDS) else ""
        raise InvalidSchedule(
            f"cron: {cron!r} has {len(fields)} field{'s' if len(fields) != 1 else ''}; a cron expression has "
            f"5 fields: minute hour day-of-month month day-of-week{extra}"
        )
    try:
        parsed = croniter(expression, datetime(2000, 1, 1))
    except _CRON_ERRORS as exc:
        if expression.startswith("@"):
            raise InvalidSchedule(
                f"cron: {cron!r} is not a valid cron expression: unknown shortcut "
                "(expected @hourly, @daily, @weekly, @monthly or @yearly, or 5 fields)"
            ) from exc
        for index, text in enumerate(fields):
            problem = _cron_field_problem(index, text)
            if problem is not None:
                raise InvalidSchedule(f"cron: {cron!r} is not a valid cron expression: {problem}") from exc
        raise InvalidSchedule(f"cron: {cron!r} is not a valid cron expression") from exc
    if len(parsed.expanded) != len(CRON_FIELDS):
        raise InvalidSchedule(f"cron: {cron!r} must have 5 fields (minute hour day-of-month month day-of-week)")
    if any(_RANDOM_FIELD.match(part) for expr in parsed.expressions for part in expr.split(",")):
        raise InvalidSchedule(f"cron: {cron!r} uses a random or hashed field (R/H); give fixed values")
    return CronGrid(expression, tz, dst or DstPolicy())
