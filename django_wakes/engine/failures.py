"""Settling what did not succeed: a failure, a defer, a database outage, a stopped session.

A failure is retried with backoff, or dead after ``max_attempts``; a defer and an outage the sink met
are not charged; a wake whose session was stopped after its claim is superseded without its sink running.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F

from .. import clock, signals
from ..conf import wakes_settings
from ..durations import parse_duration
from ..logs import about
from ..models import Outcome, State, Wake, WakeAttempt
from ..sinks import KEEP, Defer
from ..states import Disposition
from ..timeutil import to_datetime
from .shared import after, db_alias, logger

if TYPE_CHECKING:
    from .leases import Claim
from .fencing import LET_GO, FireOutcome, _attempt, _bury, _fenced_out, _scratch_fields, fenced


def _settle_failure(
    claim: Claim,
    error: str,
    *,
    retry_at: datetime | None = None,
    outcome: str = Outcome.FAILED,
    scratch: Any = KEEP,
    error_type: str = "",
) -> FireOutcome:
    using = db_alias()
    now = clock.now()
    wake = claim.wake
    notes = _scratch_fields(scratch)
    with transaction.atomic(using=using):
        if wake.attempts >= wake.max_attempts:
            if not _bury(fenced(using, claim), wake, now, error, **notes):
                return _fenced_out(claim)
            _attempt(using, claim, now, outcome, error, error_type)
            logger.error(
                "wake %s is dead after %d attempts: %s",
                wake.pk,
                wake.attempts,
                error.splitlines()[-1:],
                extra=about(wake, claim.runner_id),
            )
            return FireOutcome(Disposition.DEAD, settled=True, error=error)
        due = retry_at or now + wakes_settings.backoff(wake.attempts)
        won = fenced(using, claim).update(
            state=State.PENDING,
            **LET_GO,
            last_error=error,
            due_at=due,
            updated_at=now,
            **notes,
        )
        if not won:
            return _fenced_out(claim)
        _attempt(using, claim, now, outcome, error, error_type)
        transaction.on_commit(
            lambda: signals.wake_failed.send(sender=Wake, wake=wake, error=error, retry_at=due), using=using
        )
    return FireOutcome(Disposition(outcome), settled=True, error=error)


def _settle_defer(claim: Claim, defer: Defer, *, scratch: Any = KEEP, busy: bool = False) -> FireOutcome:
    using = db_alias()
    now = clock.now()
    until = defer.until
    if isinstance(until, str | timedelta):
        due = after(now, parse_duration(until, name="Defer.until"), name="Defer.until")
    else:
        due = to_datetime(until, name="Defer.until")
    with transaction.atomic(using=using):
        won = fenced(using, claim).update(
            state=State.PENDING,
            **LET_GO,
            due_at=due,
            attempts=F("attempts") - 1,
            updated_at=now,
            **_scratch_fields(scratch),
        )
        if not won:
            return _fenced_out(claim)
        _attempt(using, claim, now, Outcome.DEFERRED, "session busy" if busy else "")
    return FireOutcome(Disposition.BUSY if busy else Disposition.DEFERRED, settled=True)


#: The first retry of a wake whose sink met a database outage; doubled for each outage in a row.
OUTAGE_RETRY = timedelta(seconds=1)
#: The longest wait between two such retries (they are not charged, so they never end in ``dead``).
OUTAGE_RETRY_MAX = timedelta(minutes=5)


def _settle_outage(claim: Claim, exc: BaseException, error: str, error_type: str) -> FireOutcome:
    """The sink met a database outage: pending again soon, the attempt not charged (like a defer).

    Written once the database is back (the settle is retried until then), so the retry waits
    :data:`OUTAGE_RETRY` from *then*, doubled for each outage the wake met in a row on this attempt.
    """
    using = db_alias()
    now = clock.now()
    wake = claim.wake
    with transaction.atomic(using=using):
        in_a_row = (
            WakeAttempt.objects.using(using)
            .filter(wake_id=wake.pk, number=wake.attempts, outcome=Outcome.OUTAGE)
            .count()
        )
        wait = min(OUTAGE_RETRY * 2 ** min(in_a_row, 20), OUTAGE_RETRY_MAX)
        won = fenced(using, claim).update(
            state=State.PENDING, **LET_GO, due_at=now + wait, attempts=F("attempts") - 1, updated_at=now
        )
        if not won:
            return _fenced_out(claim)
        _attempt(using, claim, now, Outcome.OUTAGE, error, error_type)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    logger.warning(
        "wake %s (kind=%s): its sink met a database outage (%s: %s); trying again in %.0fs, not charged",
        wake.pk,
        wake.kind,
        type(exc).__name__,
        first,
        wait.total_seconds(),
        extra=about(wake, claim.runner_id),
    )
    return FireOutcome(Disposition.OUTAGE, settled=True, error=error)


def _settle_superseded(claim: Claim) -> FireOutcome:
    """The wake's session was stopped after it was claimed: settle it without running its sink."""
    now = clock.now()
    won = fenced(db_alias(), claim).update(
        state=State.SUPERSEDED,
        **LET_GO,
        attempts=F("attempts") - 1,
        last_error="session stopped",
        settled_at=now,
        updated_at=now,
    )
    if not won:
        return _fenced_out(claim)
    logger.info(
        "wake %s superseded: session %s/%s is stopped",
        claim.wake.pk,
        claim.wake.workspace_id,
        claim.wake.session_id,
        extra=about(claim.wake, claim.runner_id),
    )
    return FireOutcome(Disposition.SUPERSEDED, settled=True)
