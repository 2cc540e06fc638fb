"""The state machine: create wakes, trigger them, claim, fire and settle — every exit from ``pending``
is a conditional UPDATE whose row count picks the single winner.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import secrets
import socket
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import IntegrityError, OperationalError, connections, router, transaction
from django.db.models import F, Min

from . import clock, signals
from .conf import wakes_settings
from .durations import Duration, parse_duration
from .exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    InvalidDuration,
    InvalidWake,
    UnknownKind,
)
from .models import Outcome, State, TriggerType, Wake, WakeAttempt
from .sinks import SESSION_TURN, Defer, Retry, Stop, registry
from .timeutil import to_datetime
from .validation import json_value, key, positive_int

logger = logging.getLogger("django_wakes")

ERROR_MAX_CHARS = 8000


def db_alias() -> str:
    return router.db_for_write(Wake)


def hash_token(token: str) -> str:
    """Return the stored form of an approval token: its SHA-256, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


def default_runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


# --------------------------------------------------------------------------------------------------
# Creating wakes
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRequest:
    """What :func:`request_approval` returns: the wake and the one-time token (shown only here)."""

    wake: Wake
    token: str


def _expiry(now: datetime, expires_in: Duration | None, expires_at: Any) -> datetime | None:
    """``expires_at`` beats ``expires_in``; an expiry in the past is refused."""
    if expires_at is not None:
        moment = to_datetime(expires_at, name="expires_at")
    elif expires_in is not None:
        moment = _after(now, parse_duration(expires_in, name="expires_in", allow_zero=False), name="expires_in")
    else:
        return None
    if moment <= now:
        raise InvalidWake(f"expires_at {moment.isoformat()} is not in the future")
    return moment


def _after(now: datetime, delta: timedelta, *, name: str) -> datetime:
    """``now + delta``, refusing a duration that runs off the calendar (year 9999) as bad input."""
    try:
        return now + delta
    except OverflowError as exc:
        raise InvalidDuration(f"{name}: {delta} from now is beyond the last representable date") from exc


def _check_kind(kind: Any, session_id: str | None) -> str:
    if not isinstance(kind, str) or not kind:
        raise InvalidWake("kind must be a non-empty string")
    if len(kind) > Wake._meta.get_field("kind").max_length:
        raise InvalidWake(f"kind is longer than {Wake._meta.get_field('kind').max_length} characters")
    if registry.get(kind) is None:
        hint = " (set WAKES['SPAWN_TURN'] to enable it)" if kind == SESSION_TURN else ""
        raise UnknownKind(f"no sink is registered for kind {kind!r}{hint}")
    if kind == SESSION_TURN and session_id is None:
        raise InvalidWake("kind 'session_turn' needs a session_id to hand the turn to")
    return kind


def _common(
    *, workspace_id: Any, session_id: Any, kind: Any, serial_key: Any, intent: Any, idempotency_key: Any
) -> dict[str, Any]:
    session = key(session_id, name="session_id", required=False)
    return {
        "workspace_id": key(workspace_id, name="workspace_id"),
        "session_id": session,
        "kind": _check_kind(kind, session),
        "serial_key": key(serial_key, name="serial_key", required=False),
        "intent": json_value(intent, name="intent"),
        "idempotency_key": key(idempotency_key, name="idempotency_key", required=False),
    }


def create_wake(fields: dict[str, Any], *, coalesce: bool = False) -> Wake:
    """Insert a wake built from validated ``fields``; idempotent and coalescing creates return the holder.

    Both dedup paths end at a unique index, so concurrent creators cannot both win: the loser's
    INSERT fails inside a savepoint and it reads the winner's row instead.
    """
    now = clock.now()
    using = db_alias()
    workspace, idem = fields["workspace_id"], fields.get("idempotency_key")
    slot = f"{fields['kind']}|{fields['serial_key']}" if coalesce else None
    if coalesce and fields.get("serial_key") is None:
        raise InvalidWake("coalesce=True needs a serial_key (the lane to coalesce on)")
    manager = Wake.objects.db_manager(using)
    for _ in range(5):
        with transaction.atomic(using=using):
            if idem is not None:
                existing = manager.filter(workspace_id=workspace, idempotency_key=idem).first()
                if existing is not None:
                    return existing
            if slot is not None:
                holder = (
                    manager.pending()
                    .filter(kind=fields["kind"], serial_key=fields["serial_key"])
                    .order_by("due_at", "id")
                    .first()
                )
                if holder is not None:
                    return holder
            wake = Wake(
                **{"max_attempts": wakes_settings.max_attempts, **fields},
                coalesce_key=slot,
                created_at=now,
                updated_at=now,
            )
            try:
                with transaction.atomic(using=using):
                    wake.save(using=using, force_insert=True)
            except IntegrityError:
                if idem is not None:
                    existing = manager.filter(workspace_id=workspace, idempotency_key=idem).first()
                    if existing is not None:
                        return existing
                if slot is not None:
                    existing = manager.filter(coalesce_key=slot).first()
                    if existing is not None:
                        return existing
                continue  # the holder left pending between our INSERT and our read: try again
            transaction.on_commit(lambda w=wake: signals.wake_created.send(sender=Wake, wake=w), using=using)
            return wake
    raise InvalidWake("could not create the wake: its idempotency/coalesce slot kept changing hands")


