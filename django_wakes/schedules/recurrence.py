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

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from ..durations import Duration
from ..exceptions import InvalidSchedule
from ..models import Wake
from ..states import CatchUp, TriggerType
from ..timeutil import to_datetime
from .catch_up import CatchUpPlan, next_slot, plan_catch_up
from .cron import CronGrid, _cron_grid
from .dst import DstPolicy, _zone_name, dst_policy
from .gaps import Gap, closest
from .grids import EveryGrid, Grid, _every, grid_for
from .preview import Occurrence, preview, upcoming

__all__ = [
    "CatchUpPlan",
    "CronGrid",
    "DstPolicy",
    "EveryGrid",
    "Gap",
    "Grid",
    "Occurrence",
    "chain_key",
    "closest",
    "dst_policy",
    "grid_for",
    "next_slot",
    "occurrence_fields",
    "plan_catch_up",
    "plan_chain",
    "preview",
    "upcoming",
]

_TINY = timedelta(microseconds=1)


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
        "limit_key": wake.limit_key,
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
