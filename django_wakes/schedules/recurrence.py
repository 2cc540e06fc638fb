"""Recurring wakes: ``cron`` and ``every`` chains, their DST rule and their catch-up policies.

A chain is a sequence of occurrences, each its own :class:`~django_wakes.models.Wake` row linked by
``chain_id``. Only one occurrence of a chain is live at a time: the engine fires it like any other
``at`` wake and, inside the very transaction that settles it, books the next one. A crash therefore
loses both or neither; if both, the row that was firing is still ``firing`` and is re-driven when
its lease lapses.

This module decides; the engine writes. The engine asks four questions here:

* :func:`plan_chain` — validate a new chain and compute its first occurrence (at create time);
* :func:`plan_catch_up` — decide what an occurrence's firing stands for, or that it is skipped
  (at claim time);
* :func:`next_slot` and :func:`occurrence_fields` — where the next occurrence goes and what it is
  (at settle time; the engine inserts it).

Grid arithmetic never reads the wall clock for *where* the next slot is: it always starts from the
slot the settled occurrence stood for, so late firing never drifts the grid. ``now`` is consulted
only to decide which slots were *missed* (catch-up).

Cron expressions are evaluated in local wall time of the chain's ``tz``; see :class:`CronGrid` for
the daylight-saving rule. ``every`` is elapsed time and ignores the zone.
"""

from __future__ import annotations

import bisect
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter
from django.conf import settings

from ..durations import Duration, parse_duration
from ..exceptions import InvalidDuration, InvalidSchedule
from ..models import Wake
from ..states import CatchUp, DstAmbiguous, DstMissing, TriggerType
from ..timeutil import to_datetime

__all__ = [
    "CatchUpPlan",
    "CronGrid",
    "DstPolicy",
    "EveryGrid",
    "Grid",
    "Occurrence",
    "chain_key",
    "dst_policy",
    "grid_for",
    "next_slot",
    "occurrence_fields",
    "plan_catch_up",
    "plan_chain",
    "preview",
    "upcoming",
]

CRON_MAX_LENGTH: int = Wake._meta.get_field("cron").max_length or 120
TZ_MAX_LENGTH: int = Wake._meta.get_field("tz").max_length or 64
_ONE_SECOND = timedelta(seconds=1)
_TINY = timedelta(microseconds=1)
#: How far apart offset samples are when looking for DST transitions while counting missed slots.
#: Real zones never change offset twice within a day and back, so a daily probe finds every change.
_TRANSITION_PROBE = timedelta(days=1)
#: Slots within this distance of a transition (plus the size of the jump) are counted one by one.
_TRANSITION_MARGIN = timedelta(hours=1)
#: A walk that meets no firing wall time this far from where it started gives up (``dst.missing="skip"``
#: with an expression that only ever names skipped times, ``30 2 * 3 L0`` in Europe/Paris, never fires).
_WALK_HORIZON = timedelta(days=366 * 30)
#: Random ("R") and hashed ("H") fields would put each occurrence on a different grid: refused.
_RANDOM_FIELD = re.compile(r"^[rh](?:\(|/|$)")


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


# --------------------------------------------------------------------------------------------------
# cron: a wall-clock grid with an explicit DST rule
# --------------------------------------------------------------------------------------------------


def _wall(moment: datetime, zone: tzinfo) -> datetime:
    """The naive local wall time of an aware instant."""
    return moment.astimezone(zone).replace(tzinfo=None)


def _offset(epoch_seconds: int, zone: tzinfo) -> timedelta | None:
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).astimezone(zone).utcoffset()


def _first_with_offset(zone: tzinfo, before: datetime, after: datetime) -> datetime:
    """The transition instant between ``before`` (old offset) and ``after`` (new offset).

    Bisects on whole seconds (zone transitions happen on whole seconds): a bounded ~20 steps.
    """
    lo, hi = math.floor(before.timestamp()), math.ceil(after.timestamp())
    new = after.astimezone(zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(mid, zone) == new:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, tz=UTC)


def _transitions(zone: tzinfo, start: datetime, end: datetime) -> list[datetime]:
    """Every instant in ``(start, end]`` where the zone's UTC offset changes.

    Probes the offset once a day and bisects where it changed: the work is proportional to the
    number of days in the span, never to the number of slots.
    """
    found: list[datetime] = []
    here, offset = start, start.astimezone(zone).utcoffset()
    while here < end:
        there = min(here + _TRANSITION_PROBE, end)
        there_offset = there.astimezone(zone).utcoffset()
        if there_offset != offset:
            found.append(_first_with_offset(zone, here, there))
        here, offset = there, there_offset
    return found