def schedule(
    *,
    workspace_id: str,
    session_id: str | None = None,
    delay: Duration | None = None,
    at: datetime | int | float | None = None,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    start_at: datetime | int | float | None = None,
    end_at: datetime | int | float | None = None,
    catch_up: str = "replay",
    kind: str = SESSION_TURN,
    serial_key: str | None = None,
    intent: Any = None,
    idempotency_key: str | None = None,
    coalesce: bool = False,
    expires_in: Duration | None = None,
    expires_at: datetime | int | float | None = None,
    max_attempts: int | None = None,
) -> Wake:
    """Create a time-triggered wake: exactly one of ``delay``, ``at``, ``cron`` or ``every``."""
    from . import recurrence

    given = [n for n, v in (("delay", delay), ("at", at), ("cron", cron), ("every", every)) if v is not None]
    if len(given) != 1:
        raise InvalidWake(f"pass exactly one of delay, at, cron, every (got {', '.join(given) if given else 'none'})")
    now = clock.now()
    fields = _common(
        workspace_id=workspace_id,
        session_id=session_id,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
    )
    if max_attempts is not None:
        fields["max_attempts"] = positive_int(max_attempts, name="max_attempts")
    if cron is not None or every is not None:
        fields.update(
            recurrence.plan_chain(
                now=now, cron=cron, every=every, tz=tz, start_at=start_at, end_at=end_at, catch_up=catch_up
            )
        )
    else:
        if tz is not None or start_at is not None or end_at is not None or catch_up != "replay":
            raise InvalidWake("tz, start_at, end_at and catch_up apply only to cron or every")
        if delay is not None:
            fields["fire_at"] = _after(now, parse_duration(delay, name="delay"), name="delay")
        else:
            fields["fire_at"] = to_datetime(at, name="at")
    expiry = _expiry(now, expires_in, expires_at)
    fields.update(trigger_type=TriggerType.AT, expires_at=expiry, due_at=_earliest(fields["fire_at"], expiry))
    return create_wake(fields, coalesce=coalesce)


def _earliest(*moments: datetime | None) -> datetime | None:
    present = [m for m in moments if m is not None]
    return min(present) if present else None


def watch(
    *,
    workspace_id: str,
    event_key: str,
    session_id: str | None = None,
    expires_in: Duration | None = None,
    expires_at: datetime | int | float | None = None,
    kind: str = SESSION_TURN,
    serial_key: str | None = None,
    intent: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
) -> Wake:
    """Create a wake that fires when :func:`deliver_event` delivers ``event_key`` in this workspace."""
    now = clock.now()
    fields = _common(
        workspace_id=workspace_id,
        session_id=session_id,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
    )
    if max_attempts is not None:
        fields["max_attempts"] = positive_int(max_attempts, name="max_attempts")
    expiry = _expiry(now, expires_in, expires_at)
    fields.update(
        trigger_type=TriggerType.ON_EVENT,
        event_key=key(event_key, name="event_key"),
        expires_at=expiry,
        due_at=expiry,
    )
    return create_wake(fields)


