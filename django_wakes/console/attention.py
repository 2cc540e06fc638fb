"""What needs an operator's attention beyond the state column: hung and unwakeable wakes (read-only, bounded).

* **Hung**: a firing wake, its lease still held, whose current claim has been running longer than the lease
  (``WAKES["LEASE"]``; a live runner renews its lease, so the lease alone never says a sink hangs), or
  far longer than its kind usually takes: more than :data:`HUNG_FACTOR` times the median duration of
  the kind's recent fired attempts, and at least :data:`HUNG_FLOOR`.
* **Held by its lane**: a due pending wake whose lane fires another wake first: the firing wake that holds
  the lane (hung, lapsed or just running), or the pending wake at the lane's head (unwakeable, say).
* **No runner is running**: no ``Runner`` row has a recent heartbeat (``runner_heartbeat_idx``, the rule
  of :func:`~django_wakes.querysets.live_since`): every due wake waits, whatever its kind.
* **Unwakeable**: a due pending wake (or a lapsed firing one) whose kind no live runner fires. Each
  ``runwakes`` records the kinds it has sinks for (``Runner.kinds``) when it registers; the union over
  live runners is what can fire. The process asking (the admin's web server) may register different
  sinks than the runners, so its own registry is consulted only when no live runner recorded its kinds
  (no runner up, or runners that predate ``Runner.kinds``).

Every query is bounded: firing wakes (few: at most the runners' batches) through ``wake_firing_lease_idx``, the
last :data:`HISTORY` fired attempts by primary key, live runner rows; a lane's holder through the unique
``lane_lock`` index and its head through ``wake_pending_lane_idx``, once per lane and page.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import cached_property
from statistics import median
from typing import Any

from django.http import HttpResponse
from django.template.response import TemplateResponse

from .. import clock
from ..conf import wakes_settings
from ..engine import limit_rules, limit_slots
from ..engine.limit_slots import Hold
from ..models import Outcome, PausedLane, Runner, State, Wake, WakeAttempt
from ..querysets import WakeQuerySet, live_since
from ..sinks import registry
from . import reads

#: A firing wake running this many times longer than its kind's median duration is hung...
HUNG_FACTOR = 10
#: ...provided it has been running at least this long (a 20 ms sink taking 300 ms is not hung).
HUNG_FLOOR = timedelta(seconds=5)
#: How many of the most recent fired attempts the typical durations are read from.
HISTORY = 2000
#: A kind needs this many fired attempts in that history to have a typical duration.
MIN_SAMPLES = 5
#: At most this many paused lanes are read to annotate the list.
PAUSED_LIMIT = 1000
#: At most this many firing wakes are examined (more firing at once than this is itself the news).
FIRING_LIMIT = 1000
#: At most this many kinds of unwakeable wakes are looked for (one bounded query each) for the kind filter.
KIND_PROBES = 20
#: What is read of a wake that holds up its lane: enough to say why (never its payloads).
BLOCKER_FIELDS = (
    "id",
    "kind",
    "state",
    "serial_key",
    "lane_lock",
    "due_at",
    "claimed_at",
    "sink_started_at",
    "lease_until",
)


def seconds(delta: timedelta) -> str:
    """A short duration for people: ``0.2s``, ``75s``, ``3m05s``, ``2h10m``."""
    total = delta.total_seconds()
    if total < 60:
        return f"{total:.1f}s" if total < 10 else f"{total:.0f}s"
    minutes, secs = divmod(int(total), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Attention:
    """One look at the wakes, at one moment: the answers are computed once and reused for every row shown."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or clock.now()
        self._kinds: frozenset[str] | None = None
        self._kinds_source = ""
        self._typical: dict[str, timedelta] | None = None
        self._paused: frozenset[str] | None = None
        self._holders: dict[str, Wake | None] = {}
        self._heads: dict[str, Wake | None] = {}
        self._unwakeable_kinds: list[str] | None = None
        self._holds: dict[Any, Hold] | None = None

    # -- runners ------------------------------------------------------------------------------------

    @cached_property
    def last_runner(self) -> Runner | None:
        """The runner whose heartbeat is the latest, live or not (None: no runner row at all)."""
        return Runner.objects.using(reads.alias()).order_by("-heartbeat_at").first()

    @property
    def no_runner(self) -> bool:
        """Whether no runner is running: no heartbeat recent enough (every due wake waits for one to start)."""
        last = self.last_runner
        return last is None or last.heartbeat_at < live_since(self.now)

    def waits_for_a_runner(self, wake: Wake) -> bool:
        """Whether this wake is due (or its lease lapsed) while no runner is running to fire it."""
        due = wake.state == State.PENDING and wake.due_at is not None and wake.due_at <= self.now
        return (due or self.lapsed(wake)) and self.no_runner

    # -- unwakeable ---------------------------------------------------------------------------------

    @property
    def fireable_kinds(self) -> frozenset[str]:
        """The kinds some live runner fires (or, if no live runner recorded any, this process's registry)."""
        if self._kinds is None:
            recorded = [
                kinds
                for kinds in Runner.objects.using(reads.alias()).live(self.now).values_list("kinds", flat=True)
                if kinds
            ]
            if recorded:
                self._kinds = frozenset(kind for kinds in recorded for kind in kinds)
                self._kinds_source = "live runners"
            else:
                self._kinds = frozenset(registry.kinds())
                self._kinds_source = "this process's registry (no live runner recorded its kinds)"
        return self._kinds

    @property
    def kinds_source(self) -> str:
        """Where :attr:`fireable_kinds` came from, to tell the operator."""
        self.fireable_kinds  # noqa: B018  # computes it
        return self._kinds_source

    def unwakeable(self, wakes: WakeQuerySet) -> WakeQuerySet:
        """Due pending wakes, and lapsed firing ones, of a kind no live runner fires."""
        return wakes.unwakeable(self.now, self.fireable_kinds)

    def is_unwakeable(self, wake: Wake) -> bool:
        waiting = (wake.state == State.PENDING and wake.due_at is not None and wake.due_at <= self.now) or (
            wake.state == State.FIRING and wake.lease_until is not None and wake.lease_until <= self.now
        )
        return waiting and wake.kind not in self.fireable_kinds

    def unwakeable_kinds(self) -> list[str]:
        """The kinds of the unwakeable wakes (at most :data:`KIND_PROBES`), sorted: for the kind filter.

        One ``LIMIT 1`` query per kind found, each leaving out the kinds already known, so a kind with
        a million stranded wakes does not hide another with one. Each reads the due pending (and lapsed
        firing) rows by their partial indexes, as the "unwakeable" filter does; no scan of the table.
        """
        if self._unwakeable_kinds is None:
            found: list[str] = []
            stranded = Wake.objects.using(reads.alias()).order_by()
            for _probe in range(KIND_PROBES):
                kind = stranded.unwakeable(self.now, [*self.fireable_kinds, *found]).values_list("kind", flat=True)
                first = list(kind[:1])
                if not first:
                    break
                found.append(first[0])
            self._unwakeable_kinds = sorted(found)
        return self._unwakeable_kinds

    # -- paused lanes -------------------------------------------------------------------------------

    @property
    def paused_lanes(self) -> frozenset[str]:
        """Lanes an operator paused (the first :data:`PAUSED_LIMIT`; a handful in practice)."""
        if self._paused is None:
            self._paused = frozenset(
                PausedLane.objects.using(reads.alias()).values_list("serial_key", flat=True)[:PAUSED_LIMIT]
            )
        return self._paused

    def waits_for_paused_lane(self, wake: Wake) -> bool:
        """Whether this due pending wake is held back only because an operator paused its lane."""
        due = wake.state == State.PENDING and wake.due_at is not None and wake.due_at <= self.now
        return due and wake.serial_key is not None and wake.serial_key in self.paused_lanes

    # -- held by the lane -------------------------------------------------------------------------

    def know_lanes(self, wakes: list[Wake]) -> None:
        """Read the holders of these wakes' lanes in one query (a list page asks about all its rows)."""
        keys = {w.serial_key for w in wakes if w.serial_key and w.serial_key not in self._holders}
        if keys:
            held = {w.lane_lock: w for w in Wake.objects.filter(lane_lock__in=keys).only(*BLOCKER_FIELDS)}
            self._holders.update({key: held.get(key) for key in keys})

    def lane_blocker(self, wake: Wake) -> Wake | None:
        """The wake its lane fires before this due pending one: the firing holder, else the pending head."""
        key = wake.serial_key
        if key is None or wake.state != State.PENDING or wake.due_at is None or wake.due_at > self.now:
            return None
        if key not in self._holders:
            self._holders[key] = Wake.objects.filter(lane_lock=key).only(*BLOCKER_FIELDS).first()
        if self._holders[key] is not None:
            return self._holders[key]
        if key not in self._heads:
            pending = Wake.objects.filter(serial_key=key, state=State.PENDING).order_by("due_at", "id")
            self._heads[key] = pending.only(*BLOCKER_FIELDS).first()
        head = self._heads[key]
        return head if head is not None and head.pk != wake.pk else None

    # -- held by a limit ------------------------------------------------------------------------

    def limit_hold(self, wake: Wake) -> Hold | None:
        """The full limit (``WAKES["LIMITS"]``, ``WAKES["WORKSPACE_LIMIT"]``) holding this due wake back, if any."""
        if self._holds is None:
            active = limit_rules.active()
            self._holds = limit_slots.full(reads.alias(), self.now, limit_rules.current()) if active else {}
        return limit_slots.hold_of(wake, self._holds, self.now)

    # -- hung ---------------------------------------------------------------------------------------

    @property
    def typical(self) -> dict[str, timedelta]:
        """The median duration of each kind's fired attempts among the last :data:`HISTORY`."""
        if self._typical is None:
            rows = (
                WakeAttempt.objects.using(reads.alias())
                .filter(outcome=Outcome.FIRED, finished_at__isnull=False)
                .order_by("-id")
                .values_list("wake__kind", "started_at", "finished_at")[:HISTORY]
            )
            samples: dict[str, list[float]] = {}
            for kind, started, finished in rows:
                if finished is not None:
                    samples.setdefault(kind, []).append((finished - started).total_seconds())
            self._typical = {
                kind: timedelta(seconds=median(values))
                for kind, values in samples.items()
                if len(values) >= MIN_SAMPLES
            }
        return self._typical

    def running_for(self, wake: Wake) -> timedelta | None:
        """How long the current claim of a firing wake has been running (from its sink's start when recorded)."""
        if wake.state != State.FIRING:
            return None
        since = wake.sink_started_at or wake.claimed_at
        return None if since is None else self.now - since

    def hung_reason(self, wake: Wake) -> str:
        """Why this firing wake counts as hung, or ``""``."""
        running = self.running_for(wake)
        if running is None or self.lapsed(wake):
            return ""  # a lapsed lease means the runner is gone, not that its sink hangs
        lease = wakes_settings.lease
        if running > lease:
            return f"firing for {seconds(running)}, longer than its lease ({seconds(lease)})"
        usual = self.typical.get(wake.kind)
        if usual is not None and running > max(usual * HUNG_FACTOR, HUNG_FLOOR):
            return f"firing for {seconds(running)}; {wake.kind} usually takes {seconds(usual)}"
        return ""

    def lapsed(self, wake: Wake) -> bool:
        """Whether a firing wake's lease ran out (its runner died or stalled; any runner re-drives it)."""
        return wake.state == State.FIRING and wake.lease_until is not None and wake.lease_until <= self.now

    def hung(self, wakes: WakeQuerySet) -> WakeQuerySet:
        """The firing wakes :meth:`hung_reason` has a reason for."""
        firing = (
            Wake.objects.using(reads.alias()).filter(state=State.FIRING).order_by("claimed_at", "id")[:FIRING_LIMIT]
        )
        return wakes.filter(pk__in=[wake.pk for wake in firing if self.hung_reason(wake)])


#: The page being rendered's one look at the wakes (list columns get no request to carry it).
_ATTENTION: ContextVar[Attention | None] = ContextVar("django_wakes_admin_attention", default=None)


def current_attention() -> Attention:
    """The :class:`Attention` of the page being rendered, or a fresh one outside a page."""
    return _ATTENTION.get() or Attention()


def rendered_with_attention(view: Callable[[], HttpResponse]) -> HttpResponse:
    """Run and render a page while one :class:`Attention` answers "hung?" and "unwakeable?" for all its rows."""
    token = _ATTENTION.set(Attention())
    try:
        response = view()
        if isinstance(response, TemplateResponse):
            response.render()
        return response
    finally:
        _ATTENTION.reset(token)
