"""The query vocabulary of :class:`~django_wakes.models.Wake`: one method per intention.

This is the one module that knows how a claimable wake is found; ``engine`` composes these.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import models
from django.db.models import Exists, OuterRef, Q

from . import clock
from .conf import wakes_settings
from .states import TERMINAL_STATES, State

if TYPE_CHECKING:
    from .models import Runner, Wake  # noqa: F401  (named in the QuerySet[...] annotations)

PENDING, FIRING = State.PENDING, State.FIRING
#: A pending wake due longer ago than this is "overdue" to an operator (no runner is keeping up).
OVERDUE_AFTER = timedelta(minutes=1)
#: The order due wakes are claimed in: higher priority first, then earliest due.
CLAIM_ORDER = ("-priority", "due_at", "id")


class WakeQuerySet(models.QuerySet["Wake"]):
    def pending(self) -> WakeQuerySet:
        return self.filter(state=PENDING)

    def due(self, now: datetime) -> WakeQuerySet:
        """Pending wakes whose time, trigger or expiry has come (never one tick early)."""
        return self.filter(state=PENDING, due_at__lte=now)

    def of_kinds(self, kinds: Iterable[str]) -> WakeQuerySet:
        return self.filter(kind__in=list(kinds))

    def lane_free(self) -> WakeQuerySet:
        """Drop wakes whose lane has a firing wake (a cheap pre-filter; the unique lane_lock decides)."""
        # state=FIRING says what the check constraint already guarantees (lane_lock is set only while
        # firing), so that a planner hashing this probe reads the few firing rows, not the whole table.
        holder = self.model._default_manager.filter(lane_lock=OuterRef("serial_key"), state=FIRING)
        return self.filter(Q(serial_key__isnull=True) | ~Exists(holder))

    def lane_heads(self) -> WakeQuerySet:
        """Keep only wakes with no earlier pending, due-dated wake in their lane (earliest first)."""
        # Two NOT EXISTS rather than one with an OR: each is a single range probe of
        # wake_pending_lane_idx ((serial_key, due_at, id) over pending rows in a lane); PostgreSQL
        # cannot use the index for the OR and would scan every pending wake of the lane for every
        # candidate. (MySQL/MariaDB: wake_my_lane_head_idx (serial_key, state, due_at, id).)
        lane = self.model._default_manager.filter(state=PENDING, serial_key=OuterRef("serial_key"))
        earlier_due = lane.filter(due_at__lt=OuterRef("due_at"))
        same_due_lower_id = lane.filter(due_at=OuterRef("due_at"), id__lt=OuterRef("id"))
        return self.filter(Q(serial_key__isnull=True) | (~Exists(earlier_due) & ~Exists(same_due_lower_id)))

    def in_queues(self, queues: Iterable[str] | None) -> WakeQuerySet:
        """Wakes of these queues (all of them for ``None``): what a ``runwakes --queues`` runner serves."""
        return self if queues is None else self.filter(queue_name__in=list(queues))

    def lane_not_paused(self) -> WakeQuerySet:
        """Drop wakes whose lane an operator paused (:class:`~django_wakes.models.PausedLane`)."""
        # The model by name, not by import: models imports this module (no models <-> querysets cycle).
        paused_lanes = self.model._meta.apps.get_model("django_wakes", "PausedLane")
        paused = paused_lanes.objects.filter(serial_key=OuterRef("serial_key"))
        return self.filter(Q(serial_key__isnull=True) | ~Exists(paused))

    def claimable(self, now: datetime, kinds: Iterable[str], queues: Iterable[str] | None = None) -> WakeQuerySet:
        """Due wakes a runner may claim now: a registered kind and queue, at the head of a free, unpaused lane.

        A higher ``priority`` is claimed first; within a priority, the earliest due.
        """
        return (
            self.due(now)
            # Always true (the column is NOT NULL), and the predicate of wake_pending_order_idx: the
            # claim's scan may walk that index in claim order, the lane probes (no such condition)
            # cannot, whatever the statistics say about its size.
            .filter(priority__isnull=False)
            .of_kinds(kinds)
            .in_queues(queues)
            .lane_free()
            .lane_not_paused()
            .lane_heads()
            .order_by(*CLAIM_ORDER)
        )

    def lock_pending(self, ids: Iterable[int], now: datetime) -> WakeQuerySet:
        """Lock these rows if still pending and due, skipping any another runner is claiming right now.

        The only place that uses ``select_for_update(skip_locked=True)``: a runner never waits
        behind another's claim, it moves on (duplicates waste a read, never double-fire). The
        candidates were read without locks, so what an operator committed since is checked again
        on the locked rows: a wake rescheduled later, a paused chain (``due_at`` cleared) or a
        paused lane is not taken.
        """
        return (
            self.filter(id__in=list(ids), state=PENDING, due_at__lte=now)
            .lane_not_paused()
            .select_for_update(skip_locked=True)
            .order_by(*CLAIM_ORDER)
        )

    def lapsed(self, now: datetime) -> WakeQuerySet:
        """Firing wakes whose lease ran out: their runner crashed, was killed or stalled."""
        return self.filter(state=FIRING, lease_until__lte=now)

    def lock_lapsed(self, now: datetime, kinds: Iterable[str], limit: int) -> WakeQuerySet:
        return (
            self.lapsed(now).of_kinds(kinds).select_for_update(skip_locked=True).order_by("lease_until", "id")[:limit]
        )

    def unwakeable(self, now: datetime, kinds: Iterable[str]) -> WakeQuerySet:
        """Due wakes, and lapsed firing ones, that no registered sink can fire."""
        waiting = Q(state=PENDING, due_at__lte=now) | Q(state=FIRING, lease_until__lte=now)
        return self.filter(waiting).exclude(kind__in=list(kinds))

    def overdue(self, now: datetime) -> WakeQuerySet:
        """Pending wakes due for over :data:`OVERDUE_AFTER`: nobody is firing them in time."""
        return self.filter(state=PENDING, due_at__lt=now - OVERDUE_AFTER)

    def failing(self) -> WakeQuerySet:
        """Pending wakes whose last attempt failed (they wait for their retry)."""
        return self.filter(state=PENDING).exclude(last_error="")

    def terminal_before(self, cutoff: datetime) -> WakeQuerySet:
        return self.filter(state__in=TERMINAL_STATES, updated_at__lt=cutoff)


def stale_after(lease: timedelta | None = None) -> timedelta:
    """How old a runner's heartbeat may be before the runner is presumed dead.

    Three heartbeat periods (a heartbeat comes every lease/3, at most every 10 s), at least 5 s.
    """
    lease = lease or wakes_settings.lease
    return timedelta(seconds=max(3 * min(lease.total_seconds() / 3, 10.0), 5.0))


def live_since(now: datetime | None = None) -> datetime:
    """The oldest heartbeat that still counts as alive: the one liveness rule for runner rows."""
    return (now or clock.now()) - stale_after()


class RunnerQuerySet(models.QuerySet["Runner"]):
    """Runner rows by liveness; the admin and ``wakes status`` both ask here."""

    def live(self, now: datetime | None = None) -> RunnerQuerySet:
        return self.filter(heartbeat_at__gte=live_since(now))

    def stale(self, now: datetime | None = None) -> RunnerQuerySet:
        return self.filter(heartbeat_at__lt=live_since(now))