def request_approval(
    *,
    workspace_id: str,
    prompt: str,
    expires_in: Duration | None = None,
    expires_at: datetime | int | float | None = None,
    session_id: str | None = None,
    kind: str = SESSION_TURN,
    serial_key: str | None = None,
    intent: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
) -> ApprovalRequest:
    """Create a wake that fires when a human answers; return it with its one-time token.

    Only the token's hash is stored, so the token exists only in this return value. A retried
    create with the same ``idempotency_key`` returns the existing wake with a fresh token that is
    then the valid one (the old one cannot be recovered from the hash).
    """
    now = clock.now()
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidWake("prompt must be a non-empty string")
    if expires_in is None and expires_at is None:
        raise InvalidWake("request_approval needs expires_in or expires_at: an unanswered approval must end")
    fields = _common(
        workspace_id=workspace_id,
        session_id=session_id,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
    )
    if max_attempts is not None:
        fields["max_attempts"] = positive_int(max_attempts, name="max_attempts")
    expiry = _expiry(now, expires_in, expires_at)
    token = secrets.token_urlsafe(32)
    fields.update(
        trigger_type=TriggerType.ON_APPROVAL,
        prompt=prompt,
        token_hash=hash_token(token),
        expires_at=expiry,
        due_at=expiry,
    )
    wake = create_wake(fields)
    if wake.token_hash != fields["token_hash"]:
        # An idempotent replay: rotate the token on the existing, still-unanswered approval.
        rotated = (
            Wake.objects.using(db_alias())
            .filter(pk=wake.pk, state=State.PENDING, fire_at__isnull=True)
            .update(token_hash=fields["token_hash"], updated_at=now)
        )
        if rotated:
            wake.token_hash = fields["token_hash"]
    return ApprovalRequest(wake=wake, token=token)


# --------------------------------------------------------------------------------------------------
# Triggers: deliver, resolve, cancel
# --------------------------------------------------------------------------------------------------


def deliver_event(*, workspace_id: str, event_key: str, payload: Any = None) -> int:
    """Trigger every unexpired watcher of ``event_key`` in the workspace; return how many accepted.

    One conditional UPDATE: a watcher accepts at most one delivery (``fire_at`` is set by the first),
    and one whose expiry instant has come refuses it (the boundary is exclusive).
    """
    now = clock.now()
    workspace = key(workspace_id, name="workspace_id")
    event = key(event_key, name="event_key")
    result = {"trigger": TriggerType.ON_EVENT.value, "event_key": event, "payload": json_value(payload, name="payload")}
    using = db_alias()
    accepted = (
        Wake.objects.using(using)
        .filter(workspace_id=workspace, event_key=event, trigger_type=TriggerType.ON_EVENT)
        .pending()
        .filter(fire_at__isnull=True)
        .exclude(expires_at__lte=now)
        .update(result=result, fire_at=now, due_at=now, updated_at=now)
    )
    if accepted:
        transaction.on_commit(lambda: signals.wakes_due.send(sender=Wake, due_at=now), using=using)
    return accepted


def _actor_name(actor: Any) -> str:
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
    return ApprovalAlreadyResolved(f"approval {wake.pk} was already answered or cancelled")


def open_approval(token_hash: str, actor: Any) -> Wake:
    """Return the approval ``token_hash`` opens for ``actor`` if it can be answered now, else raise.

    The one place that decides whether an approval may be answered: :func:`resolve_hashed` calls it
    before its conditional UPDATE, and the approval page calls it before showing the prompt, so the
    page refuses exactly what an answer would be refused for. Raise :class:`ApprovalNotFound`,
    :class:`ApprovalDenied` (the ``AUTHORIZE`` hook said no, or no hook is configured: approvals are
    never "allow all"), :class:`ApprovalExpired` or :class:`ApprovalAlreadyResolved`.
    """
    if not isinstance(token_hash, str) or not token_hash:
        raise ApprovalNotFound("no approval answers to this token")
    wake = Wake.objects.using(db_alias()).filter(token_hash=token_hash, trigger_type=TriggerType.ON_APPROVAL).first()
    if wake is None:
        raise ApprovalNotFound("no approval answers to this token")
    authorize = wakes_settings.authorize
    if authorize is None:
        raise ApprovalDenied("no WAKES['AUTHORIZE'] hook is configured, so no one may resolve approvals")
    if not authorize(actor, wake.workspace_id):
        raise ApprovalDenied(f"{_actor_name(actor)!r} may not resolve approvals in this workspace")
    now = clock.now()
    if wake.state == State.PENDING and wake.fire_at is None and (wake.expires_at is None or wake.expires_at > now):
        return wake
    raise _approval_refusal(wake, now)


def resolve(token: str, answer: Any, actor: Any) -> Wake:
    """Answer an approval with its one-time token; the first valid answer wins.

    Raise what :func:`open_approval` raises; a racing answer that commits first makes this one
    :class:`ApprovalAlreadyResolved`.
    """
    if not isinstance(token, str) or not token:
        raise ApprovalNotFound("no approval answers to this token")
    return resolve_hashed(hash_token(token), answer, actor)


