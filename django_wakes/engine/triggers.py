"""Triggers: what makes a pending wake due, or ends it, from outside a runner.

``deliver_event`` and ``resolve`` move a watcher or an approval to due (saving what the trigger
delivered, before any sink runs); ``cancel`` ends a pending wake; ``requeue`` gives a dead one fresh
attempts. Each is one conditional UPDATE whose row count picks the single winner.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Q, When

from .. import clock, events
from ..conf import wakes_settings
from ..durations import Duration
from ..exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalSuperseded,
)
from ..models import RetiredApprovalToken, State, TriggerType, Wake, WatchedKey
from ..validation import json_value, key, wake_pk, well_formed_token, well_formed_token_hash
from . import retention
from .shared import announce_due, db_alias, hash_token, retry_rolled_back
from .waiting import events_result


def deliver_event(*, workspace_id: str, event_key: str, payload: Any = None, retain: Duration | None = None) -> int:
    """Trigger every unexpired watcher of ``event_key`` whose match filter the payload meets; return how many.

    A watcher accepts at most one delivery (``fire_at`` is set by the first; the conditional UPDATE
    skips it after), and one whose expiry instant has come refuses it (the boundary is exclusive).
    ``retain`` keeps the event that long for watches created later with ``since`` (see
    :mod:`~django_wakes.engine.retention` for why a watch racing this delivery is never missed).
    """
    now = clock.now()
    workspace = key(workspace_id, name="workspace_id")
    event = key(event_key, name="event_key")
    body = json_value(payload, name="payload")
    keep = events.retention(retain)
    using = db_alias()
    accepted = retry_rolled_back("delivering an event", lambda: _deliver(using, workspace, event, body, keep, now))
    if accepted:
        announce_due(using, now)
    return accepted


def _deliver(using: str, workspace: str, event: str, body: Any, keep: timedelta | None, now: datetime) -> int:
    with transaction.atomic(using=using):
        if keep is not None:
            retention.lock_event_keys(using, workspace, [event], now)
        waiting = (
            Wake.objects.using(using)
            .filter(trigger_type=TriggerType.ON_EVENT, workspace_id=workspace)
            .pending()
            .filter(fire_at__isnull=True)
            .exclude(expires_at__lte=now)
        )
        extra = WatchedKey.objects.using(using).filter(workspace_id=workspace, event_key=event).values("wake_id")
        candidates = list(waiting.filter(event_key=event).values_list("pk", "event_match"))
        candidates += list(waiting.filter(pk__in=extra).values_list("pk", "event_match"))
        chosen = sorted({pk for pk, match in candidates if events.matches(match, body)})
        accepted = 0
        if chosen:
            accepted = waiting.filter(pk__in=chosen).update(
                result=events_result(event, body), fire_at=now, due_at=now, updated_at=now
            )
        if keep is not None:
            retention.retain(using, workspace, event, body, now, keep)
    return accepted


def actor_name(actor: Any) -> str:
    """The name an answer records as ``resolved_by``: the user's username, else ``str(actor)``."""
    get_username = getattr(actor, "get_username", None)
    return str(get_username() if callable(get_username) else actor)


def _approval_refusal(wake: Wake, now: datetime) -> ApprovalError:
    """Why an approval that exists and may be answered by this actor cannot be answered now."""
    if wake.fire_at is None and (
        wake.state in (State.EXPIRED, State.FIRING)
        or (wake.state == State.PENDING and wake.expires_at is not None and wake.expires_at <= now)
    ):
        expired = wake.expires_at.isoformat() if wake.expires_at else "?"
        return ApprovalExpired(f"approval {wake.pk} expired at {expired}")
    return ApprovalAlreadyResolved(f"approval {wake.pk} was already answered or cancelled", wake)


def _approval_of(token_hash: str | None) -> tuple[Wake, bool]:
    """The approval ``token_hash`` opens, in whatever state, and whether that link was retired; else raise.

    A retired link (the host re-issued it, :func:`~django_wakes.engine.approvals.reissue_approval`) still
    names its approval, so its holder is told "a newer link was sent", never :class:`ApprovalNotFound`.
    """
    if not well_formed_token_hash(token_hash):
        raise ApprovalNotFound("no approval answers to this token")
    using = db_alias()
    wake = Wake.objects.using(using).filter(token_hash=token_hash, trigger_type=TriggerType.ON_APPROVAL).first()
    if wake is not None:
        return wake, False
    retired = RetiredApprovalToken.objects.using(using).filter(token_hash=token_hash).select_related("wake").first()
    if retired is None:
        raise ApprovalNotFound("no approval answers to this token")
    return retired.wake, True


def _still_waiting(wake: Wake, *, retired: bool = False) -> Wake:
    """Return ``wake`` if it still waits for its answer; else raise why not (expired, answered or cancelled).

    ``retired``: the link used was re-issued since, so a waiting approval raises :class:`ApprovalSuperseded`.
    """
    now = clock.now()
    if wake.state == State.PENDING and wake.fire_at is None and (wake.expires_at is None or wake.expires_at > now):
        if retired:
            raise ApprovalSuperseded(f"approval {wake.pk} was sent a newer link: this one was retired", wake)
        return wake
    raise _approval_refusal(wake, now)


