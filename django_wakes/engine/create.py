"""Creating wakes: ``schedule`` and ``schedule_many``, and booking a chain's next occurrence.

Every insert of a wake goes through :func:`~django_wakes.engine.insert.create_wake`, whose dedup paths
(idempotency key, coalescing slot, a chain's slot key) all end at a unique index: concurrent creators
cannot both win. Wakes that wait for an event or an answer are created in :mod:`.waiting`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from .. import clock, tracing
from ..durations import Duration, parse_duration
from ..exceptions import InvalidWake, WakeError
from ..logs import about
from ..models import DEFAULT_QUEUE, TriggerType, Wake
from ..schedules import recurrence
from ..sinks import SESSION_TURN
from ..timeutil import to_datetime
from ..validation import json_value, recent_enough
from . import sessions
from .bulk import insert_plain_many
from .insert import (
    _announce_created,
    _common,
    _create_wake,
    _expiry,
    create_wake,
    refuse_other_session,
    replayed,
    session_lane,
)
from .shared import after, db_alias, earliest, firing_wake, logger, retry_rolled_back
from .waiting import ApprovalRequest, events_result, request_approval, watch

__all__ = [
    "ApprovalRequest",
    "book_next",
    "book_occurrence",
    "create_wake",
    "events_result",
    "request_approval",
    "schedule",
    "schedule_many",
    "session_lane",
    "watch",
]


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
    dst: Any = None,
    kind: str = SESSION_TURN,
    serial_key: str | None = None,
    intent: Any = None,
    idempotency_key: str | None = None,
    coalesce: bool = False,
    expires_in: Duration | None = None,
    expires_at: datetime | int | float | None = None,
    max_attempts: int | None = None,
    budget: bool = False,
    priority: int = 0,
    queue_name: str = DEFAULT_QUEUE,
    limit_key: str | None = None,
) -> Wake:
    """Create a time-triggered wake: exactly one of ``delay``, ``at``, ``cron`` or ``every``.

    ``limit_key``: the key whose limits (``WAKES["LIMITS"]``) hold its start back; a chain's occurrences keep it.
    ``dst``: a cron chain's daylight-saving policy (:class:`~django_wakes.schedules.recurrence.DstPolicy`,
    ``{"ambiguous": ..., "missing": ...}`` or ``"ambiguous=both,missing=skip"``); default, today's rule.
    """
    now = clock.now()
    fields = _schedule_fields(
        now,
        workspace_id=workspace_id,
        session_id=session_id,
        delay=delay,
        at=at,
        cron=cron,
        every=every,
        tz=tz,
        start_at=start_at,
        end_at=end_at,
        catch_up=catch_up,
        dst=dst,
        kind=kind,
        serial_key=serial_key,
        intent=intent,
        idempotency_key=idempotency_key,
        expires_in=expires_in,
        expires_at=expires_at,
        max_attempts=max_attempts,
        priority=priority,
        queue_name=queue_name,
        limit_key=limit_key,
    )
    return create_wake(fields, coalesce=coalesce, budget=budget, now=now)


#: What :func:`schedule` takes, and so what each item of :func:`schedule_many` may name (read off its
#: signature, so the two cannot drift apart).
SCHEDULE_ARGUMENTS = frozenset(inspect.signature(schedule).parameters)


def _schedule_fields(
    now: datetime,
    *,
    workspace_id: Any,
    session_id: Any = None,
    delay: Any = None,
    at: Any = None,
    cron: Any = None,
    every: Any = None,
    tz: Any = None,
    start_at: Any = None,
    end_at: Any = None,
    catch_up: Any = "replay",
    dst: Any = None,
    kind: Any = SESSION_TURN,
    serial_key: Any = None,
    intent: Any = None,
    idempotency_key: Any = None,
    expires_in: Any = None,
    expires_at: Any = None,
    max_attempts: Any = None,
    priority: Any = 0,
    queue_name: Any = DEFAULT_QUEUE,
    limit_key: Any = None,
) -> dict[str, Any]:
    """Validate :func:`schedule`'s arguments into the fields of the wake (nothing is written)."""
    given = [n for n, v in (("delay", delay), ("at", at), ("cron", cron), ("every", every)) if v is not None]
    if len(given) != 1:
        raise InvalidWake(f"pass exactly one of delay, at, cron, every (got {', '.join(given) if given else 'none'})")
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
    if cron is not None or every is not None:
        fields.update(
            recurrence.plan_chain(
                now=now,
                cron=cron,
                every=every,
                tz=tz,
                start_at=start_at,
                end_at=end_at,
                catch_up=catch_up,
                dst=dst,
            )
        )
    else:
        if tz is not None or start_at is not None or end_at is not None or catch_up != "replay" or dst is not None:
            raise InvalidWake("tz, start_at, end_at, catch_up and dst apply only to cron or every")
        if delay is not None:
            fields["fire_at"] = after(now, parse_duration(delay, name="delay"), name="delay")
        else:
            fields["fire_at"] = recent_enough(to_datetime(at, name="at"), now)
    expiry = _expiry(now, expires_in, expires_at)
    fields.update(trigger_type=TriggerType.AT, expires_at=expiry, due_at=earliest(fields["fire_at"], expiry))
    return fields