def resolve_hashed(token_hash: str, answer: Any, actor: Any) -> Wake:
    """:func:`resolve` for a caller that kept only the token's hash (the approval page's session)."""
    answer = json_value(answer, name="answer")
    wake = open_approval(token_hash, actor)
    using = db_alias()
    now = clock.now()
    result = {"trigger": TriggerType.ON_APPROVAL.value, "answer": answer, "resolved_by": _actor_name(actor)}
    won = (
        Wake.objects.using(using)
        .filter(pk=wake.pk, state=State.PENDING, fire_at__isnull=True, expires_at__gt=now)
        .update(result=result, fire_at=now, due_at=now, updated_at=now)
    )
    wake.refresh_from_db(using=using)
    if won:
        transaction.on_commit(lambda: signals.wakes_due.send(sender=Wake, due_at=now), using=using)
        return wake
    raise _approval_refusal(wake, now)


def cancel(wake_id: int) -> bool:
    """Cancel a pending wake; return whether this call cancelled it.

    A firing occurrence of a recurring chain cannot be stopped mid-fire, but cancelling it ends the
    chain: no further occurrence is scheduled when it settles (and ``True`` is returned).
    """
    if isinstance(wake_id, bool) or not isinstance(wake_id, int):
        raise InvalidWake(f"cancel() takes a wake id (an int), got {type(wake_id).__name__}")
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
    from django.db.models import Case, Q, When

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
        transaction.on_commit(lambda: signals.wakes_due.send(sender=Wake, due_at=now), using=using)
    return bool(won)


# --------------------------------------------------------------------------------------------------
# Claiming
# --------------------------------------------------------------------------------------------------


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


def _claim_result(wake: Wake, now: datetime) -> tuple[dict[str, Any], bool]:
    """Decide, at claim time, what this firing delivers; it is persisted before the sink runs."""
    from . import recurrence

    if wake.result is not None:
        return wake.result, bool(wake.result.get("expired"))
    if wake.expires_at is not None and wake.expires_at <= now:
        return {"trigger": wake.trigger_type, "expired": True}, True
    result: dict[str, Any] = {"trigger": TriggerType.AT.value}
    if wake.is_recurring:
        result.update(recurrence.claim_extras(wake, now))
    return result, False


def _lapsed_takeovers(
    using: str, now: datetime, kinds: list[str], limit: int, runner_id: str, lease: timedelta | None = None
) -> list[Claim]:
    """Take over firing wakes whose lease lapsed: the old attempt is recorded as interrupted."""
    claims = []
    lease = lease or wakes_settings.lease
    for wake in Wake.objects.using(using).lock_lapsed(now, kinds, limit):
        WakeAttempt.objects.using(using).create(
            wake=wake,
            number=wake.attempts,
            runner_id=wake.claimed_by,
            started_at=wake.claimed_at or now,
            finished_at=now,
            outcome=Outcome.INTERRUPTED,
            error=f"lease lapsed at {wake.lease_until.isoformat() if wake.lease_until else '?'}",
        )
        if wake.attempts >= wake.max_attempts:
            _settle_dead_in_tx(using, wake, now, f"interrupted {wake.attempts} times (lease lapsed mid-fire)")
            continue
        token = secrets.token_hex(16)
        Wake.objects.using(using).filter(pk=wake.pk, state=State.FIRING, claim_token=wake.claim_token).update(
            claim_token=token,
            lease_until=now + lease,
            claimed_by=runner_id,
            claimed_at=now,
            attempts=F("attempts") + 1,
            updated_at=now,
        )
        wake.claim_token, wake.lease_until, wake.claimed_by, wake.claimed_at = token, now + lease, runner_id, now
        wake.attempts += 1
        claims.append(
            Claim(wake, token, runner_id, now, expired=bool((wake.result or {}).get("expired")), takeover=True)
        )
    return claims


def _settle_dead_in_tx(using: str, wake: Wake, now: datetime, error: str) -> None:
    from . import recurrence

    Wake.objects.using(using).filter(pk=wake.pk, state=State.FIRING).update(
        state=State.DEAD,
        lane_lock=None,
        lease_until=None,
        claim_token=None,
        last_error=error,
        settled_at=now,
        updated_at=now,
    )
    if wake.is_recurring:
        recurrence.book_next(using, wake, now)
    transaction.on_commit(lambda: signals.wake_dead.send(sender=Wake, wake=wake, error=error), using=using)


