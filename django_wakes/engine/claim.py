"""Claiming: take due wakes (and lapsed leases) for one runner, renew the leases in hand, hand claims back.

A claim moves a wake from ``pending`` to ``firing`` with a lease, a fresh fencing token and the
result its sink will be handed (persisted here, before any sink runs). The candidate read is plain
(no locks) and limited to registered kinds at the head of free lanes; the rows are then locked with
SKIP LOCKED and moved by one conditional UPDATE per result shape. The unique ``lane_lock`` column is
what makes a lane single-file: a racing claim of a busy lane fails its unique check and is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F

from .. import clock, recurrence, signals
from ..conf import wakes_settings
from ..models import Fence, Outcome, State, TriggerType, Wake, WakeAttempt
from ..sinks import registry
from . import create, settle
from .shared import db_alias, logger, new_claim_token, retry_rolled_back


@dataclass
class Claim:
    """A wake this runner holds a lease on, with the result it must hand to the sink."""

    wake: Wake
    token: str
    runner_id: str
    started_at: datetime
    expired: bool
    takeover: bool = False

    @property
    def result(self) -> dict[str, Any]:
        return self.wake.result or {}


def claim_batch(
    *,
    runner_id: str,
    limit: int | None = None,
    lanes: list[str] | None = None,
    lease: timedelta | None = None,
    queues: list[str] | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` wakes for ``runner_id``: lapsed leases first, then due pending wakes.

    ``lanes`` and ``queues`` narrow what is claimed (``None``: everything).

    A deadlock or lock timeout between racing runners rolls the pass back: nothing is claimed and
    the caller simply runs its next pass.
    """
    limit = limit or wakes_settings.batch
    now = clock.now()
    kinds = registry.kinds()
    if not kinds:
        return []
    using = db_alias()
    manager = Wake.objects.db_manager(using)
    try:
        with transaction.atomic(using=using):
            claims = _take_over_lapsed(using, now, kinds, limit, runner_id, lease, queues)
            room = limit - len(claims)
            if room <= 0:
                return claims
            candidates = manager.claimable(now, kinds, queues)
            if lanes:
                candidates = candidates.filter(serial_key__in=lanes)
            ids = list(candidates.values_list("id", flat=True)[:room])
            if not ids:
                return claims
            locked = list(manager.lock_pending(ids))
            claims.extend(_claim_rows(using, locked, now, runner_id, lease))
            return claims
    except OperationalError as exc:
        logger.info("claim pass rolled back, will retry: %s", exc)
        return []


def take_over_lapsed(
    *, runner_id: str, limit: int, lease: timedelta | None = None, queues: list[str] | None = None
) -> list[Claim]:
    """Claim only wakes whose lease lapsed (boot-time recovery), retrying a pass the database aborted."""
    kinds = registry.kinds()
    if not kinds:
        return []
    using = db_alias()

    def one_pass() -> list[Claim]:
        with transaction.atomic(using=using):
            return _take_over_lapsed(using, clock.now(), kinds, limit, runner_id, lease, queues)

    return retry_rolled_back("recovery pass", one_pass)


