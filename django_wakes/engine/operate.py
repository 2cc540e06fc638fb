"""Operator transitions on one wake or one lane: what the admin's buttons do.

Each wake transition is one conditional UPDATE, like every other exit the engine writes: it names
the state (and the fields) it read, so an operator racing a runner either wins or changes nothing.
Each returns a sentence saying what happened, for the operator, or raises
:class:`~django_wakes.exceptions.OperationRefused` saying why it did not apply ("wake 7 is firing:
it cannot be rescheduled until it settles"). Cancel and retry reuse :func:`~.triggers.cancel` and
:func:`~.triggers.requeue`.

Lanes are paused with a :class:`~django_wakes.models.PausedLane` row, which the claim query skips
(``WakeQuerySet.lane_not_paused``): a wake already firing in the lane finishes, the rest wait in order.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction

from .. import clock
from ..exceptions import InvalidWake, OperationRefused
from ..models import PausedLane, State, TriggerType, Wake
from ..timeutil import to_datetime
from ..validation import key, wake_pk
from .shared import announce_due, db_alias, earliest
from .triggers import cancel, requeue

#: How many characters of a pause reason are kept (the admin's form says so too).
REASON_MAX_CHARS = 500


def _row(using: str, wake_id: int) -> Wake:
    wake = Wake.objects.using(using).filter(pk=wake_id).first()
    if wake is None:
        raise OperationRefused(f"wake {wake_id} does not exist")
    return wake


def _refuse_unless_pending(wake: Wake, doing: str) -> None:
    """Raise the usual refusal for a wake that is not pending: firing ones settle first, ended ones are over."""
    if wake.state == State.FIRING:
        raise OperationRefused(f"wake {wake.pk} is firing: it cannot be {doing} until it settles")
    if wake.state != State.PENDING:
        raise OperationRefused(f"wake {wake.pk} is {wake.state}: it cannot be {doing}")


def _lane_note(using: str, wake: Wake) -> str:
    """What stands between a due wake and its runner, if anything: a paused lane or its current holder."""
    lane = wake.serial_key
    if lane is None:
        return ""
    if PausedLane.objects.using(using).filter(serial_key=lane).exists():
        return f" Its lane {lane!r} is paused: it fires once the lane is resumed."
    holder = Wake.objects.using(using).filter(lane_lock=lane).exclude(pk=wake.pk).values_list("pk", flat=True).first()
    if holder is not None:
        return f" Its lane {lane!r} is held by wake {holder}: it fires after that one settles."
    return ""


def cancel_wake(wake_id: int) -> str:
    """Cancel a pending wake (or end the chain of a firing recurring occurrence); say what happened."""
    wake_id = wake_pk(wake_id, caller="cancel_wake()")
    using = db_alias()
    _row(using, wake_id)
    if cancel(wake_id):
        # Read what won: a runner may have claimed the wake since it was shown, so this call ended its chain.
        if _row(using, wake_id).state == State.CANCELLED:
            return f"Wake {wake_id} was cancelled."
        return f"Wake {wake_id} is firing and cannot be stopped mid-fire; its chain ends after this occurrence."
    now = _row(using, wake_id)
    if now.state == State.FIRING:
        raise OperationRefused(f"wake {wake_id} is firing: it cannot be cancelled mid-fire")
    raise OperationRefused(f"wake {wake_id} is {now.state}: only a pending wake can be cancelled")


def retry_wake(wake_id: int) -> str:
    """Give a dead wake a fresh set of attempts, due now (:func:`~.triggers.requeue`); say what happened."""
    wake_id = wake_pk(wake_id, caller="retry_wake()")
    using = db_alias()
    _row(using, wake_id)
    if requeue(wake_id):
        return f"Wake {wake_id} was requeued with fresh attempts; it is due now."
    now = _row(using, wake_id)
    hint = " (use fire now to run a pending one early)" if now.state == State.PENDING else ""
    raise OperationRefused(f"wake {wake_id} is {now.state}: only a dead wake can be retried{hint}")


def fire_now(wake_id: int) -> str:
    """Make a pending wake that has its trigger due now: the next runner pass claims it.

    A one-shot or recurring occurrence fires early (an occurrence still stands for its own slot and
    books the next one as usual); a failing wake skips the rest of its backoff; a watcher or approval
    whose event or answer has not come is refused: there is nothing to hand its sink.
    """
    wake_id = wake_pk(wake_id, caller="fire_now()")
    using = db_alias()
    wake = _row(using, wake_id)
    _refuse_unless_pending(wake, "fired now")
    if wake.fire_at is None:
        waits_for = "its event" if wake.trigger_type == TriggerType.ON_EVENT else "its answer"
        raise OperationRefused(f"wake {wake_id} waits for {waits_for}: there is nothing to fire it with yet")
    now = clock.now()
    won = (
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.PENDING, fire_at__isnull=False)
        .update(due_at=now, updated_at=now)
    )
    if not won:
        _refuse_unless_pending(_row(using, wake_id), "fired now")
        raise OperationRefused(f"wake {wake_id} changed meanwhile; look again")  # pragma: no cover - a race
    announce_due(using, now)
    return f"Wake {wake_id} is due now; the next runner pass fires it." + _lane_note(using, wake)


def reschedule(wake_id: int, at: datetime | int | float) -> str:
    """Move when a pending wake is next due to ``at`` (an aware datetime or epoch milliseconds).

    A one-shot wake not yet fired moves its scheduled time; a wake waiting for its retry, or a
    triggered one waiting for its lane, moves only when it is next looked at. Refused for an occurrence of
    a recurring chain (its time is its slot), for a watcher still waiting for its trigger (its due time is its
    expiry: extend that instead) and for a time after the wake's expiry.
    """
    wake_id = wake_pk(wake_id, caller="reschedule()")
    moment = to_datetime(at, name="at")
    using = db_alias()
    wake = _row(using, wake_id)
    _refuse_unless_pending(wake, "rescheduled")
    untriggered = wake.result is None
    if wake.fire_at is None:
        raise OperationRefused(
            f"wake {wake_id} waits for its trigger; it is due only at its expiry: extend the expiry instead"
        )
    if untriggered and wake.is_recurring:
        raise OperationRefused(
            f"wake {wake_id} is an occurrence of chain {wake.chain_id}: its time is its schedule's slot "
            "(fire it now, or cancel it)"
        )
    if untriggered and wake.expires_at is not None and moment > wake.expires_at:
        raise OperationRefused(
            f"wake {wake_id} expires at {wake.expires_at.isoformat()}: extend its expiry before moving it past that"
        )
    now = clock.now()
    fields: dict[str, object] = {"due_at": moment, "updated_at": now}
    if untriggered:
        fields["fire_at"] = moment
    won = (
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.PENDING, result__isnull=untriggered, fire_at=wake.fire_at)
        .update(**fields)
    )
    if not won:
        _refuse_unless_pending(_row(using, wake_id), "rescheduled")
        raise OperationRefused(f"wake {wake_id} was triggered or moved meanwhile; look again")
    if moment <= now:
        announce_due(using, now)
    return f"Wake {wake_id} is now due at {moment.isoformat()}."


def extend_expiry(wake_id: int, until: datetime | int | float) -> str:
    """Push a pending wake's expiry out to ``until``, later than both now and the current expiry.

    Only while its trigger has not come (after that, the expiry no longer applies). A watcher or an
    approval is due at its expiry, so its due time moves with it.
    """
    wake_id = wake_pk(wake_id, caller="extend_expiry()")
    moment = to_datetime(until, name="until")
    using = db_alias()
    wake = _row(using, wake_id)
    if wake.state == State.EXPIRED:
        raise OperationRefused(f"wake {wake_id} already expired")
    _refuse_unless_pending(wake, "given a later expiry")
    if wake.expires_at is None:
        raise OperationRefused(f"wake {wake_id} has no expiry to extend")
    if wake.result is not None:
        raise OperationRefused(f"wake {wake_id} was already triggered: its expiry no longer applies")
    now = clock.now()
    if moment <= now or moment <= wake.expires_at:
        raise OperationRefused(
            f"the new expiry {moment.isoformat()} must be later than now and than the current one "
            f"({wake.expires_at.isoformat()})"
        )
    due_at = moment if wake.fire_at is None else earliest(wake.fire_at, moment)
    # due_at is computed from the fire_at read: a reschedule that moved it meanwhile makes this refuse.
    won = (
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.PENDING, result__isnull=True, expires_at=wake.expires_at, fire_at=wake.fire_at)
        .update(expires_at=moment, due_at=due_at, updated_at=now)
    )
    if not won:
        _refuse_unless_pending(_row(using, wake_id), "given a later expiry")
        raise OperationRefused(f"wake {wake_id} was triggered or changed meanwhile; look again")
    return f"Wake {wake_id} now expires at {moment.isoformat()}."


def pause_lane(serial_key: str, *, by: str = "", reason: str = "") -> bool:
    """Pause a lane: no further wake of it is claimed until :func:`resume_lane`; return whether this call paused it.

    A wake already firing in the lane finishes; the others stay pending, in order. Pausing a lane
    that is already paused changes nothing (its first pause's author and reason stay).
    """
    lane = key(serial_key, name="serial_key")
    if not isinstance(by, str) or not isinstance(reason, str):
        raise InvalidWake("pause_lane(): by and reason must be strings")
    using = db_alias()
    try:
        with transaction.atomic(using=using):
            _, created = PausedLane.objects.using(using).get_or_create(
                serial_key=lane,
                defaults={"paused_at": clock.now(), "paused_by": by[:150], "reason": reason[:REASON_MAX_CHARS]},
            )
    except IntegrityError:  # a racing pause inserted it first
        return False
    return created


def resume_lane(serial_key: str) -> bool:
    """Resume a paused lane (its head is claimable again at once); return whether this call resumed it."""
    lane = key(serial_key, name="serial_key")
    using = db_alias()
    deleted, _ = PausedLane.objects.using(using).filter(serial_key=lane).delete()
    if deleted:
        announce_due(using, clock.now())
    return bool(deleted)