def claim_batch(
    *, runner_id: str, limit: int | None = None, lanes: list[str] | None = None, lease: timedelta | None = None
) -> list[Claim]:
    """Claim up to ``limit`` wakes for ``runner_id``: lapsed leases first, then due pending wakes.

    The candidate read is plain (no locks) and already limited to registered kinds and to the head
    of each free lane; the rows are then locked with SKIP LOCKED and moved to ``firing`` by one
    conditional UPDATE per result shape. The unique ``lane_lock`` column is what makes a lane
    single-file: a racing claim of a busy lane fails its INSERT-like index check and is dropped.
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
            claims = _lapsed_takeovers(using, now, kinds, limit, runner_id, lease)
            room = limit - len(claims)
            if room <= 0:
                return claims
            candidates = manager.claimable(now, kinds)
            if lanes:
                candidates = candidates.filter(serial_key__in=lanes)
            ids = list(candidates.values_list("id", flat=True)[:room])
            if not ids:
                return claims
            locked = list(manager.lock_pending(ids))
            claims.extend(_claim_rows(using, locked, now, runner_id, lease))
            return claims
    except OperationalError as exc:  # a deadlock or lock timeout between racing runners: nothing claimed
        logger.info("claim pass rolled back, will retry: %s", exc)
        return []


def _claim_rows(
    using: str, rows: list[Wake], now: datetime, runner_id: str, lease: timedelta | None = None
) -> list[Claim]:
    token = secrets.token_hex(16)
    lease_until = now + (lease or wakes_settings.lease)
    groups: dict[str, tuple[dict[str, Any], bool, list[Wake]]] = {}
    seen_lanes: set[str] = set()
    for wake in rows:
        if wake.serial_key is not None:
            if wake.serial_key in seen_lanes:
                continue
            seen_lanes.add(wake.serial_key)
        result, expired = _claim_result(wake, now)
        marker = repr(sorted(result.items()))
        groups.setdefault(marker, (result, expired, []))[2].append(wake)
    claimed: list[Claim] = []
    update = {
        "state": State.FIRING,
        "lane_lock": F("serial_key"),
        "claim_token": token,
        "lease_until": lease_until,
        "claimed_by": runner_id,
        "claimed_at": now,
        "attempts": F("attempts") + 1,
        "coalesce_key": None,
        "updated_at": now,
    }
    for result, expired, wakes in groups.values():
        ids = [w.pk for w in wakes]
        try:
            with transaction.atomic(using=using):
                won = Wake.objects.using(using).filter(pk__in=ids, state=State.PENDING).update(result=result, **update)
            winners = wakes if won == len(ids) else _reread_winners(using, ids, token)
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
            claimed.append(Claim(wake, token, runner_id, now, expired=expired))
    return claimed


def _reread_winners(using: str, ids: list[int], token: str) -> list[Wake]:
    return list(Wake.objects.using(using).filter(pk__in=ids, claim_token=token))


# --------------------------------------------------------------------------------------------------
# Firing and settling
# --------------------------------------------------------------------------------------------------


@dataclass
class FireOutcome:
    outcome: str
    settled: bool  # False when the lease was taken over: the result was discarded (fenced)
    error: str = ""


@dataclass(frozen=True)
class Succeeded:
    """A sink returned normally; the wake is still ``firing`` until :func:`settle_successes` runs."""

    claim: Claim
    stop: bool
    finished_at: datetime

    @property
    def outcome(self) -> str:
        if self.claim.expired:
            return Outcome.EXPIRED
        return Outcome.STOPPED if self.stop else Outcome.FIRED


def fire(claim: Claim) -> FireOutcome:
    """Run the sink for a claimed wake, then settle it under the claim's fence token."""
    ran = run_sink(claim)
    return settle_successes([ran])[0] if isinstance(ran, Succeeded) else ran


def run_sink(claim: Claim) -> FireOutcome | Succeeded:
    """Run the sink; settle at once anything but a plain success, which is returned for settling.

    Splitting the two lets a runner settle a batch of successes in one transaction (one commit
    instead of one per wake) while failures, retries and defers are written down immediately.
    """
    wake = claim.wake
    sink_fn = registry.get(wake.kind)
    if sink_fn is None:
        _release_unwakeable(claim)
        return FireOutcome("unwakeable", settled=True)
    try:
        returned = sink_fn(wake, dict(claim.result))
    except Exception as exc:  # noqa: BLE001 - a sink may fail in any way; we record and retry
        logger.exception("wake %s (kind=%s lane=%s) failed: %s", wake.pk, wake.kind, wake.serial_key, exc)
        error = _format_error(exc)
        return _settle_retrying(f"wake {wake.pk}", lambda: _settle_failure(claim, error))
    if isinstance(returned, Retry | Defer):
        return _settle_retrying(f"wake {wake.pk}", lambda: _settle_returned(claim, returned))
    return Succeeded(claim, stop=isinstance(returned, Stop), finished_at=clock.now())


