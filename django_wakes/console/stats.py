"""What the dashboard and the metrics report, read with bounded queries over indexes.

A wake table keeps every settled wake until ``gc`` (30 days by default): a million rows is ordinary.
So nothing here counts the whole table. Each query is one of:

* a scan of the **live** rows (``state = 'pending'``, ``state = 'firing'``, through the claim path's
  indexes on those states): its cost follows the backlog, not the history;
* a **time-windowed** range scan of an index on a time column: recent attempts through
  ``wakeattempt_finished_idx`` (``finished_at, outcome``), recently settled wakes through ``gc``'s
  index of terminal rows by ``updated_at``: its cost follows the traffic of the window (an hour, a
  day), not the history;
* a ``LIMIT``-ed read (the runners and the wakes they hold).

Lateness is *due-to-start*: when the claim that settled a wake was made (``claimed_at``, the same
moment as its attempt's ``started_at``; the sink starts right after) minus the wake's ``due_at``.
``due_at`` is not stored per attempt: a failure overwrites it with the retry's time. So lateness is
measured on the wakes a sink **settled** (fired, expired, stopped), whose ``due_at`` is still the one
their last claim was due at; earlier failed attempts are left out of it. For a takeover the claim is
the takeover's, so a lapsed lease shows as lateness (it was).

Windows select attempts by ``finished_at``, the moment the attempt row is written (``started_at`` is
the claim's: a long sink's attempt appears long after it, behind a window that has moved on). The
charts' "fires per minute" are therefore attempts *settled* per minute.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, F, IntegerField, Q, Sum, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Greatest, TruncHour, TruncMinute
from django.db.models.lookups import LessThanOrEqual

from ..models import Runner, Wake, WakeAttempt
from ..querysets import OVERDUE_AFTER
from ..states import TERMINAL_STATES, Outcome, State
from . import reads
from .attention import FIRING_LIMIT, Attention

#: Attempts that settled their wake: the "fires" of the charts.
SUCCEEDED = (Outcome.FIRED, Outcome.EXPIRED, Outcome.STOPPED)
#: The final states a sink's return settles a wake in (``stopped`` settles it ``fired``).
SETTLED_BY_SINK = (State.FIRED, State.EXPIRED)
#: Attempts that failed (charged): what the failure charts and the failure counters count.
FAILED = (Outcome.FAILED, Outcome.RETRY, Outcome.INTERRUPTED)
#: Upper bounds (seconds) of the lateness histogram's buckets; quantiles are interpolated inside them.
LATENESS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
MINUTE, HOUR, DAY = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
#: At most this many kinds are itemised; the rest are summed under :data:`OTHER_KINDS`.
KIND_ROWS = 100
OTHER_KINDS = "(other kinds)"
#: At most this many live runners, and this many of the wakes they hold, are read.
RUNNER_ROWS = 50
IN_HAND_ROWS = 500


@dataclass(frozen=True)
class KindBacklog:
    """The live wakes of one kind."""

    kind: str
    pending: int = 0
    waiting: int = 0  # pending, its event or answer not come yet (due only at its expiry, if it has one)
    due: int = 0  # pending, due now (overdue ones included)
    overdue: int = 0
    due_next_hour: int = 0
    firing: int = 0
    lapsed: int = 0  # firing, lease run out: its runner is gone

    def __add__(self, other: KindBacklog) -> KindBacklog:
        return KindBacklog(
            self.kind,
            *(getattr(self, name) + getattr(other, name) for name in KIND_COUNTS),
        )


KIND_COUNTS = ("pending", "waiting", "due", "overdue", "due_next_hour", "firing", "lapsed")


@dataclass(frozen=True)
class Backlog:
    """The live wakes, exact counts by kind and in all, and when the oldest overdue one was due.

    ``unwakeable``: due (or lapsed) wakes of a kind outside the fireable kinds :func:`backlog` was
    given (:attr:`~django_wakes.console.attention.Attention.fireable_kinds`); ``None`` when none were given.
    """

    by_kind: list[KindBacklog]
    total: KindBacklog
    oldest_overdue: datetime | None
    unwakeable: int | None = None
    fireable_kinds: frozenset[str] | None = None


def backlog(now: datetime, fireable_kinds: Collection[str] | None = None) -> Backlog:
    """Count the live wakes by kind, and the unwakeable ones when the kinds some runner fires are given.

    One query per live state (``state = 'pending'``, ``state = 'firing'``), not one over both: each
    then matches its state's partial index exactly, where ``state IN (...)`` might scan the table.
    """
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    pending_rows = (
        Wake.objects.using(reads.alias())
        .filter(state=State.PENDING)
        .values_list("kind")
        .annotate(
            pending=Count("id"),
            waiting=Count("id", filter=Q(fire_at__isnull=True)),  # fire_at is set when the trigger comes
            due=Count("id", filter=Q(due_at__lte=now)),
            overdue=Count("id", filter=Q(due_at__lt=now - OVERDUE_AFTER)),
            due_next_hour=Count("id", filter=Q(due_at__gte=now, due_at__lt=now + HOUR)),
        )
        .order_by()
    )
    for kind, pending, waiting, due, overdue, due_next_hour in pending_rows:
        counts[kind].update(pending=pending, waiting=waiting, due=due, overdue=overdue, due_next_hour=due_next_hour)
    firing_rows = (
        Wake.objects.using(reads.alias())
        .filter(state=State.FIRING)
        .values_list("kind")
        .annotate(firing=Count("id"), lapsed=Count("id", filter=Q(lease_until__lte=now)))
        .order_by()
    )
    for kind, firing, lapsed in firing_rows:
        counts[kind].update(firing=firing, lapsed=lapsed)
    kinds = sorted(
        (KindBacklog(kind, **found) for kind, found in counts.items()),
        key=lambda k: (-(k.pending + k.firing), k.kind),
    )
    total = sum(kinds, KindBacklog("all"))
    fireable = None if fireable_kinds is None else frozenset(fireable_kinds)
    unwakeable = None if fireable is None else sum(k.due + k.lapsed for k in kinds if k.kind not in fireable)
    if len(kinds) > KIND_ROWS:
        kinds = [*kinds[:KIND_ROWS], sum(kinds[KIND_ROWS:], KindBacklog(OTHER_KINDS))]
    oldest = Wake.objects.using(reads.alias()).overdue(now).order_by("due_at").values_list("due_at", flat=True).first()
    return Backlog(
        by_kind=kinds,
        total=total,
        oldest_overdue=oldest,
        unwakeable=unwakeable,
        fireable_kinds=fireable,
    )


def hung(attention: Attention) -> int:
    """How many firing wakes have run longer than their lease or their kind's usual time (``attention``'s rule).

    Reads at most :data:`~django_wakes.console.attention.FIRING_LIMIT` firing rows, oldest claims first.
    """
    firing = Wake.objects.using(reads.alias()).filter(state=State.FIRING).order_by("claimed_at", "id")[:FIRING_LIMIT]
    return sum(1 for wake in firing if attention.hung_reason(wake))


def settled_by_state(since: datetime) -> dict[str, int]:
    """How many wakes reached each final state since ``since`` (terminal rows by ``updated_at``)."""
    found = dict(
        Wake.objects.using(reads.alias())
        .filter(state__in=TERMINAL_STATES, updated_at__gte=since)
        .values_list("state")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {state: found.get(state, 0) for state in TERMINAL_STATES}


@dataclass(frozen=True)
class Histogram:
    """Lateness of settling attempts: cumulative counts per upper bound (seconds), as Prometheus keeps them."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]  # attempts no later than each bound
    count: int
    sum_seconds: float

    def quantile(self, q: float) -> float | None:
        """Estimate the ``q`` quantile by linear interpolation inside its bucket (``histogram_quantile``'s rule).

        None when there is nothing to measure; the largest bound when the quantile lies beyond it.
        """
        if self.count == 0:
            return None
        rank = q * self.count
        index = bisect.bisect_left(self.cumulative, rank)
        if index >= len(self.bounds):
            return self.bounds[-1]
        lower = self.bounds[index - 1] if index else 0.0
        below = self.cumulative[index - 1] if index else 0
        inside = self.cumulative[index] - below
        if inside == 0:
            return lower
        return lower + (self.bounds[index] - lower) * (rank - below) / inside