@dataclass(frozen=True)
class DstPolicy:
    """What a cron chain does at the two daylight-saving edge cases; the default is the historical rule.

    ``ambiguous``: a wall time fall-back repeats (:class:`~django_wakes.states.DstAmbiguous`: ``auto``,
    ``first``, ``second``, ``both``). ``missing``: a wall time spring-forward skips
    (:class:`~django_wakes.states.DstMissing`: ``shift``, ``skip``). Stored on every occurrence of the
    chain (``Wake.dst_ambiguous`` / ``Wake.dst_missing``), so a chain keeps the rule it was created with.
    """

    ambiguous: str = DstAmbiguous.AUTO.value
    missing: str = DstMissing.SHIFT.value

    @property
    def is_default(self) -> bool:
        return self == DstPolicy()

    def describe(self) -> str:
        """One line for people: ``repeated hour: first instance only; skipped hour: skipped``."""
        return f"repeated hour: {DstAmbiguous(self.ambiguous).label}; skipped hour: {DstMissing(self.missing).label}"

    @classmethod
    def of(cls, wake: Wake) -> DstPolicy:
        """The policy stored on an occurrence (blank fields, as on rows older than the policy, are the default)."""
        return cls(wake.dst_ambiguous or DstAmbiguous.AUTO.value, wake.dst_missing or DstMissing.SHIFT.value)


def dst_policy(value: Any) -> DstPolicy:
    """Validate ``schedule(dst=...)``: ``None``, a :class:`DstPolicy`, a mapping or ``"ambiguous=both,missing=skip"``.

    Either key may be left out (it keeps the default). Anything else raises :class:`InvalidSchedule`.
    """
    if value is None:
        return DstPolicy()
    if isinstance(value, DstPolicy):
        given: dict[str, Any] = {"ambiguous": value.ambiguous, "missing": value.missing}
    elif isinstance(value, str):
        given = {}
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, choice = part.partition("=")
            if not sep or name.strip() in given:
                raise InvalidSchedule(f"dst: expected 'ambiguous=...,missing=...', got {value!r}")
            given[name.strip()] = choice.strip()
    elif isinstance(value, dict):
        given = dict(value)
    else:
        raise InvalidSchedule(f"dst: expected a DstPolicy, a dict or a string, got {type(value).__name__}")
    unknown = sorted(str(k) for k in set(given) - {"ambiguous", "missing"})
    if unknown:
        raise InvalidSchedule(f"dst: unknown key(s) {', '.join(unknown)} (expected ambiguous, missing)")
    ambiguous = given.get("ambiguous", DstAmbiguous.AUTO.value)
    missing = given.get("missing", DstMissing.SHIFT.value)
    if not isinstance(ambiguous, str) or ambiguous not in DstAmbiguous.values:
        raise InvalidSchedule(f"dst: ambiguous must be one of {', '.join(DstAmbiguous.values)}, got {ambiguous!r}")
    if not isinstance(missing, str) or missing not in DstMissing.values:
        raise InvalidSchedule(f"dst: missing must be one of {', '.join(DstMissing.values)}, got {missing!r}")
    return DstPolicy(ambiguous, missing)


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


# --------------------------------------------------------------------------------------------------
# Validation and the first occurrence
# --------------------------------------------------------------------------------------------------


def _zone_name(tz: Any) -> str:
    name = settings.TIME_ZONE if tz is None else tz
    if not isinstance(name, str) or not name or len(name) > TZ_MAX_LENGTH:
        raise InvalidSchedule(f"tz: {name!r} is not an IANA time zone name")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidSchedule(f"tz: unknown time zone {name!r}") from exc
    return name


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


def _every(every: Any) -> timedelta:
    try:
        step = parse_duration(every, name="every", allow_zero=False)
    except InvalidDuration as exc:
        raise InvalidSchedule(str(exc)) from exc
    if step <= timedelta(0):  # pragma: no cover - parse_duration already refuses it
        raise InvalidSchedule(f"every: must be positive, got {every!r}")
    return step


def _catch_up(value: Any) -> str:
    if not isinstance(value, str) or value not in CatchUp.values:
        raise InvalidSchedule(f"catch_up: expected one of {', '.join(CatchUp.values)}, got {value!r}")
    return value


