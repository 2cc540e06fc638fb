"""Creating wakes that wait for a trigger from outside: an event or a person's answer.

:func:`watch` waits for :func:`~django_wakes.engine.deliver_event`; :func:`request_approval` for
:func:`~django_wakes.engine.resolve`. Both insert through :func:`~django_wakes.engine.insert.create_wake`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import clock, events
from ..durations import Duration
from ..exceptions import IdempotencyConflict, InvalidWake
from ..models import DEFAULT_QUEUE, TriggerType, Wake, WatchedKey
from ..sinks import SESSION_TURN
from ..validation import json_value, key, prompt_text
from . import retention
from .insert import _common, _expiry, create_wake
from .shared import announce_due, db_alias, hash_token, retry_rolled_back


@dataclass(frozen=True)
class ApprovalRequest:
    """What :func:`request_approval` returns: the wake and the one-time token (shown only here).

    ``token`` is ``None`` when the call was a replay (the idempotency key named this approval already):
    the link sent the first time stays the valid one. ``repr()`` and ``str()`` hide the token
    (``token=<hidden>``): a request logged with ``%r``, put in an f-string or shown among a traceback's
    locals names its wake, never the token. Read ``.token`` to build the link you send.
    """

    wake: Wake
    token: str | None

    def __repr__(self) -> str:  # kept by @dataclass, which writes no __repr__ over one the class defines
        return f"{type(self).__name__}(wake={self.wake!r}, token=<hidden>)"


def watch(
    *,
    workspace_id: str,
    event_key: str | None = None,
    event_keys: list[str] | None = None,
    match: dict[str, Any] | None = None,
    since: datetime | Duration | int | float | None = None,
    session_id: str | None = None,
    expires_in: Duration | None = None,
    expires_at: datetime | int | float | None = None,
    kind: str = SESSION_TURN,
    serial_key: str | None = None,
    intent: Any = None,
    idempotency_key: str | None = None,
    max_attempts: int | None = None,
    budget: bool = False,
    priority: int = 0,
    queue_name: str = DEFAULT_QUEUE,
    limit_key: str | None = None,
) -> Wake:
    """Create a wake that fires when :func:`deliver_event` delivers its key in this workspace.

    ``event_keys`` instead of ``event_key``: any of several, the first delivered wins (the sink reads
    ``result["event_key"]``). ``match``: equality on paths of the payload that a delivery must meet
    (:mod:`django_wakes.events`). ``since`` (a datetime, or a duration back from now): a delivery
    retained (``deliver_event(retain=...)``) at or after it fires the new watch at once — also one
    committing at the very moment the watch does.
    """
    now = clock.now()
    fields = _common(
        workspace_id=workspace_id,
        session_id=session_id,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        priority=priority,
        queue_name=queue_name,
        limit_key=limit_key,
    )
    keys = _event_keys(event_key, event_keys)
    event_match = events.match_filter(match)
    since_at = events.since_moment(since, now)
    expiry = _expiry(now, expires_in, expires_at)
    fields.update(
        trigger_type=TriggerType.ON_EVENT,
        event_key=keys[0],
        event_match=event_match,
        expires_at=expiry,
        due_at=expiry,
    )
    using = db_alias()

    wake = retry_rolled_back(
        "creating a watch", lambda: _create_watch(using, fields, keys, since_at, event_match, now, budget)
    )
    if wake.fire_at is not None and wake.result is not None:
        announce_due(using, now)
    return wake


def _create_watch(
    using: str,
    fields: dict[str, Any],
    keys: list[str],
    since_at: datetime | None,
    event_match: dict[str, Any] | None,
    now: datetime,
    budget: bool,
) -> Wake:
    with transaction.atomic(using=using):
        if since_at is not None:
            retention.lock_event_keys(using, fields["workspace_id"], keys, now)
            hit = retention.retained_hit(using, fields["workspace_id"], keys, since_at, now, event_match)
            if hit is not None:
                fields.update(
                    result=events_result(hit.event_key, hit.payload, retained_at=hit.delivered_at),
                    fire_at=hit.delivered_at,
                    due_at=now,
                )
        wake = create_wake(fields, budget=budget, now=now)
        if len(keys) > 1:
            WatchedKey.objects.using(using).bulk_create(
                [WatchedKey(wake=wake, workspace_id=wake.workspace_id, event_key=k) for k in keys[1:]],
                ignore_conflicts=True,
            )
    return wake


#: At most this many keys in one any-of watch.
MAX_EVENT_KEYS = 20


def _event_keys(event_key: Any, event_keys: Any) -> list[str]:
    if (event_key is None) == (event_keys is None):
        raise InvalidWake("pass exactly one of event_key or event_keys")
    if event_key is not None:
        return [key(event_key, name="event_key")]
    if not isinstance(event_keys, list | tuple) or not event_keys:
        raise InvalidWake("event_keys must be a non-empty list of keys")
    if len(event_keys) > MAX_EVENT_KEYS:
        raise InvalidWake(f"event_keys: at most {MAX_EVENT_KEYS} keys")
    keys = [key(k, name="event_keys") for k in event_keys]
    if len(set(keys)) != len(keys):
        raise InvalidWake("event_keys lists a key twice")
    return keys


def events_result(event_key: str, payload: Any, *, retained_at: datetime | None = None) -> dict[str, Any]:
    """What a watch's sink is handed for a delivery: which key came, and its payload."""
    result = {"trigger": TriggerType.ON_EVENT.value, "event_key": event_key, "payload": payload}
    if retained_at is not None:
        result["retained_at"] = retained_at.isoformat()
    return result


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
    on_expiry: Any = None,
    budget: bool = False,
    priority: int = 0,
    queue_name: str = DEFAULT_QUEUE,
    limit_key: str | None = None,
) -> ApprovalRequest:
    """Create a wake that fires when a human answers; return it with its one-time token.

    Only the token's hash is stored, so the token exists only in this return value. A retried
    create with the same ``idempotency_key`` (the same session, prompt and intent) returns the
    existing wake with ``token=None`` and changes nothing: the link already sent stays the valid one
    (a replay never rotates it; the host gets a new link only by asking
    :func:`~django_wakes.engine.approvals.reissue_approval`). A key naming anything else (another
    session's wake, a wake that is no approval, an approval asking another prompt or carrying
    another intent) raises :class:`~django_wakes.exceptions.IdempotencyConflict`. ``on_expiry``: the answer
    delivered (marked ``"defaulted": True``) when no one answers in time, e.g. ``{"approved": False}``;
    without it the sink is told ``{"expired": True}``.
    """
    now = clock.now()
    prompt = prompt_text(prompt)
    if expires_in is None and expires_at is None:
        raise InvalidWake("request_approval needs expires_in or expires_at: an unanswered approval must end")
    fields = _common(
        workspace_id=workspace_id,
        session_id=session_id,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
        max_attempts=max_attempts,
        priority=priority,
        queue_name=queue_name,
        limit_key=limit_key,
    )
    expiry = _expiry(now, expires_in, expires_at)
    token = secrets.token_urlsafe(32)
    fields.update(
        trigger_type=TriggerType.ON_APPROVAL,
        prompt=prompt,
        token_hash=hash_token(token),
        on_expiry=json_value(on_expiry, name="on_expiry") if on_expiry is not None else None,
        expires_at=expiry,
        due_at=expiry,
    )
    wake = create_wake(fields, budget=budget, now=now)
    if wake.token_hash == fields["token_hash"]:
        return ApprovalRequest(wake=wake, token=token)
    # An idempotent replay (create_wake checked the session): the same request gets its wake back, no token.
    if wake.trigger_type != TriggerType.ON_APPROVAL or wake.prompt != prompt or wake.intent != fields["intent"]:
        raise IdempotencyConflict(
            f"idempotency_key {idempotency_key!r:.80} already names another request in this workspace "
            "(not an approval, or another prompt or intent)"
        )
    return ApprovalRequest(wake=wake, token=None)
