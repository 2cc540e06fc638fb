"""Claiming locked rows: each one's result decided, then one conditional UPDATE per result shape.

The result is what the sink is handed: an expiry, an approval's default answer, or what a recurring
occurrence's catch-up plan says it stands for (:func:`~django_wakes.schedules.recurrence.plan_catch_up`).

A missed occurrence under ``catch_up="skip"`` is closed here (``cancelled``) and its next slot
booked; the unique ``lane_lock`` refuses a racing claim of a busy lane, which is then dropped.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from .. import signals
from ..conf import wakes_settings
from ..logs import about
from ..models import State, TriggerType, Wake
from ..schedules import recurrence
from . import create, limit_slots
from .leases import Claim, next_fence
from .shared import logger, new_claim_token


def _claim_result(wake: Wake, now: datetime) -> tuple[dict[str, Any], bool]:
    """Decide, at claim time, what this firing delivers; it is persisted before the sink runs."""
    if wake.result is not None:
        return wake.result, bool(wake.result.get("expired"))
    if wake.expires_at is not None and wake.expires_at <= now:
        if wake.trigger_type == TriggerType.ON_APPROVAL and wake.on_expiry is not None:
            # request_approval(on_expiry=...): no one answered in time, so the default answer is delivered
            return {"trigger": wake.trigger_type, "answer": wake.on_expiry, "defaulted": True}, False
        return {"trigger": wake.trigger_type, "expired": True}, True
    return {"trigger": TriggerType.AT.value}, False


def _skip_occurrence(using: str, wake: Wake, plan: recurrence.CatchUpPlan, now: datetime) -> None:
    """Close a missed occurrence under ``catch_up="skip"`` without firing it, and book the next slot.

    Runs inside the claim transaction with the row locked, so it cannot race a claim of the same row.
    """
    closed = (
        Wake.objects.using(using)
        .filter(pk=wake.pk, state=State.PENDING)
        .update(
            state=State.CANCELLED,
            result=plan.result,
            due_at=None,
            coalesce_key=None,
            settled_at=now,
            updated_at=now,
        )
    )
    if closed:
        logger.info(
            "wake %s (chain %s): skipped %d missed occurrence(s)",
            wake.pk,
            wake.chain_id,
            plan.result["missed"],
            extra=about(wake),
        )
        if plan.next_slot is not None:
            # A held occurrence an operator fired by hand books its successor held: the chain stays paused.
            create.book_occurrence(wake, plan.next_slot, wake.end_at, paused_at=wake.paused_at)


def _announce_missed(using: str, wake: Wake, missed: int) -> None:
    """Send :data:`~django_wakes.signals.occurrences_missed` once the claim (or the skip) commits."""
    transaction.on_commit(
        partial(signals.occurrences_missed.send, sender=Wake, wake=wake, missed=missed, policy=wake.catch_up),
        using=using,
    )


def _claim_rows(
    using: str,
    rows: list[Wake],
    now: datetime,
    runner_id: str,
    lease: timedelta | None = None,
    short: set[limit_slots.Bucket] | None = None,
) -> list[Claim]:
    token = new_claim_token()
    lease_until = now + (lease or wakes_settings.lease)
    rows = limit_slots.admit(using, rows, now, token, short)  # a wake short of a slot stays pending, uncharged
    groups: dict[str, tuple[dict[str, Any], bool, list[Wake]]] = {}
    seen_lanes: set[str] = set()
    for wake in rows:
        if wake.serial_key is not None:
            if wake.serial_key in seen_lanes:
                continue
            seen_lanes.add(wake.serial_key)
        result, expired = _claim_result(wake, now)
        if wake.is_recurring and wake.result is None and not expired:
            plan = recurrence.plan_catch_up(wake, now)
            if plan.result.get("missed"):
                _announce_missed(using, wake, plan.result["missed"])
            if plan.skip:
                _skip_occurrence(using, wake, plan, now)
                continue
            result = plan.result
        marker = repr(sorted(result.items()))
        groups.setdefault(marker, (result, expired, []))[2].append(wake)
    claimed: list[Claim] = []
    if not groups:
        return claimed
    fence = next_fence(using)
    update = {
        "state": State.FIRING,
        "lane_lock": F("serial_key"),
        "claim_token": token,
        "lease_until": lease_until,
        "claimed_by": runner_id,
        "claimed_at": now,
        "attempts": F("attempts") + 1,
        "coalesce_key": None,
        "fence": fence,
        "sink_started_at": None,
        "updated_at": now,
    }
    for result, expired, wakes in groups.values():
        ids = [w.pk for w in wakes]
        try:
            with transaction.atomic(using=using):
                won = Wake.objects.using(using).filter(pk__in=ids, state=State.PENDING).update(result=result, **update)
            winners = (
                wakes if won == len(ids) else list(Wake.objects.using(using).filter(pk__in=ids, claim_token=token))
            )
        except IntegrityError:
            winners = []
            for wake in wakes:  # a lane was taken under us: claim one by one, skip the busy lanes
                try:
                    with transaction.atomic(using=using):
                        if (
                            Wake.objects.using(using)
                            .filter(pk=wake.pk, state=State.PENDING)
                            .update(result=result, **update)
                        ):
                            winners.append(wake)
                except IntegrityError:
                    if logger.isEnabledFor(logging.DEBUG):
                        logger.debug(
                            "lane %s became busy; wake %s waits its turn",
                            wake.serial_key,
                            wake.pk,
                            extra=about(wake, runner_id),
                        )
        for wake in winners:
            wake.state, wake.lane_lock, wake.claim_token = State.FIRING, wake.serial_key, token
            wake.lease_until, wake.claimed_by, wake.claimed_at = lease_until, runner_id, now
            wake.attempts += 1
            wake.coalesce_key, wake.result, wake.updated_at = None, result, now
            wake.fence, wake.sink_started_at = fence, None
            claimed.append(Claim(wake, token, runner_id, now, expired=expired))
    return claimed