def plan_chain(
    *,
    now: datetime,
    cron: str | None,
    every: Duration | None,
    tz: str | None,
    start_at: datetime | int | float | None,
    end_at: datetime | int | float | None,
    catch_up: str,
    dst: Any = None,
) -> dict[str, Any]:
    """Validate a new chain and return its model fields, ``fire_at`` being the first occurrence.

    ``dst`` is the cron chain's :class:`DstPolicy` (see :func:`dst_policy` for the accepted forms);
    ``every`` is elapsed time, so a ``dst`` other than the default is refused with it.

    Everything is checked before anything is written, so a bad schedule raises
    :class:`InvalidSchedule` (or :class:`~django_wakes.exceptions.InvalidTime` for a bad
    ``start_at``/``end_at``) and leaves no row behind. The first occurrence:

    * cron: the first slot strictly after ``now`` — or at/after ``start_at`` if that is later;
    * every: the grid is ``anchor + k * every`` with ``anchor = start_at or now``; the first slot is
      ``start_at`` if it is in the future, else the next grid slot after ``now`` (``now + every``
      without ``start_at``).
    """
    zone = _zone_name(tz)
    policy = _catch_up(catch_up)
    rule = dst_policy(dst)
    if cron is None and not rule.is_default:
        raise InvalidSchedule("dst: applies only to cron (every is elapsed time, untouched by DST)")
    start = to_datetime(start_at, name="start_at") if start_at is not None else None
    end = to_datetime(end_at, name="end_at") if end_at is not None else None
    step: timedelta | None = None
    expression = ""
    try:
        if cron is not None:
            cron_grid = _cron_grid(cron, zone, rule)
            expression = cron_grid.expression
            first = cron_grid.next_after(start - _TINY if start is not None and start > now else now)
        else:
            step = _every(every)
            every_grid = EveryGrid(step, start if start is not None else now)
            first = start if start is not None and start > now else every_grid.next_after(now)
    except OverflowError as exc:
        raise InvalidSchedule("the first occurrence is beyond the last representable date") from exc
    if first is None:
        raise InvalidSchedule(f"cron: {cron!r} never fires (no matching date ahead)")
    if end is not None and end <= first:
        raise InvalidSchedule(f"end_at {end.isoformat()} is not after the first occurrence {first.isoformat()}")
    return {
        "cron": expression,
        "every": step,
        "tz": zone,
        "catch_up": policy,
        "dst_ambiguous": rule.ambiguous if cron is not None else "",
        "dst_missing": rule.missing if cron is not None else "",
        "start_at": start,
        "end_at": end,
        "chain_id": uuid.uuid4().hex,
        "occurrence": 0,
        "fire_at": first,
    }


def grid_for(wake: Wake) -> Grid:
    """The slot grid of a recurring wake (``every`` grids are anchored on the wake's own slot)."""
    if wake.cron:
        return CronGrid(wake.cron, wake.tz or settings.TIME_ZONE, DstPolicy.of(wake))
    if wake.every is None or wake.fire_at is None:
        raise InvalidSchedule(f"wake {wake.pk} is not a recurring occurrence")
    return EveryGrid(wake.every, wake.fire_at)


# --------------------------------------------------------------------------------------------------
# Claim time: catch-up
# --------------------------------------------------------------------------------------------------


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _stood_for(wake: Wake) -> datetime:
    """The slot an occurrence's firing stood for: ``result["slot"]`` (latest catch-up) or its own."""
    slot = wake.result.get("slot") if isinstance(wake.result, dict) else None
    if isinstance(slot, str):
        try:
            parsed = datetime.fromisoformat(slot)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed.astimezone(UTC)
    assert wake.fire_at is not None  # every occurrence row has its slot
    return wake.fire_at


@dataclass(frozen=True)
class CatchUpPlan:
    """What an occurrence's firing stands for, decided at claim time; the engine writes it.

    ``result`` is what the sink is handed (``{"trigger": "at", "slot": ...}``, plus ``"missed"``
    under ``latest``). With ``skip`` the occurrence must not fire at all: ``result`` is then the
    marker the engine settles it with (as ``cancelled``) and ``next_slot`` the slot it books instead.
    """

    result: dict[str, Any]
    skip: bool = False
    next_slot: datetime | None = None