def schedule_many(items: Iterable[Mapping[str, Any]], **common: Any) -> list[Wake]:
    """Create many time-triggered wakes in one transaction: ``schedule(**common, **item)`` for each item.

    For bursts (a fan-out, an import): the plain items are inserted with one multi-row ``INSERT`` per
    :data:`BULK_CHUNK` rows, with one NOTIFY, instead of a transaction each. The semantics are
    :func:`schedule`'s:

    * every item is validated before anything is written, and a bad one raises (a
      :class:`~django_wakes.exceptions.WakeError` naming the item's position): nothing is created;
    * idempotency: an item whose ``(workspace_id, idempotency_key)`` names an existing wake, or an
      earlier item of the same call, gets that wake back instead of a new one; a concurrent creator
      of the same key wins or loses as with ``schedule()`` (the pass is retried and reads its row);
    * a wake for a stopped session is refused (:class:`~django_wakes.exceptions.SessionStopped`);
    * items with ``coalesce=True`` or ``budget=True`` go through ``schedule()``'s own path, one by
      one, in the same transaction (they lock a lane's slot or a session's budget).

    Returns the wakes in the order of ``items``.
    """
    now = clock.now()
    parent = firing_wake.get()
    depth = parent.depth + 1 if parent is not None else 0
    planned: list[tuple[dict[str, Any], bool, bool]] = []
    # Items of one shape (the same arguments but the intent) validate to the same fields: once per shape.
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for position, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidWake(f"schedule_many item {position}: expected a mapping of schedule() arguments")
        arguments = {**common, **item}
        unknown = sorted(set(arguments) - SCHEDULE_ARGUMENTS)
        if unknown:
            names = ", ".join(repr(name)[:60] for name in unknown[:5])
            raise InvalidWake(f"schedule_many item {position}: unknown argument(s) {names}")
        coalesce = bool(arguments.pop("coalesce", False))
        budget = bool(arguments.pop("budget", False))
        intent = arguments.pop("intent", None)
        try:
            shape: tuple[Any, ...] | None = tuple(sorted((k, type(v), v) for k, v in arguments.items()))
            hash(shape)
        except TypeError:  # an unhashable argument: this item is validated on its own
            shape = None
        try:
            known = shapes.get(shape) if shape is not None else None
            if known is None:
                known = _schedule_fields(now, **arguments)
                if shape is not None:
                    shapes[shape] = known
            fields = {**known, "intent": json_value(intent, name="intent")}
        except WakeError as exc:
            raise type(exc)(f"schedule_many item {position}: {exc}") from exc
        fields.setdefault("depth", depth)
        planned.append((fields, coalesce, budget))
    if not planned:
        return []
    using = db_alias()
    with tracing.creating(planned[0][0], count=len(planned)) as carrier:
        if carrier is not None:
            planned = [({**fields, "trace_context": carrier}, coalesce, budget) for fields, coalesce, budget in planned]
        return retry_rolled_back("creating wakes", lambda: _create_many(using, planned, now))


#: Rows per multi-row INSERT of :func:`schedule_many`.
BULK_CHUNK = 500


def _create_many(using: str, planned: list[tuple[dict[str, Any], bool, bool]], now: datetime) -> list[Wake]:
    manager = Wake.objects.db_manager(using)
    for _ in range(5):
        try:
            with transaction.atomic(using=using):
                return _insert_many(using, manager, planned, now)
        except IntegrityError:
            continue  # a concurrent creator took one of the keys: read it on the next try
    raise InvalidWake("could not create the wakes: their idempotency keys kept changing hands")