def lateness(since: datetime) -> Histogram:
    """Histogram of due-to-start lateness of the wakes that fired (or expired) since ``since``.

    Read from the wake rows alone: a settled wake's ``claimed_at`` is its settling attempt's start and
    its ``due_at`` what that attempt was due at, and ``updated_at`` is when it settled, so the window is
    a range scan of ``gc``'s index of terminal rows by ``updated_at``. Joining the attempt log instead made
    PostgreSQL hash-join the whole wake table at a million rows.

    Lateness counts from ``due_at`` or, for a wake created after it was due (a Tasks ``run_after``
    long past, an ``at`` from before ``WAKES["PAST_AT_LIMIT"]`` existed), from its creation: no
    runner could have fired it earlier, and years of "lateness" would swamp every quantile.
    """
    due = Greatest(F("due_at"), F("created_at"))
    late = ExpressionWrapper(F("claimed_at") - due, output_field=DurationField())
    rows = Wake.objects.using(reads.alias()).filter(
        state__in=SETTLED_BY_SINK, updated_at__gte=since, due_at__isnull=False, claimed_at__isnull=False
    )
    buckets = {
        f"le{index}": Count("id", filter=LessThanOrEqual(late, Value(timedelta(seconds=bound))))
        for index, bound in enumerate(LATENESS_BUCKETS)
    }
    found = rows.aggregate(count=Count("id"), total=Sum(late), **buckets)
    total = found["total"]
    return Histogram(
        bounds=LATENESS_BUCKETS,
        cumulative=tuple(found[f"le{index}"] for index in range(len(LATENESS_BUCKETS))),
        count=found["count"],
        sum_seconds=_seconds(total),
    )


