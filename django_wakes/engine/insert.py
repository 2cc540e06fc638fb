"""Inserting a wake: the fields every wake has, validated, and :func:`create_wake`, every insert's one door.

Every insert of a wake goes through :func:`create_wake`, whose dedup paths (idempotency key,
coalescing slot, a chain's slot key) all end at a unique index: concurrent creators cannot both win.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models.sql import InsertQuery

from .. import clock, signals, tracing
from ..conf import wakes_settings
from ..durations import Duration, parse_duration
from ..exceptions import IdempotencyConflict, InvalidWake, UnknownKind
from ..models import DEFAULT_QUEUE, KEY_LENGTH, QUEUE_NAME_LENGTH, Wake
from ..sinks import SESSION_TURN, registry
from ..timeutil import to_datetime
from ..validation import json_value, key, positive_int, priority_value
from . import limit_rules, notify, sessions
from .shared import after, db_alias, firing_wake, retry_rolled_back

KIND_MAX_LENGTH: int = Wake._meta.get_field("kind").max_length or 100


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
        raise UnknownKind(f"no sink is registered for kind {kind!r}{registry.why_missing(kind)}")
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
    limit_key: Any = None,
) -> dict[str, Any]:
    """The validated fields every kind of wake has (``max_attempts`` and ``limit_key`` only when given)."""
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
    if limit_key is not None:
        fields["limit_key"] = limit_rules.limit_key(limit_key)
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
                fields = sessions.enforce_budget(using, fields, now)
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
    sent = notified is None and bool(due) and notify.notify_in_transaction(min(due), using)
    # Several wakes: the earliest decided. Sent, it covers them all; not sent (another database, or
    # beyond the polling horizon), no later one needs a NOTIFY either. On commit only the nudge is left.
    if sent or (notified is None and len(wakes) > 1):
        for wake in wakes:
            setattr(wake, notify.NOTIFIED, True)
    if len(wakes) == 1:
        transaction.on_commit(partial(signals.wake_created.send, sender=Wake, wake=wakes[0]), using=using)
    elif wakes:  # one callback for a bulk insert, not one per wake: the same signals, in the same order
        transaction.on_commit(partial(_send_created, wakes), using=using)


def _send_created(wakes: list[Wake]) -> None:
    for wake in wakes:
        signals.wake_created.send(sender=Wake, wake=wake)
