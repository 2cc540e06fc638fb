"""Creating wakes: ``schedule``, ``watch``, ``request_approval``, and booking a chain's next occurrence.

Every insert of a wake goes through :func:`create_wake`, whose dedup paths (idempotency key,
coalescing slot, a chain's slot key) all end at a unique index: concurrent creators cannot both win.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models.sql import InsertQuery

from .. import clock, events, signals, tracing
from ..conf import wakes_settings
from ..durations import Duration, parse_duration
from ..exceptions import IdempotencyConflict, InvalidWake, UnknownKind, WakeError
from ..logs import about
from ..models import DEFAULT_QUEUE, KEY_LENGTH, QUEUE_NAME_LENGTH, State, TriggerType, Wake, WatchedKey
from ..schedules import recurrence
from ..sinks import SESSION_TURN, registry
from ..timeutil import to_datetime
from ..validation import json_value, key, positive_int, priority_value, prompt_text
from . import notify, retention, sessions
from .shared import after, announce_due, db_alias, earliest, firing_wake, hash_token, logger, retry_rolled_back

KIND_MAX_LENGTH: int = Wake._meta.get_field("kind").max_length or 100


@dataclass(frozen=True)
class ApprovalRequest:
    """What :func:`request_approval` returns: the wake and the one-time token (shown only here).

    ``repr()`` and ``str()`` hide the token (``token=<hidden>``): a request logged with ``%r``, put
    in an f-string or shown among a traceback's locals names its wake, never the token. Read
    ``.token`` to build the link you send.
    """

    wake: Wake
    token: str

    def __repr__(self) -> str:  # kept by @dataclass, which writes no __repr__ over one the class defines
        return f"{type(self).__name__}(wake={self.wake!r}, token=<hidden>)"


def _expiry(now: datetime, expires_in: Duration | None, expires_at: Any) -> datetime | None:
    """``expires_at`` beats ``expires_in``; an expiry in the past is refused."""
    if expires_at is not None:
        moment = to_datetime(expires_at, name="expires_at")
    elif expires_in is not None:
        moment = after(now, parse_duration(expires_in, name="expires_in", allow_zero=False), name="expires_in")
    else:
        return None
    if moment <= now:
        raise InvalidWake(f"expires_at {moment.isoformat()} is not in the future")
    return moment


def _check_kind(value: Any, session_id: str | None) -> str:
    kind = key(value, name="kind", max_length=KIND_MAX_LENGTH)
    if registry.get(kind) is None:
        hint = " (set WAKES['SPAWN_TURN'] to enable it)" if kind == SESSION_TURN else ""
        raise UnknownKind(f"no sink is registered for kind {kind!r}{hint}")
    if kind == SESSION_TURN and session_id is None:
        raise InvalidWake("kind 'session_turn' needs a session_id to hand the turn to")
    return kind


def _common(
    *,
    workspace_id: Any,
    session_id: Any,
    kind: Any,
    serial_key: Any,
    intent: Any,
    idempotency_key: Any,
    max_attempts: Any = None,
    priority: Any = 0,
    queue_name: Any = DEFAULT_QUEUE,
) -> dict[str, Any]:
    """The validated fields every kind of wake has (``max_attempts`` only when given)."""
    workspace = key(workspace_id, name="workspace_id")
    session = key(session_id, name="session_id", required=False)
    checked_kind = _check_kind(kind, session)
    lane = key(serial_key, name="serial_key", required=False)
    if lane is None and checked_kind == SESSION_TURN and session is not None:
        lane = session_lane(session, workspace_id=workspace)  # one session never runs two turns at once
    fields = {
        "workspace_id": workspace,
        "session_id": session,
        "kind": checked_kind,
        "serial_key": lane,
        "intent": json_value(intent, name="intent"),
        "idempotency_key": key(idempotency_key, name="idempotency_key", required=False),
        "priority": priority_value(priority),
        "queue_name": key(queue_name, name="queue_name", max_length=QUEUE_NAME_LENGTH),
    }
    if max_attempts is not None:
        fields["max_attempts"] = positive_int(max_attempts, name="max_attempts")
    return fields


def session_lane(session_id: str, *, workspace_id: str) -> str:
    """The lane a session's turns share unless the caller names another: ``session:<workspace>:<session>``.

    Lanes are global, so the workspace is part of the name (two tenants' session ``s`` never wait for
    each other's turns). When the workspace holds a colon (where the name would be ambiguous) or the
    name is too long for a key, it is ``session:<SHA-256 of both>``, so two sessions never share a lane.
    """
    lane = f"session:{workspace_id}:{session_id}"
    if ":" in workspace_id or len(lane) > KEY_LENGTH:
        lane = "session:" + hashlib.sha256(json.dumps([workspace_id, session_id]).encode()).hexdigest()
    return lane


def create_wake(
    fields: dict[str, Any],
    *,
    coalesce: bool = False,
    budget: bool = False,
    now: datetime | None = None,
    follows: Mapping[str, Any] | None = None,
) -> Wake:
    """Insert a wake built from validated ``fields``; idempotent and coalescing creates return the holder.

    Both dedup paths end at a unique index, so concurrent creators cannot both win: the loser's
    INSERT fails inside a savepoint and it reads the winner's row instead. A wake for a stopped
    session is refused; with ``budget`` (made for an agent) the budgets are enforced under the
    session's lock. A wake created while a sink runs is one deeper than the wake it fires for.

    While tracing, the insert is a ``wakes.create`` span whose context the wake keeps (``follows``:
    a chain's previous occurrence's, linked from a new trace; :mod:`django_wakes.tracing`).
    """
    if "depth" not in fields:
        parent = firing_wake.get()
        fields = {**fields, "depth": parent.depth + 1 if parent is not None else 0}
    # A deadlock between creators locking one session's row (MySQL) is retried, unless the
    # caller's own transaction surrounds this one (then it is the caller's to retry).
    # ``now``: the caller's "now" (its delays count from it), so a budget's minimum delay is exact.
    asked = now
    with tracing.creating(fields, follows=follows) as carrier:
        if carrier is not None:
            fields = {**fields, "trace_context": carrier}
        wake = retry_rolled_back(
            "creating a wake", lambda: _create_wake(fields, coalesce=coalesce, budget=budget, now=asked or clock.now())
        )
        tracing.created(wake)
    return wake


def _create_wake(fields: dict[str, Any], *, coalesce: bool, budget: bool, now: datetime) -> Wake:
    using = db_alias()
    workspace, idem = fields["workspace_id"], fields.get("idempotency_key")
    slot = f"{fields['kind']}|{fields['serial_key']}" if coalesce else None
    if coalesce and fields.get("serial_key") is None:
        raise InvalidWake("coalesce=True needs a serial_key (the lane to coalesce on)")
    if idem is None and slot is None and not budget and fields.get("session_id") is None:
        # Nothing to read first and no unique key to collide on: one INSERT, and on PostgreSQL its
        # NOTIFY rides in the same statement (:func:`_insert_plain`).
        return _insert_plain(using, fields, now)
    manager = Wake.objects.db_manager(using)
    for _ in range(5):
        with transaction.atomic(using=using):
            if idem is not None:
                existing = manager.filter(workspace_id=workspace, idempotency_key=idem).first()
                if existing is not None:
                    return replayed(existing, fields)
            if slot is not None:
                holder = (
                    manager.pending()
                    .filter(kind=fields["kind"], serial_key=fields["serial_key"])
                    .order_by("due_at", "id")
                    .first()
                )
                if holder is not None:
                    return holder
            if budget:
                sessions.enforce_budget(using, fields, now)
            else:
                sessions.refuse_if_stopped(fields.get("session_id"), workspace_id=fields["workspace_id"])
            wake = Wake(
                **{"max_attempts": wakes_settings.max_attempts, **fields},
                coalesce_key=slot,
                created_at=now,
                updated_at=now,
            )
            try:
                if idem is None and slot is None:  # no unique key to collide on: no savepoint to pay for
                    wake.save(using=using, force_insert=True)
                else:
                    with transaction.atomic(using=using):
                        wake.save(using=using, force_insert=True)
            except IntegrityError:
                if idem is not None:
                    existing = manager.filter(workspace_id=workspace, idempotency_key=idem).first()
                    if existing is not None:
                        return replayed(existing, fields)
                if slot is not None:
                    existing = manager.filter(coalesce_key=slot).first()
                    if existing is not None:
                        return existing
                continue  # the holder left pending between our INSERT and our read: try again
            if budget:
                sessions.budget_spent(using, fields, now)
            _announce_created(using, [wake])
            return wake
    raise InvalidWake("could not create the wake: its idempotency/coalesce slot kept changing hands")


def _insert_plain(using: str, fields: dict[str, Any], now: datetime) -> Wake:
    """Insert a wake that cannot collide with another (no idempotency key, coalescing slot, budget or
    session): one statement, the caller's transaction or its own (autocommit), no savepoint, no read.

    On PostgreSQL the push hint goes out in the same statement, ``WITH w AS (INSERT … RETURNING id)
    SELECT id, pg_notify(…) FROM w``: delivered when the wake commits, never for a rolled-back
    create, and no second round trip; like ``bulk_create`` (what :func:`schedule_many` uses), that
    path sends no ``pre_save``/``post_save`` signals of the model. ``wake_created`` goes out on commit.
    """
    wake = Wake(**{"max_attempts": wakes_settings.max_attempts, **fields}, created_at=now, updated_at=now)
    connection = connections[using]
    due = wake.due_at
    hint = notify.notify_connection(due, using) if connection.vendor == "postgresql" and due is not None else None
    if hint is None or due is None:
        wake.save(using=using, force_insert=True)
        _announce_created(using, [wake], notified=False)
        return wake
    sql, fields_in_order = _insert_and_notify(using, wake)
    params = [field.get_db_prep_save(field.pre_save(wake, True), connection) for field in fields_in_order]
    params.append(notify.payload(due))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        (row,) = cursor.fetchall()
    wake.pk = row[0]
    wake._state.adding = False
    wake._state.db = using
    setattr(wake, notify.NOTIFIED, True)
    _announce_created(using, [wake], notified=True)
    return wake


_insert_statements: dict[str, tuple[str, list[Any]]] = {}


def _insert_and_notify(using: str, wake: Wake) -> tuple[str, list[Any]]:
    """The statement of :func:`_insert_plain` on PostgreSQL and the fields its parameters are, in order.

    Compiled once per database by the ORM's own INSERT compiler (every field, the primary key
    returned); each create only computes its values, as the compiler would
    (``field.get_db_prep_save(field.pre_save(...))``). The channel is a constant in the text, so the
    statement has one parameter per column plus the payload (and psycopg caches its parsing).
    """
    found = _insert_statements.get(using)
    if found is None:
        meta = Wake._meta
        fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
        query = InsertQuery(Wake)
        query.insert_values(fields, [wake])
        compiler = query.get_compiler(using=using)
        compiler.returning_fields = [meta.pk]
        ((insert_sql, _params),) = compiler.as_sql()
        assert notify.CHANNEL.isidentifier()  # a constant, safe as a literal
        # Only the ORM's compiled SQL and the constant channel name are interpolated; values are parameters.
        sql = f"WITH w AS ({insert_sql}) SELECT w.id, pg_notify('{notify.CHANNEL}', %s) FROM w"  # noqa: S608
        found = _insert_statements[using] = (sql, fields)
    return found


def replayed(existing: Wake, fields: Mapping[str, Any]) -> Wake:
    """Return the wake an idempotency key found, if it is the caller's to have back; raise otherwise.

    Keys are per workspace, and within one the wake must be the same session's (or, both without a
    session, host code's): another session reusing a key, by accident or by crafting it, gets
    :class:`~django_wakes.exceptions.IdempotencyConflict`, never that session's wake.
    """
    refuse_other_session(existing.session_id, fields)
    return existing


def refuse_other_session(session_id: str | None, fields: Mapping[str, Any]) -> None:
    """Raise :class:`~django_wakes.exceptions.IdempotencyConflict` unless ``session_id`` is the caller's."""
    if session_id != fields.get("session_id"):
        raise IdempotencyConflict(
            f"idempotency_key {fields.get('idempotency_key')!r:.80} already names a wake of another session "
            "(or of none) in this workspace: it is not this caller's to replay"
        )


