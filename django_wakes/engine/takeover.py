"""Taking over lapsed leases: a firing wake whose runner stopped renewing is re-driven by another.

The previous attempt is written down (``interrupted``, charged, or ``abandoned``, not), then the
wake gets a new claim token, fence and lease; a wake interrupted on its last charged attempt goes ``dead``.
A wake under a rate limit whose sink started needs a free rate slot for its new start, or it goes
back to ``pending`` until one frees (:func:`~.limit_slots.taken_over`).

A runner that has just seen its database unreachable holds takeovers back for a while
(:func:`takeovers_held_back`): every lease lapsed during the outage, including those of live runners
that still hold a finished outcome, and those holders must get to settle and renew first.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import transaction

from .. import clock, tracing
from ..conf import wakes_settings
from ..logs import about
from ..models import Outcome, State, Wake, WakeAttempt
from ..sinks import registry
from . import limit_slots
from .fencing import LET_GO, bury_locked
from .leases import Claim, next_fence
from .shared import db_alias, logger, new_claim_token, retry_rolled_back

#: Set (per thread, per task) while this caller must not take over lapsed leases: see :func:`takeovers_held_back`.
_HELD_BACK: contextvars.ContextVar[bool] = contextvars.ContextVar("django_wakes_takeovers_held_back", default=False)


@contextmanager
def takeovers_held_back() -> Iterator[None]:
    """Claim without taking over lapsed leases in this block (due wakes are claimed as usual).

    Why: a lease lapses when its runner stops renewing it, which is also what every runner does while
    the database is away. A runner that held a finished outcome through an outage must settle it (and
    its heartbeat renew the leases it holds) before anyone re-drives those wakes, or their sinks run
    twice. The runner decides how long to hold back (:mod:`django_wakes.runner.reconnect`); the claim
    pass stays one and the same, only its takeover step claims nothing.
    """
    reset = _HELD_BACK.set(True)
    try:
        yield
    finally:
        _HELD_BACK.reset(reset)


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

    started = tracing.now_ns()
    claims = retry_rolled_back("recovery pass", one_pass)
    tracing.claimed(claims, started, tracing.now_ns())
    return claims


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
    if _HELD_BACK.get():
        return []
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
            bury_locked(using, wake, now, f"interrupted {wake.attempts} times (lease lapsed mid-fire)")
            continue
        token = new_claim_token()
        if not limit_slots.taken_over(using, wake, wake.claim_token, token, now):
            _wait_for_a_rate_slot(using, wake, now, charged)
            continue
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


def _wait_for_a_rate_slot(using: str, wake: Wake, now: datetime, charged: bool) -> None:
    """Put a lapsed wake back to ``pending``: its re-drive would be a start no rate slot of its key allows now.

    Its lapsed attempt is written down as for any takeover (charged only if its sink was known to
    start); waiting for the slot charges nothing, so the next claim counts the attempt it makes. Its
    due time stays: the candidate read leaves it out while the limit is full, and claims it when a slot frees.
    """
    Wake.objects.using(using).filter(pk=wake.pk, state=State.FIRING, claim_token=wake.claim_token).update(
        state=State.PENDING,
        **LET_GO,
        attempts=wake.attempts - (0 if charged else 1),
        guarded=True,
        sink_started_at=None,
        updated_at=now,
    )
    logger.info(
        "wake %s: lease lapsed after its sink started; no rate slot is free for a new start, so it waits, pending",
        wake.pk,
        extra=about(wake),
    )
