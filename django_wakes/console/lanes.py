"""Lanes as an operator sees them: who holds a lane and since when, the queue behind it, paused or not.

Read-only, and bounded whatever the table holds: a lane's holder is found through the unique
``lane_lock`` index, its queue through ``wake_pending_lane_idx`` (``serial_key, due_at, id`` of pending rows)
with a LIMIT, counted up to :data:`COUNT_CAP`; the lists look at no more than :data:`LANES_SHOWN` firing
wakes and the first :data:`DUE_SCAN` due wakes (``wake_pending_due_idx``). Pausing and resuming are engine
transitions (:func:`django_wakes.engine.pause_lane`, :func:`~django_wakes.engine.resume_lane`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import clock
from ..models import PausedLane, State, Wake

#: A lane's waiting wakes are counted up to this many ("1000+" beyond).
COUNT_CAP = 1000
#: How many of a lane's next wakes are listed on its own page, and on the overview.
NEXT_SHOWN, NEXT_SHOWN_IN_LIST = 10, 3
#: At most this many lanes in each list of the overview.
LANES_SHOWN = 50
#: The overview's "due but not moving" list looks at the first this many due wakes only.
DUE_SCAN = 500


@dataclass
class LaneQueue:
    """One lane now: the wake holding it (firing), whether it is paused, and the pending wakes behind it."""

    key: str
    holder: Wake | None
    paused: PausedLane | None
    waiting: int
    next: list[Wake] = field(default_factory=list)
    #: What the holder is doing (firing since, hung, lease lapsed), as the page shows it; set by the page.
    holder_note: str = ""

    @property
    def waiting_label(self) -> str:
        return f"{COUNT_CAP}+" if self.waiting > COUNT_CAP else str(self.waiting)


def _queue(key: str, holder: Wake | None, paused: PausedLane | None, shown: int) -> LaneQueue:
    pending = Wake.objects.filter(serial_key=key, state=State.PENDING)
    waiting = pending.order_by()[: COUNT_CAP + 1].count()
    upcoming = list(pending.order_by("due_at", "id")[:shown]) if waiting else []
    return LaneQueue(key, holder, paused, waiting, upcoming)


def lane_queue(key: str, shown: int = NEXT_SHOWN) -> LaneQueue:
    """One lane: its holder, pause and the next ``shown`` pending wakes in the order the lane fires them."""
    holder = Wake.objects.filter(lane_lock=key).first()
    paused = PausedLane.objects.filter(serial_key=key).first()
    return _queue(key, holder, paused, shown)


def _paused(keys: list[str]) -> dict[str, PausedLane]:
    return {p.serial_key: p for p in PausedLane.objects.filter(serial_key__in=keys)}


def busy_lanes(limit: int = LANES_SHOWN) -> list[LaneQueue]:
    """Lanes a firing wake holds, longest-held first, each with the queue behind it."""
    holders = list(
        Wake.objects.filter(state=State.FIRING, serial_key__isnull=False).order_by("claimed_at", "id")[:limit]
    )
    paused = _paused([h.serial_key for h in holders if h.serial_key])
    return [_queue(h.serial_key, h, paused.get(h.serial_key), NEXT_SHOWN_IN_LIST) for h in holders if h.serial_key]


def waiting_lanes(limit: int = LANES_SHOWN) -> list[LaneQueue]:
    """Lanes with a due wake that nothing holds: paused, no live runner for the kind, or just about to fire.

    Taken from the first :data:`DUE_SCAN` due wakes, earliest first (the ones that have waited longest).
    """
    due = Wake.objects.filter(state=State.PENDING, due_at__lte=clock.now()).order_by("due_at", "id")
    keys: list[str] = []
    for key in due.values_list("serial_key", flat=True)[:DUE_SCAN]:
        if key is not None and key not in keys:
            keys.append(key)
    held = set(Wake.objects.filter(lane_lock__in=keys).values_list("lane_lock", flat=True)) if keys else set()
    keys = [key for key in keys if key not in held][:limit]
    paused = _paused(keys)
    return [_queue(key, None, paused.get(key), NEXT_SHOWN_IN_LIST) for key in keys]