SETTLE_TRIES = 6


def _settle_retrying(label: str, settle: Any) -> Any:
    """Run a settle transaction, retrying when the database aborts it (deadlock, lock timeout).

    The sink has already run, so giving up here would leave the row firing until its lease
    lapses and then re-drive it: a second effect. Every attempt is a fresh transaction fenced by
    the claim token, so a retry after an ambiguous failure can only be fenced out, never applied twice.
    """
    using = db_alias()
    for attempt in range(1, SETTLE_TRIES + 1):
        try:
            return settle()
        except OperationalError as exc:
            if attempt == SETTLE_TRIES or connections[using].in_atomic_block:
                raise
            logger.info("settling %s was rolled back (%s); retrying", label, exc)
            connections[using].close_if_unusable_or_obsolete()
            time.sleep(random.uniform(0, 0.02 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def settle_successes(done: list[Succeeded]) -> list[FireOutcome]:
    """Settle sinks that returned normally, all in one transaction; return an outcome for each.

    Each row is fenced by its claim token: a wake whose lease another runner took over meanwhile
    is left to that runner (its outcome here is discarded and reported as ``fenced``).
    """
    if not done:
        return []
    return _settle_retrying(f"{len(done)} fired wake(s)", lambda: _settle_successes(done))


def _settle_successes(done: list[Succeeded]) -> list[FireOutcome]:
    from . import recurrence

    using = db_alias()
    now = clock.now()
    rows = Wake.objects.using(using)
    settled = {
        "lane_lock": None,
        "lease_until": None,
        "claim_token": None,
        "last_error": "",
        "settled_at": now,
        "updated_at": now,
    }
    with transaction.atomic(using=using):
        if len(done) == 1:  # the common single settle: the fenced UPDATE's row count decides
            (only,) = done
            won = rows.filter(pk=only.claim.wake.pk, state=State.FIRING, claim_token=only.claim.token).update(
                state=State.EXPIRED if only.claim.expired else State.FIRED, **settled
            )
            winners = done if won else []
        else:  # a batch: lock the rows still held under their tokens, then one UPDATE per final state
            locked = set(
                rows.filter(pk__in=[d.claim.wake.pk for d in done], state=State.FIRING)
                .select_for_update()
                .values_list("pk", "claim_token")
            )
            winners = [d for d in done if (d.claim.wake.pk, d.claim.token) in locked]
            for final, expired in ((State.FIRED, False), (State.EXPIRED, True)):
                ids = [d.claim.wake.pk for d in winners if d.claim.expired is expired]
                if ids:
                    rows.filter(pk__in=ids, state=State.FIRING).update(state=final, **settled)
        WakeAttempt.objects.using(using).bulk_create(
            [
                WakeAttempt(
                    wake_id=d.claim.wake.pk,
                    number=d.claim.wake.attempts,
                    runner_id=d.claim.runner_id,
                    started_at=d.claim.started_at,
                    finished_at=d.finished_at,
                    outcome=d.outcome,
                )
                for d in winners
            ]
        )
        for d in winners:
            if d.claim.wake.is_recurring and not d.stop:
                recurrence.book_next(using, d.claim.wake, now)
            transaction.on_commit(
                partial(signals.wake_fired.send, sender=Wake, wake=d.claim.wake, outcome=d.outcome), using=using
            )
    won = {id(d) for d in winners}
    outcomes = []
    for d in done:
        if id(d) not in won:
            outcomes.append(_fenced_out(d.claim))
            continue
        wake = d.claim.wake
        logger.info(
            "fired wake=%s kind=%s lane=%s outcome=%s lateness_ms=%d duration_ms=%d",
            wake.pk,
            wake.kind,
            wake.serial_key,
            d.outcome,
            _ms(d.claim.started_at - (wake.due_at or d.claim.started_at)),
            _ms(d.finished_at - d.claim.started_at),
        )
        outcomes.append(FireOutcome(d.outcome, settled=True))
    return outcomes


def _format_error(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-ERROR_MAX_CHARS:]


def _fenced(using: str, claim: Claim):
    return Wake.objects.using(using).filter(pk=claim.wake.pk, state=State.FIRING, claim_token=claim.token)


def _attempt(using: str, claim: Claim, now: datetime, outcome: str, error: str = "") -> None:
    WakeAttempt.objects.using(using).create(
        wake_id=claim.wake.pk,
        number=claim.wake.attempts,
        runner_id=claim.runner_id,
        started_at=claim.started_at,
        finished_at=now,
        outcome=outcome,
        error=error,
    )


def _settle_returned(claim: Claim, returned: Any) -> FireOutcome:
    try:
        if isinstance(returned, Retry):
            at = to_datetime(returned.at, name="Retry.at") if returned.at is not None else None
            return _settle_failure(claim, returned.reason or "retry requested", retry_at=at, outcome=Outcome.RETRY)
        if isinstance(returned, Defer):
            return _settle_defer(claim, returned)
    except InvalidWake as exc:  # a malformed Retry.at / Defer.until is a failed attempt, not a crashed pass
        return _settle_failure(claim, f"the sink returned an invalid {type(returned).__name__}: {exc}")
    return _settle_successes([Succeeded(claim, stop=isinstance(returned, Stop), finished_at=clock.now())])[0]


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def _settle_failure(
    claim: Claim, error: str, *, retry_at: datetime | None = None, outcome: str = Outcome.FAILED
) -> FireOutcome:
    using = db_alias()
    now = clock.now()
    wake = claim.wake
    with transaction.atomic(using=using):
        if wake.attempts >= wake.max_attempts:
            won = _fenced(using, claim).update(
                state=State.DEAD,
                lane_lock=None,
                lease_until=None,
                claim_token=None,
                last_error=error,
                settled_at=now,
                updated_at=now,
            )
            if not won:
                return _fenced_out(claim)
            _attempt(using, claim, now, outcome, error)
            from . import recurrence

            if wake.is_recurring:
                recurrence.book_next(using, wake, now)
            transaction.on_commit(lambda: signals.wake_dead.send(sender=Wake, wake=wake, error=error), using=using)
            logger.error("wake %s is dead after %d attempts: %s", wake.pk, wake.attempts, error.splitlines()[-1:])
            return FireOutcome("dead", settled=True, error=error)
        due = retry_at or now + wakes_settings.backoff(wake.attempts)
        won = _fenced(using, claim).update(
            state=State.PENDING,
            lane_lock=None,
            lease_until=None,
            claim_token=None,
            last_error=error,
            due_at=due,
            updated_at=now,
        )
        if not won:
            return _fenced_out(claim)
        _attempt(using, claim, now, outcome, error)
        transaction.on_commit(
            lambda: signals.wake_failed.send(sender=Wake, wake=wake, error=error, retry_at=due), using=using
        )
    return FireOutcome(outcome, settled=True, error=error)


def _settle_defer(claim: Claim, defer: Defer) -> FireOutcome:
    using = db_alias()
    now = clock.now()
    until = defer.until
    if isinstance(until, str | timedelta):
        due = _after(now, parse_duration(until, name="Defer.until"), name="Defer.until")
    else:
        due = to_datetime(until, name="Defer.until")
    with transaction.atomic(using=using):
        won = _fenced(using, claim).update(
            state=State.PENDING,
            lane_lock=None,
            lease_until=None,
            claim_token=None,
            due_at=due,
            attempts=F("attempts") - 1,
            updated_at=now,
        )
        if not won:
            return _fenced_out(claim)
        _attempt(using, claim, now, Outcome.DEFERRED)
    return FireOutcome(Outcome.DEFERRED, settled=True)


def release(claim: Claim) -> bool:
    """Hand an unfired claim back (shutdown, or its sink vanished): pending again, attempt uncounted."""
    return bool(_release_unwakeable(claim))


def _release_unwakeable(claim: Claim) -> int:
    """The sink vanished between claim and fire: put the wake back, uncounted, untouched."""
    using = db_alias()
    return _fenced(using, claim).update(
        state=State.PENDING,
        lane_lock=None,
        lease_until=None,
        claim_token=None,
        attempts=F("attempts") - 1,
        updated_at=clock.now(),
    )


def _fenced_out(claim: Claim) -> FireOutcome:
    logger.warning("wake %s: lease was taken over by another runner; this runner's outcome is discarded", claim.wake.pk)
    return FireOutcome("fenced", settled=False)


# --------------------------------------------------------------------------------------------------
# Passes
# --------------------------------------------------------------------------------------------------


@dataclass
class RunReport:
    """What one pass did, and when the next one is worth running."""

    fired: int = 0
    failed: int = 0
    expired: int = 0
    deferred: int = 0
    dead: int = 0
    fenced: int = 0
    claimed: int = 0
    next_at: datetime | None = None
    outcomes: dict[int, str] = field(default_factory=dict)

    def add(self, wake_id: int, result: FireOutcome) -> None:
        self.outcomes[wake_id] = result.outcome
        if result.outcome in (Outcome.FIRED, Outcome.STOPPED):
            self.fired += 1
        elif result.outcome == Outcome.EXPIRED:
            self.expired += 1
        elif result.outcome == Outcome.DEFERRED:
            self.deferred += 1
        elif result.outcome == "dead":
            self.dead += 1
            self.failed += 1
        elif result.outcome == "fenced":
            self.fenced += 1
        elif result.outcome in (Outcome.FAILED, Outcome.RETRY):
            self.failed += 1


class _UnwakeableLog:
    """Warn once per unwakeable wake, then stay at DEBUG until it wakes or leaves the due set."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def observe(self, rows: list[tuple[int, str]]) -> None:
        current = set()
        for wake_id, kind in rows:
            current.add(wake_id)
            level = logging.DEBUG if wake_id in self._warned else logging.WARNING
            logger.log(level, "wake %s is due but no sink is registered for kind=%r; it stays due", wake_id, kind)
        self._warned = current

    def reset(self) -> None:
        self._warned = set()


unwakeable_log = _UnwakeableLog()


def next_due_at(kinds: list[str] | None = None) -> datetime | None:
    """Return the earliest moment a pending wake of a fireable kind, or a lease, comes due."""
    kinds = registry.kinds() if kinds is None else kinds
    manager = Wake.objects.db_manager(db_alias())
    due = manager.pending().of_kinds(kinds).aggregate(m=Min("due_at"))["m"]
    lease = manager.filter(state=State.FIRING).of_kinds(kinds).aggregate(m=Min("lease_until"))["m"]
    return _earliest(due, lease)


def run_due(*, limit: int | None = None, runner_id: str | None = None, lanes: list[str] | None = None) -> RunReport:
    """Run one pass: claim a batch, fire each wake, settle each; one failure never stops the rest."""
    runner_id = runner_id or default_runner_id()
    limit = limit or wakes_settings.batch
    report = RunReport()
    claims = claim_batch(runner_id=runner_id, limit=limit, lanes=lanes)
    report.claimed = len(claims)
    for claim in claims:
        report.add(claim.wake.pk, fire(claim))
    kinds = registry.kinds()
    if len(claims) < limit:
        observe_unwakeable(kinds)
    report.next_at = next_due_at(kinds)
    return report


def observe_unwakeable(kinds: list[str] | None = None) -> None:
    """Warn once (then DEBUG) about due wakes no registered sink can fire; they stay due, untouched."""
    kinds = registry.kinds() if kinds is None else kinds
    rows = Wake.objects.using(db_alias()).unwakeable(clock.now(), kinds).values_list("id", "kind")[:100]
    unwakeable_log.observe(list(rows))


def recover(*, runner_id: str | None = None, lease: timedelta | None = None) -> int:
    """Re-drive every wake whose lease lapsed (boot-time recovery); return how many were re-driven.

    A takeover that loses a deadlock to a racing runner is simply tried again (a few times): the
    rows it wanted are either still lapsed, or that runner took them over.
    """
    runner_id = runner_id or default_runner_id()
    kinds = registry.kinds()
    if not kinds:
        return 0
    using = db_alias()
    total = 0
    rolled_back = 0
    while True:
        try:
            with transaction.atomic(using=using):
                claims = _lapsed_takeovers(using, clock.now(), kinds, wakes_settings.batch, runner_id, lease)
        except OperationalError as exc:
            rolled_back += 1
            if rolled_back >= SETTLE_TRIES:
                raise
            logger.info("recovery pass rolled back (%s); retrying", exc)
            time.sleep(random.uniform(0, 0.02 * 2**rolled_back))
            continue
        for claim in claims:
            fire(claim)
        total += len(claims)
        if len(claims) < wakes_settings.batch:
            return total


def gc(*, older_than: Duration = "30d", batch: int = 1000) -> int:
    """Delete terminal wakes (and their attempts) not updated for ``older_than``; return how many.

    Deletes in bounded batches so a large backlog never holds one long transaction. Note that a
    deleted wake no longer answers to its idempotency key.
    """
    cutoff = clock.now() - parse_duration(older_than, name="older_than")
    using = db_alias()
    total = 0
    while True:
        ids = list(Wake.objects.using(using).terminal_before(cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            return total
        with transaction.atomic(using=using):
            WakeAttempt.objects.using(using).filter(wake_id__in=ids).delete()
            total += Wake.objects.using(using).filter(pk__in=ids).delete()[1].get(Wake._meta.label, 0)
