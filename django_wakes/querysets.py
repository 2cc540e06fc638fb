"""The query vocabulary of :class:`~django_wakes.models.Wake`: one method per intention.

This is the one module that knows how a claimable wake is found; ``engine`` composes these.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import models
from django.db.models import Exists, OuterRef, Q

if TYPE_CHECKING:
    from .models import Wake  # noqa: F401  (named in the QuerySet["Wake"] annotation)

PENDING, FIRING = "pending", "firing"
TERMINAL = ("fired", "expired", "cancelled", "dead")


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
        holder = self.model._default_manager.filter(lane_lock=OuterRef("serial_key"))
        return self.filter(Q(serial_key__isnull=True) | ~Exists(holder))

    def lane_heads(self) -> WakeQuerySet:
        """Keep only wakes with no earlier pending, due-dated wake in their lane (earliest first)."""
        # Two NOT EXISTS rather than one with an OR: each is a single range probe of
        # wake_lane_head_idx (serial_key, state, due_at, id); PostgreSQL cannot use the index for the
        # OR and would scan every pending wake of the lane for every candidate.
        lane = self.model._default_manager.filter(state=PENDING, serial_key=OuterRef("serial_key"))
        earlier_due = lane.filter(due_at__lt=OuterRef("due_at"))
        same_due_lower_id = lane.filter(due_at=OuterRef("due_at"), id__lt=OuterRef("id"))
        return self.filter(Q(serial_key__isnull=True) | (~Exists(earlier_due) & ~Exists(same_due_lower_id)))

    def claimable(self, now: datetime, kinds: Iterable[str]) -> WakeQuerySet:
        """Due wakes a runner may claim now: a registered kind, at the head of a free lane."""
        return self.due(now).of_kinds(kinds).lane_free().lane_heads().order_by("due_at", "id")

    def lock_pending(self, ids: Iterable[int]) -> WakeQuerySet:
        """Lock these rows if still pending, skipping any another runner is claiming right now.

        The only place that uses ``select_for_update(skip_locked=True)``: a runner never waits
        behind another's claim, it moves on (duplicates waste a read, never double-fire).
        """
        return self.filter(id__in=list(ids), state=PENDING).select_for_update(skip_locked=True).order_by("due_at", "id")

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

    def terminal_before(self, cutoff: datetime) -> WakeQuerySet:
        return self.filter(state__in=TERMINAL, updated_at__lt=cutoff)