def waiting_approval(token_hash: str | None) -> Wake:
    """Return the approval ``token_hash`` opens if it still waits for an answer, whoever asks; else raise.

    What the approval link checks before it keeps anything for its visitor, who may not have logged
    in yet: raise :class:`ApprovalNotFound`, :class:`ApprovalSuperseded` (a link the host re-issued),
    :class:`ApprovalExpired` or :class:`ApprovalAlreadyResolved`, the refusals that do not depend on who
    answers. Whether this visitor may answer is :func:`open_approval`'s question (``WAKES["AUTHORIZE"]``),
    asked once they are logged in.
    """
    wake, retired = _approval_of(token_hash)
    return _still_waiting(wake, retired=retired)


def open_approval(token_hash: str | None, actor: Any, *, opened_before_reissue: bool = False) -> Wake:
    """Return the approval ``token_hash`` opens for ``actor`` if it can be answered now, else raise.

    The one place that decides whether an approval may be answered: :func:`resolve_hashed` calls it
    before its conditional UPDATE, and the approval page calls it before showing the prompt, so the
    page refuses exactly what an answer would be refused for. Raise :class:`ApprovalNotFound`,
    :class:`ApprovalDenied` (the ``AUTHORIZE`` hook said no, or no hook is configured: approvals are
    never "allow all"), :class:`ApprovalSuperseded`, :class:`ApprovalExpired` or
    :class:`ApprovalAlreadyResolved`. An actor who may not answer is told that before anything of the
    approval's state.

    ``opened_before_reissue``: the hash was kept when its link was opened (the approval page), so a
    re-issue since then does not void it: re-issuing retires a link, not a page a person has open.
    """
    wake, retired = _approval_of(token_hash)
    authorize = wakes_settings.authorize
    if authorize is None:
        raise ApprovalDenied("no WAKES['AUTHORIZE'] hook is configured, so no one may resolve approvals")
    if not authorize(actor, wake.workspace_id):
        raise ApprovalDenied(f"{actor_name(actor)!r} may not resolve approvals in this workspace")
    return _still_waiting(wake, retired=retired and not opened_before_reissue)


def resolve(token: str, answer: Any, actor: Any) -> Wake:
    """Answer an approval with its one-time token; the first valid answer wins.

    Raise what :func:`open_approval` raises; a racing answer that commits first makes this one
    :class:`ApprovalAlreadyResolved`.
    """
    if not well_formed_token(token):
        raise ApprovalNotFound("no approval answers to this token")
    return resolve_hashed(hash_token(token), answer, actor)


def resolve_hashed(token_hash: str | None, answer: Any, actor: Any, *, opened_before_reissue: bool = False) -> Wake:
    """:func:`resolve` for a caller that kept only the token's hash (the approval page, when its link was opened).

    ``opened_before_reissue`` as for :func:`open_approval`.
    """
    answer = json_value(answer, name="answer")
    resolved_by = json_value(actor_name(actor), name="actor")
    wake = open_approval(token_hash, actor, opened_before_reissue=opened_before_reissue)
    using = db_alias()
    now = clock.now()
    result = {"trigger": TriggerType.ON_APPROVAL.value, "answer": answer, "resolved_by": resolved_by}
    won = (
        Wake.objects.using(using)
        .filter(pk=wake.pk, state=State.PENDING, fire_at__isnull=True, expires_at__gt=now)
        .update(result=result, fire_at=now, due_at=now, updated_at=now)
    )
    wake.refresh_from_db(using=using)
    if won:
        announce_due(using, now)
        return wake
    raise _approval_refusal(wake, now)


def cancel(wake_id: int) -> bool:
    """Cancel a pending wake; return whether this call cancelled it.

    A firing occurrence of a recurring chain cannot be stopped mid-fire, but cancelling it ends the
    chain: no further occurrence is scheduled when it settles (and ``True`` is returned).
    """
    wake_id = wake_pk(wake_id, caller="cancel()")
    now = clock.now()
    using = db_alias()
    cancelled = (
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.PENDING)
        .update(state=State.CANCELLED, coalesce_key=None, due_at=None, updated_at=now, settled_at=now)
    )
    if cancelled:
        return True
    # A firing recurring occurrence: close its chain so settle books no successor.
    from django.db.models import Q

    return bool(
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.FIRING)
        .exclude(cron="", every__isnull=True)
        .filter(Q(end_at__isnull=True) | Q(end_at__gt=F("fire_at")))
        .update(end_at=F("fire_at"), updated_at=now)
    )


def requeue(wake_id: int) -> bool:
    """Give a dead wake a fresh set of attempts, due now; return whether this call requeued it.

    The operator's retry for the dead letter (the admin's "Retry" action). ``last_error`` is kept
    until the next attempt settles, and so is the result saved at its first claim: the sink sees
    the same trigger again. A dead occurrence of a recurring chain booked its successor when it
    died, so its own chain is closed here (as :func:`cancel` does) to book no second successor.
    """
    wake_id = wake_pk(wake_id, caller="requeue()")
    now = clock.now()
    using = db_alias()
    recurring = ~Q(cron="") | Q(every__isnull=False)
    open_chain = Q(end_at__isnull=True) | Q(end_at__gt=F("fire_at"))
    won = (
        Wake.objects.using(using)
        .filter(pk=wake_id, state=State.DEAD)
        .update(
            state=State.PENDING,
            due_at=now,
            attempts=0,
            lane_lock=None,
            lease_until=None,
            claim_token=None,
            settled_at=None,
            updated_at=now,
            end_at=Case(When(recurring & open_chain, then=F("fire_at")), default=F("end_at")),
        )
    )
    if won:
        announce_due(using, now)
    return bool(won)