def _seconds(value: Any) -> float:
    """A summed duration as seconds (backends hand back a timedelta, or microseconds for an empty sum)."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) / 1_000_000


@dataclass(frozen=True)
class Activity:
    """Fires, failures and dead letters per bucket over a window ending with the bucket that holds now."""

    start: datetime
    step: timedelta
    fires: list[int]
    failures: list[int]
    dead: list[int]

    @property
    def times(self) -> list[datetime]:
        return [self.start + i * self.step for i in range(len(self.fires))]


def activity(now: datetime, window: timedelta, step: timedelta) -> Activity:
    """Bucket the attempts (``wakeattempt_finished_idx``) and the dead letters of ``window``.

    ``step`` is a minute or an hour; buckets are aligned on UTC.
    """
    trunc: type[TruncMinute | TruncHour] = TruncMinute if step == MINUTE else TruncHour
    if step not in (MINUTE, HOUR):
        raise ValueError("activity() buckets by the minute or by the hour")
    end = _floor(now, step) + step
    start = end - window
    count = int(window / step)
    fires, failures, dead = [0] * count, [0] * count, [0] * count
    attempts = (
        WakeAttempt.objects.using(reads.alias())
        .filter(finished_at__gte=start, outcome__in=(*SUCCEEDED, *FAILED))
        .annotate(bucket=trunc("finished_at", tzinfo=UTC))
        .values_list("bucket", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    for bucket, outcome, n in attempts:
        index = _index(bucket, start, step, count)
        if index is not None:
            (fires if outcome in SUCCEEDED else failures)[index] += n
    buried = (
        Wake.objects.using(reads.alias())
        .filter(state=State.DEAD, updated_at__gte=start)
        .annotate(bucket=trunc("updated_at", tzinfo=UTC))
        .values_list("bucket")
        .annotate(n=Count("id"))
        .order_by()
    )
    for bucket, n in buried:
        index = _index(bucket, start, step, count)
        if index is not None:
            dead[index] += n
    return Activity(start=start, step=step, fires=fires, failures=failures, dead=dead)


def _floor(moment: datetime, step: timedelta) -> datetime:
    moment = moment.astimezone(UTC)
    if step == MINUTE:
        return moment.replace(second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def _index(bucket: datetime, start: datetime, step: timedelta, count: int) -> int | None:
    index = int((bucket.astimezone(UTC) - start) / step)
    return index if 0 <= index < count else None


def attempts_by_outcome(since: datetime) -> dict[str, int]:
    """How many attempts of each outcome finished since ``since`` (an index-only scan where the database can)."""
    found = dict(
        WakeAttempt.objects.using(reads.alias())
        .filter(finished_at__gte=since)
        .values_list("outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {outcome: found.get(outcome, 0) for outcome in Outcome.values}


def missed_occurrences(since: datetime) -> dict[str, int]:
    """Recurring slots that will never fire, by catch-up policy, of the occurrences settled since ``since``.

    The claim saves ``"missed": N`` in the result of an occurrence that stood for N slots (``latest``)
    or was closed unfired (``skip``). Counting a row when it *settles* (``settled_at``, written once)
    counts it once, even when it was claimed in one window and settled in the next. ``updated_at``
    equals ``settled_at`` on a settled row, so the range scan runs on ``gc``'s index of terminal rows.
    """
    found = (
        Wake.objects.using(reads.alias())
        .filter(
            state__in=TERMINAL_STATES,
            updated_at__gte=since,
            settled_at__gte=since,
            chain_id__isnull=False,
            result__has_key="missed",
        )
        .values_list("catch_up")
        .annotate(n=Sum(Cast(KeyTextTransform("missed", "result"), IntegerField())))
        .order_by()
    )
    return {policy: int(n or 0) for policy, n in found}


@dataclass(frozen=True)
class HeldWake:
    """A firing wake as its runner's row shows it."""

    id: int
    kind: str
    serial_key: str | None
    claimed_at: datetime | None
    lease_until: datetime | None


