"""A recurring wake made for an agent keeps the session's budgets at every occurrence, not only the first.

A chain books its own occurrences, one after another, inside the settle that fired the previous one:
no create call is made for them, so no budget would be asked. Its budgets are therefore settled when
it is created (``budget=True``: every tool call, and host code that asks), for every occurrence it
will ever book:

* ``SESSION_MIN_DELAY``: the first occurrence is the first slot at or after now + the minimum delay
  (never "refused or not depending on the second the call arrives"), and no two consecutive
  occurrences come closer than it (:func:`~django_wakes.schedules.gaps.closest`, through recurrence:
  ``3-59 * * * *`` is refused under a 90 s minimum like ``* * * * *``, whose occurrences are as close);
* ``SESSION_COOLDOWN``: no two consecutive occurrences come closer than it either (each occurrence
  is a turn the session did not ask for at the time);
* ``SESSION_MAX_HORIZON``: the chain ends at now + the horizon (its ``end_at`` is lowered to it, and
  every occurrence carries it), so no occurrence lies further ahead than a one-off wake may;
* and since either spacing (minimum delay or cooldown) would be broken by a catch-up that fires missed
  occurrences back to back (``replay``) or fires one late turn just before the next slot (``latest``),
  such a chain catches up with ``skip``: after an outage it resumes at its next future slot, so two of
  its turns never come closer than the grid allows.

A refusal is :class:`~django_wakes.exceptions.BudgetExceeded` naming the limit, with the two
occurrences that come too close in the message; a tool reports ``too_soon`` (minimum delay) or
``budget_exceeded`` (cooldown).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..durations import plain_duration
from ..exceptions import BudgetExceeded, InvalidSchedule
from ..schedules import recurrence
from ..schedules.recurrence import CronGrid, DstPolicy, EveryGrid, Grid
from ..states import CatchUp
from .shared import earliest

_TINY = timedelta(microseconds=1)


def _grid(fields: dict[str, Any]) -> Grid:
    """The slot grid of a chain about to be created (its first slot anchors an ``every`` grid, as it will)."""
    if fields.get("cron"):
        policy = DstPolicy(fields.get("dst_ambiguous") or "auto", fields.get("dst_missing") or "shift")
        return CronGrid(fields["cron"], fields["tz"], policy)
    return EveryGrid(fields["every"], fields["fire_at"])


def fit_chain(
    fields: dict[str, Any],
    now: datetime,
    *,
    soonest: timedelta | None,
    latest: timedelta | None,
    cooldown: timedelta | None,
) -> dict[str, Any]:
    """Return a new chain's ``fields`` moved and ended to keep the budgets; raise ``BudgetExceeded`` if it cannot.

    ``fields`` that are no new chain (a one-off wake, a watch, an approval) come back as they are.
    """
    first: datetime | None = fields.get("fire_at")
    if not fields.get("chain_id") or first is None or not (fields.get("cron") or fields.get("every")):
        return fields
    grid = _grid(fields)
    if soonest is not None and first - now < soonest:
        first = grid.next_after(now + soonest - _TINY)  # the first slot at or after now + the minimum delay
        if first is None:
            raise InvalidSchedule(f"cron: {fields['cron']!r} never fires after {plain_duration(soonest)} from now")
    end: datetime | None = fields.get("end_at")
    if latest is not None and (end is None or end > now + latest):
        end = now + latest
    if end is not None and first > end:
        if latest is not None and first - now > latest:
            return {**fields, "fire_at": first}  # the horizon check refuses it (too_far), as a one-off wake
        raise BudgetExceeded(
            "session_min_delay",
            f"this schedule's first occurrence at least {plain_duration(soonest or timedelta(0))} from now "
            f"({first.isoformat()}) is after its end_at ({end.isoformat()})",
        )
    bounds = [
        (limit, bound) for limit, bound in (("session_min_delay", soonest), ("session_cooldown", cooldown)) if bound
    ]
    if bounds:
        widest = max(bound for _limit, bound in bounds)
        close = recurrence.closest(grid, first, end, widest)
        if close is not None:
            limit, bound = next((limit, bound) for limit, bound in bounds if close.gap < bound)
            what = "a wake must fire" if limit == "session_min_delay" else "this session's turns must come"
            raise BudgetExceeded(
                limit,
                f"this schedule fires twice within {plain_duration(close.gap)} "
                f"({close.before:%Y-%m-%d %H:%M} and {close.after:%Y-%m-%d %H:%M} local time); "
                f"{what} at least {plain_duration(bound)} apart, at every occurrence",
            )
    fitted = {**fields, "fire_at": first, "end_at": end, "due_at": earliest(first, fields.get("expires_at"))}
    if bounds:
        fitted["catch_up"] = CatchUp.SKIP  # replay/latest would fire turns closer than the bounds after an outage
    return fitted
