"""Catch-up: what an occurrence's firing stands for when slots were missed, and where the next one goes.

:func:`plan_catch_up` decides at claim time (``replay``, ``latest`` or ``skip``); :func:`next_slot`
picks the next slot at settle time, from the slot the firing stood for (never from the wall clock).
This module decides; the engine writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..models import Wake
from ..states import CatchUp, TriggerType
from .grids import grid_for


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