@dataclass(frozen=True)
class RunnerInHand:
    """A live runner and the wakes it holds (the first few; ``holding`` counts them all)."""

    runner: Runner
    holding: int
    wakes: list[HeldWake]


@dataclass(frozen=True)
class Runners:
    """Live runners, how many are stale, and firing wakes held by no live runner."""

    live: list[RunnerInHand]
    live_count: int
    stale_count: int
    orphaned: int  # firing wakes whose runner is not live (they will be taken over when the lease lapses)


def runners(now: datetime, *, wakes_per_runner: int = 5) -> Runners:
    """Read the live runners (``runner_heartbeat_idx``) and the firing wakes (``state = 'firing'``)."""
    live_rows = list(Runner.objects.using(reads.alias()).live(now).order_by("started_at", "id")[:RUNNER_ROWS])
    live_ids = set(
        Runner.objects.using(reads.alias()).live(now).values_list("id", flat=True)
    )  # runners are few: one row a process
    stale_count = Runner.objects.using(reads.alias()).stale(now).count()
    firing = Wake.objects.using(reads.alias()).filter(state=State.FIRING)
    holding = dict(firing.values_list("claimed_by").annotate(n=Count("id")).order_by())
    held: dict[str, list[HeldWake]] = defaultdict(list)
    for row in firing.order_by("claimed_at", "id").values_list(
        "id", "kind", "serial_key", "claimed_by", "claimed_at", "lease_until"
    )[:IN_HAND_ROWS]:
        wake_id, kind, serial_key, claimed_by, claimed_at, lease_until = row
        if len(held[claimed_by]) < wakes_per_runner:
            held[claimed_by].append(HeldWake(wake_id, kind, serial_key, claimed_at, lease_until))
    orphaned = sum(n for runner_id, n in holding.items() if runner_id not in live_ids)
    return Runners(
        live=[RunnerInHand(runner, holding.get(runner.id, 0), held.get(runner.id, [])) for runner in live_rows],
        live_count=len(live_ids),
        stale_count=stale_count,
        orphaned=orphaned,
    )