def _insert_many(
    using: str, manager: Any, planned: list[tuple[dict[str, Any], bool, bool]], now: datetime
) -> list[Wake]:
    results: list[Wake | None] = [None] * len(planned)
    keyed: dict[tuple[str, str], list[int]] = {}
    for position, (fields, coalesce, budget) in enumerate(planned):
        if fields.get("idempotency_key") is not None and not (coalesce or budget):
            keyed.setdefault((fields["workspace_id"], fields["idempotency_key"]), []).append(position)
    existing: dict[tuple[str, str], Wake] = {}
    by_workspace: dict[str, list[str]] = {}
    for workspace, key_name in keyed:
        by_workspace.setdefault(workspace, []).append(key_name)
    for workspace, idems in by_workspace.items():
        for start in range(0, len(idems), BULK_CHUNK):
            for wake in manager.filter(workspace_id=workspace, idempotency_key__in=idems[start : start + BULK_CHUNK]):
                existing[(wake.workspace_id, wake.idempotency_key)] = wake
    for workspace, session in {(f["workspace_id"], f["session_id"]) for f, _c, _b in planned if f.get("session_id")}:
        sessions.refuse_if_stopped(session, workspace_id=workspace)
    fresh: list[tuple[int, dict[str, Any]]] = []
    for position, (fields, coalesce, budget) in enumerate(planned):
        if coalesce or budget:
            results[position] = _create_wake(fields, coalesce=coalesce, budget=budget, now=now)
            continue
        idem = fields.get("idempotency_key")
        if idem is not None:
            holder = existing.get((fields["workspace_id"], idem))
            if holder is not None:
                results[position] = replayed(holder, fields)
                continue
            first = keyed[(fields["workspace_id"], idem)][0]
            if first != position:  # the same key earlier in this call: that wake, if for the same session
                refuse_other_session(planned[first][0].get("session_id"), fields)
                continue
        fresh.append((position, fields))
    created = insert_plain_many(using, [fields for _position, fields in fresh], now)
    for (position, _fields), wake in zip(fresh, created, strict=True):
        results[position] = wake
    for positions in keyed.values():
        for position in positions[1:]:
            results[position] = results[positions[0]]
    _announce_created(using, created)
    return [wake for wake in results if wake is not None]


def book_next(wake: Wake, now: datetime) -> Wake | None:
    """Insert a chain's next occurrence after ``wake`` settled; return it (``None``: the chain is over).

    Called inside the settle transaction (fired, dead, expired notice; not after ``Stop()``), so the
    settle and the booking commit together. :mod:`~django_wakes.schedules.recurrence` decides the slot (from
    the slot the firing stood for, never the wall clock); ``end_at`` is re-read here because
    :func:`~django_wakes.cancel` on a firing occurrence closes the chain by setting it, and
    ``paused_at`` because pausing the chain while this occurrence fired books the next one held
    (:mod:`~django_wakes.engine.schedules`; the settle holds this row's lock, so the read is current).
    """
    if not wake.is_recurring:
        return None
    if sessions.is_stopped(wake.session_id, workspace_id=wake.workspace_id):
        session = f"{wake.workspace_id}/{wake.session_id}"
        logger.info("chain %s ends: session %s is stopped", wake.chain_id, session, extra=about(wake))
        return None
    row = Wake.objects.using(db_alias()).filter(pk=wake.pk).values("end_at", "paused_at").first()
    end_at = row["end_at"] if row is not None else wake.end_at
    paused_at = row["paused_at"] if row is not None else wake.paused_at
    upcoming = recurrence.next_slot(wake, now, end_at)
    if upcoming is None:
        logger.info(
            "chain %s ended after occurrence %d (wake %s)", wake.chain_id, wake.occurrence, wake.pk, extra=about(wake)
        )
        return None
    return book_occurrence(wake, upcoming, end_at, paused_at=paused_at)


def book_occurrence(wake: Wake, slot: datetime, end_at: datetime | None, *, paused_at: datetime | None = None) -> Wake:
    """Insert the occurrence of ``wake``'s chain at ``slot`` (or return the row an earlier booking made).

    The row carries the idempotency key :func:`~django_wakes.schedules.recurrence.chain_key`, so booking one
    slot twice (a replayed settle, two runners) yields one row.
    """
    return create_wake(
        recurrence.occurrence_fields(wake, slot, end_at, paused_at=paused_at), follows=wake.trace_context or {}
    )