def _announce_created(using: str, wakes: list[Wake], *, notified: bool | None = None) -> None:
    """Inside the creating transaction: one NOTIFY for the earliest due (delivered at commit), and
    ``wake_created`` for each wake on commit (which nudges this process's runners)."""
    due = [wake.due_at for wake in wakes if wake.due_at is not None]
    if notified is None and due and notify.notify_in_transaction(min(due), using):
        for wake in wakes:
            setattr(wake, notify.NOTIFIED, True)
    for wake in wakes:
        transaction.on_commit(partial(signals.wake_created.send, sender=Wake, wake=wake), using=using)


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
) -> Wake:
    """Create a time-triggered wake: exactly one of ``delay``, ``at``, ``cron`` or ``every``.

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
            fields["fire_at"] = to_datetime(at, name="at")
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
        try:
            fields = _schedule_fields(now, **arguments)
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
    fresh: list[tuple[int, Wake]] = []
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
        wake = Wake(
            **{"max_attempts": wakes_settings.max_attempts, **fields}, coalesce_key=None, created_at=now, updated_at=now
        )
        fresh.append((position, wake))
    created = manager.bulk_create([wake for _position, wake in fresh], batch_size=BULK_CHUNK)
    for (position, _wake), wake in zip(fresh, created, strict=True):
        results[position] = wake
    for positions in keyed.values():
        for position in positions[1:]:
            results[position] = results[positions[0]]
    _announce_created(using, [wake for _position, wake in fresh])
    return [wake for wake in results if wake is not None]


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
) -> ApprovalRequest:
    """Create a wake that fires when a human answers; return it with its one-time token.

    Only the token's hash is stored, so the token exists only in this return value. A retried
    create with the same ``idempotency_key`` (the same session, prompt and intent) returns the
    existing wake with a fresh token that is then the valid one (the old one cannot be recovered
    from the hash); once answered, its token is not renewed. A key naming anything else (another
    session's wake, a wake that is no approval, an approval asking another prompt or carrying
    another intent) raises :class:`~django_wakes.exceptions.IdempotencyConflict` and rotates
    nothing. ``on_expiry``: the answer
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
    if wake.token_hash != fields["token_hash"]:
        # An idempotent replay (create_wake checked the session): rotate the token on the existing,
        # still-unanswered approval, if it is this very request.
        if wake.trigger_type != TriggerType.ON_APPROVAL or wake.prompt != prompt or wake.intent != fields["intent"]:
            raise IdempotencyConflict(
                f"idempotency_key {idempotency_key!r:.80} already names another request in this workspace "
                "(not an approval, or another prompt or intent): its token is not renewed"
            )
        rotated = (
            Wake.objects.using(db_alias())
            .filter(pk=wake.pk, session_id=wake.session_id, state=State.PENDING, fire_at__isnull=True)
            .update(token_hash=fields["token_hash"], updated_at=now)
        )
        if rotated:
            wake.token_hash = fields["token_hash"]
    return ApprovalRequest(wake=wake, token=token)


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
