"""Writing under a claim's fence: what every settle shares.

Every settle is a conditional UPDATE on ``(id, state=firing, claim_token)`` (:func:`fenced`): a runner
whose lease another runner took over is fenced out, and its outcome is discarded and logged
(:func:`_fenced_out`). Here too: the attempt row, letting go of the lane, lease and token
(:data:`LET_GO`), handing a claim back (:func:`release`) and the dead letter (:func:`bury_locked`).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import F

from .. import clock, signals
from ..logs import about
from ..models import State, Wake, WakeAttempt
from ..querysets import WakeQuerySet
from ..sinks import KEEP
from ..states import Disposition
from . import create
from .shared import db_alias, logger

if TYPE_CHECKING:
    from .leases import Claim

ERROR_MAX_CHARS = 8000


@dataclass
class FireOutcome:
    """What firing one claim came to, as the pass that fired it tallies it."""

    outcome: Disposition
    settled: bool  # False when the lease was taken over: the result was discarded (fenced)
    error: str = ""


def _format_error(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-ERROR_MAX_CHARS:]


def _error_type(exc: BaseException) -> str:
    """The dotted path of the exception's class, as ``WakeAttempt.error_type`` keeps it."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


#: What every settle writes besides its state: the wake no longer holds a lane, a lease or a fence.
LET_GO: dict[str, Any] = {"lane_lock": None, "lease_until": None, "claim_token": None}


def fenced(using: str, claim: Claim) -> WakeQuerySet:
    """The wake of ``claim``, only while it is still firing under the claim's token (the fence)."""
    return Wake.objects.using(using).filter(pk=claim.wake.pk, state=State.FIRING, claim_token=claim.token)


def _attempt(using: str, claim: Claim, now: datetime, outcome: str, error: str = "", error_type: str = "") -> None:
    WakeAttempt.objects.using(using).create(
        wake_id=claim.wake.pk,
        number=claim.wake.attempts,
        runner_id=claim.runner_id,
        fence=claim.wake.fence,
        started_at=claim.started_at,
        finished_at=now,
        outcome=outcome,
        error=error,
        error_type=error_type,
    )


def release(claim: Claim) -> bool:
    """Hand an unstarted claim back (shutdown, or its sink vanished): pending again, attempt uncounted."""
    return bool(
        fenced(db_alias(), claim).update(
            state=State.PENDING,
            **LET_GO,
            attempts=F("attempts") - 1,
            updated_at=clock.now(),
        )
    )


def bury_locked(using: str, wake: Wake, now: datetime, error: str) -> None:
    """Send a locked firing wake to the dead letter (its lease lapsed on its last attempt).

    Runs in the caller's transaction, which holds the row lock; books a chain's next occurrence.
    """
    _bury(Wake.objects.using(using).filter(pk=wake.pk, state=State.FIRING), wake, now, error)


def _bury(rows: WakeQuerySet, wake: Wake, now: datetime, error: str, **extra: Any) -> bool:
    """Move ``rows`` (the wake, as its caller fences it) to the dead letter; book the chain's next occurrence.

    Return whether the row was still there to bury. Runs inside the settling transaction.
    """
    if not rows.update(state=State.DEAD, **LET_GO, last_error=error, settled_at=now, updated_at=now, **extra):
        return False
    if wake.is_recurring:
        create.book_next(wake, now)
    transaction.on_commit(lambda: signals.wake_dead.send(sender=Wake, wake=wake, error=error), using=rows.db)
    return True


def _scratch_fields(scratch: Any) -> dict[str, Any]:
    """The update a settle makes to the wake's scratch: none for ``KEEP``, else the new value."""
    return {} if scratch is KEEP else {"scratch": scratch}


def _fenced_out(claim: Claim) -> FireOutcome:
    logger.warning(
        "wake %s: lease was taken over by another runner; this runner's outcome is discarded",
        claim.wake.pk,
        extra=about(claim.wake, claim.runner_id),
    )
    return FireOutcome(Disposition.FENCED, settled=False)