def _take_over_lapsed(
    using: str,
    now: datetime,
    kinds: list[str],
    limit: int,
    runner_id: str,
    lease: timedelta | None = None,
    queues: list[str] | None = None,
) -> list[Claim]:
    """Take over firing wakes whose lease lapsed, charging an attempt only for a sink that started.

    A runner records when a sink starts only for *guarded* wakes (those a dead runner once held), so
    the common path costs no write. A lapsed claim is then:

    * guarded, sink started: ``interrupted``, charged (a sink that kills its process dies after its
      own ``max_attempts``, then goes ``dead``);
    * guarded, sink never started: ``abandoned``, not charged (a batch-mate of a poisoned wake);
    * not guarded: unknown, so ``abandoned`` and not charged, and guarded from now on.
    """
    lease = lease or wakes_settings.lease
    lapsed = list(Wake.objects.using(using).in_queues(queues).lock_lapsed(now, kinds, limit))
    if not lapsed:
        return []
    fence = next_fence(using)
    claims = []
    for wake in lapsed:
        started = wake.guarded and wake.sink_started_at is not None
        charged = started
        WakeAttempt.objects.using(using).create(
            wake=wake,
            number=wake.attempts,
            runner_id=wake.claimed_by,
            fence=wake.fence,
            started_at=wake.sink_started_at or wake.claimed_at or now,
            finished_at=now,
            outcome=Outcome.INTERRUPTED if charged else Outcome.ABANDONED,
            error=f"lease lapsed at {wake.lease_until.isoformat() if wake.lease_until else '?'}"
            + ("" if charged else "; its sink was not known to have started, so the attempt is not charged"),
        )
        if charged and wake.attempts >= wake.max_attempts:
            settle.bury_locked(using, wake, now, f"interrupted {wake.attempts} times (lease lapsed mid-fire)")
            continue
        token = new_claim_token()
        attempts = wake.attempts + (1 if charged else 0)
        Wake.objects.using(using).filter(pk=wake.pk, state=State.FIRING, claim_token=wake.claim_token).update(
            claim_token=token,
            lease_until=now + lease,
            claimed_by=runner_id,
            claimed_at=now,
            attempts=attempts,
            fence=fence,
            guarded=True,
            sink_started_at=None,
            updated_at=now,
        )
        wake.claim_token, wake.lease_until, wake.claimed_by, wake.claimed_at = token, now + lease, runner_id, now
        wake.attempts, wake.fence, wake.guarded, wake.sink_started_at = attempts, fence, True, None
        claims.append(
            Claim(wake, token, runner_id, now, expired=bool((wake.result or {}).get("expired")), takeover=True)
        )
    return claims


def next_fence(using: str) -> int:
    """Take the next fencing token: call it only after the rows being claimed are locked.

    Taken after the locks, it is larger than the token of any earlier claim of those wakes and of
    their lanes (those claims committed before these locks could be had).
    """
    fence: int = Fence.objects.using(using).create().pk
    return fence


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
            "wake %s (chain %s): skipped %d missed occurrence(s)", wake.pk, wake.chain_id, plan.result["missed"]
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
    using: str, rows: list[Wake], now: datetime, runner_id: str, lease: timedelta | None = None
) -> list[Claim]:
    token = new_claim_token()
    lease_until = now + (lease or wakes_settings.lease)
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
                    logger.debug("lane %s became busy; wake %s waits its turn", wake.serial_key, wake.pk)
        for wake in winners:
            wake.state, wake.lane_lock, wake.claim_token = State.FIRING, wake.serial_key, token
            wake.lease_until, wake.claimed_by, wake.claimed_at = lease_until, runner_id, now
            wake.attempts += 1
            wake.coalesce_key, wake.result, wake.updated_at = None, result, now
            wake.fence, wake.sink_started_at = fence, None
            claimed.append(Claim(wake, token, runner_id, now, expired=expired))
    return claimed


def renew_leases(claims: Iterable[Claim], lease: timedelta) -> set[int]:
    """Extend the leases of the claims still held under their tokens; return the ids still held.

    The heartbeat of a runner. A claim another runner took over (its token changed) is not touched,
    and its id is missing from the result: the runner must not start its sink.
    """
    now = clock.now()
    by_token: dict[str, list[int]] = {}
    for claim in claims:
        by_token.setdefault(claim.token, []).append(claim.wake.pk)
    rows = Wake.objects.using(db_alias())
    held: set[int] = set()
    for token, ids in by_token.items():
        mine = rows.filter(pk__in=ids, state=State.FIRING, claim_token=token)
        if mine.update(lease_until=now + lease) == len(ids):
            held.update(ids)
        else:
            held.update(mine.values_list("pk", flat=True))
    return held