def plan_catch_up(wake: Wake, now: datetime) -> CatchUpPlan:
    """Decide what a recurring occurrence's firing stands for at ``now``, applying its catch-up policy.

    The slot is always in the result (shared by every chain on the same schedule, so identical
    results still group into one claim UPDATE). An occurrence is *missed* when a newer slot of its
    chain has also come (``now`` has reached the next slot):

    * ``replay``: nothing more; the missed slots come one per pass as :func:`next_slot` books them;
    * ``latest``: the firing stands for the newest slot at or before ``now`` and reports
      ``"missed": N``, the slots that will now never fire (this row's own and those between);
      :func:`next_slot` continues after that newest slot;
    * ``skip``: the occurrence must not fire: the plan says so, with ``"skipped": True,
      "missed": N`` and the next future slot to book.

    The work is constant in the number of missed slots except for the exact cron count (see
    :meth:`CronGrid.count`).
    """
    slot = wake.fire_at
    assert slot is not None  # every occurrence row has its slot
    policy = wake.catch_up or CatchUp.REPLAY
    stands_for = CatchUpPlan({"trigger": TriggerType.AT.value, "slot": _iso(slot)})
    if policy == CatchUp.REPLAY:
        return stands_for
    grid = grid_for(wake)
    horizon = now if wake.end_at is None else min(now, wake.end_at)
    newest = grid.latest_at_or_before(horizon)
    if newest is None or newest <= slot:
        return stands_for
    if policy == CatchUp.LATEST:
        return CatchUpPlan({"trigger": TriggerType.AT.value, "slot": _iso(newest), "missed": grid.count(slot, newest)})
    skipped = grid.count(slot, horizon) + 1  # this row's slot and every later one up to now
    upcoming = grid.next_after(max(now, slot))
    if upcoming is not None and wake.end_at is not None and upcoming > wake.end_at:
        upcoming = None
    marker = {"trigger": TriggerType.AT.value, "slot": _iso(slot), "skipped": True, "missed": skipped}
    return CatchUpPlan(marker, skip=True, next_slot=upcoming)


# --------------------------------------------------------------------------------------------------
# Settle time: booking the next occurrence
# --------------------------------------------------------------------------------------------------


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def chain_key(chain_id: str, slot: datetime) -> str:
    """The idempotency key of a chain's occurrence at ``slot``: a replayed booking finds the first.

    Epoch *microseconds*, in integer arithmetic, so two distinct slots never share a key.
    """
    return f"chain:{chain_id}:{(slot - _EPOCH) // _TINY}"


def occurrence_fields(
    wake: Wake, slot: datetime, end_at: datetime | None, *, paused_at: datetime | None = None
) -> dict[str, Any]:
    """The fields of the occurrence of ``wake``'s chain at ``slot``, keyed by :func:`chain_key`.

    ``paused_at``: the chain is paused (:mod:`django_wakes.engine.schedules`), so the occurrence is
    booked held: no ``due_at`` (no runner claims it) and the slot kept to give back on resume.
    """
    return {
        "workspace_id": wake.workspace_id,
        "session_id": wake.session_id,
        "trigger_type": TriggerType.AT,
        "kind": wake.kind,
        "serial_key": wake.serial_key,
        "intent": wake.intent,
        "max_attempts": wake.max_attempts,
        "priority": wake.priority,
        "queue_name": wake.queue_name,
        "cron": wake.cron,
        "every": wake.every,
        "tz": wake.tz,
        "catch_up": wake.catch_up,
        "dst_ambiguous": wake.dst_ambiguous,
        "dst_missing": wake.dst_missing,
        "start_at": wake.start_at,
        "end_at": end_at,
        "chain_id": wake.chain_id,
        "occurrence": wake.occurrence + 1,
        "fire_at": slot,
        "due_at": None if paused_at is not None else slot,
        "paused_at": paused_at,
        "paused_due_at": slot if paused_at is not None else None,
        "idempotency_key": chain_key(wake.chain_id or "", slot),
        "depth": wake.depth,  # the same chain, not one deeper
    }


def next_slot(wake: Wake, now: datetime, end_at: datetime | None) -> datetime | None:
    """The slot of a chain's next occurrence after ``wake`` settled (``None``: the chain is over).

    Computed from the slot the firing stood for, never from the wall clock (no drift):

    * ``replay`` / ``latest``: the first slot after it, even if already past (``replay`` then fires
      each missed slot in order, one per pass; ``latest`` folds them at that claim);
    * ``skip``: the first slot strictly after ``now``.

    Nothing after ``end_at``.
    """
    if not wake.is_recurring:
        return None
    stood_for = _stood_for(wake)
    start_after = max(stood_for, now) if wake.catch_up == CatchUp.SKIP else stood_for
    upcoming = grid_for(wake).next_after(start_after)
    if upcoming is None or (end_at is not None and upcoming > end_at):
        return None
    return upcoming


# --------------------------------------------------------------------------------------------------
# Preview: the next fire times, in the chain's own zone, with its DST transitions marked
# --------------------------------------------------------------------------------------------------

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
