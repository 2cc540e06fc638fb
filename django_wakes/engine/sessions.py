"""Sessions: stop and resume them durably, nudge them when they go idle, and budget what agents create.

A session is ``(workspace_id, session_id)``: tenants may pick the same session ids, so every call here
names both, and one tenant's stop, budget, cooldown or nudge never reaches another's session.

A stopped session's pending wakes are superseded in one statement; new wakes for it are refused; a
wake of it that comes due anyway (claimed before the stop) is superseded when its sink would start;
a firing one finishes, but its chain books no successor. Budgets (``WAKES["BUDGETS"]``) limit what
is created on an agent's behalf (``budget=True``): the session's :class:`SessionControl` row (and the
workspace's lock row) is locked first, so N processes creating for one session never end above a cap.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from .. import clock
from ..conf import wakes_settings
from ..durations import parse_duration, plain_duration
from ..exceptions import BudgetExceeded, SessionStopped
from ..models import LIVE_STATES, SessionControl, State, Wake, WorkspaceLock
from ..sinks import SESSION_TURN
from ..validation import key
from . import chain_budget
from .shared import announce_due, db_alias, lock_or_create, logger


def _lock_session(using: str, workspace_id: str, session_id: str, now: datetime) -> SessionControl:
    rows = SessionControl.objects.using(using).all()
    return lock_or_create(rows, {"workspace_id": workspace_id, "session_id": session_id}, {"updated_at": now})


def _session(session_id: Any, workspace_id: Any) -> tuple[str, str]:
    return key(workspace_id, name="workspace_id"), key(session_id, name="session_id")


def stop_session(session_id: str, reason: str = "", *, workspace_id: str) -> int:
    """Stop a session durably: supersede its pending wakes; return how many were superseded."""
    workspace, session = _session(session_id, workspace_id)
    if not isinstance(reason, str) or len(reason) > 2000 or "\x00" in reason:
        raise SessionStopped("reason must be a string of at most 2,000 characters without NUL")
    now = clock.now()
    using = db_alias()
    with transaction.atomic(using=using):
        control = _lock_session(using, workspace, session, now)
        control.stopped_at, control.stop_reason, control.updated_at = now, reason, now
        control.save(using=using, update_fields=["stopped_at", "stop_reason", "updated_at"])
        superseded = (
            Wake.objects.using(using)
            .filter(workspace_id=workspace, session_id=session, state=State.PENDING)
            .update(
                state=State.SUPERSEDED,
                last_error=f"session stopped: {reason}" if reason else "session stopped",
                coalesce_key=None,
                due_at=None,
                settled_at=now,
                updated_at=now,
            )
        )
    logger.info(
        "session %s/%s stopped (%s): %d pending wake(s) superseded",
        workspace,
        session,
        reason or "no reason",
        superseded,
    )
    return superseded


def resume_session(session_id: str, *, workspace_id: str) -> bool:
    """Let a stopped session take new wakes again; return whether it was stopped."""
    workspace, session = _session(session_id, workspace_id)
    return bool(
        SessionControl.objects.using(db_alias())
        .filter(workspace_id=workspace, session_id=session, stopped_at__isnull=False)
        .update(stopped_at=None, stop_reason="", updated_at=clock.now())
    )


def is_stopped(session_id: str | None, *, workspace_id: str) -> bool:
    """Whether the workspace's session ``session_id`` is stopped (``False`` for no session)."""
    if session_id is None:
        return False
    rows = SessionControl.objects.using(db_alias())
    return rows.filter(workspace_id=workspace_id, session_id=session_id, stopped_at__isnull=False).exists()


def _stopped(session_id: str | None, workspace_id: str) -> SessionStopped:
    return SessionStopped(f"session {session_id!r} of workspace {workspace_id!r} is stopped; resume_session() it first")


def refuse_if_stopped(session_id: str | None, *, workspace_id: str) -> None:
    if is_stopped(session_id, workspace_id=workspace_id):
        raise _stopped(session_id, workspace_id)


def nudge_session(session_id: str, *, workspace_id: str) -> int:
    """The host's "turn finished" signal: its session_turn wakes that waited for it become due now.

    Return how many. A runner's push path picks them up at once (on commit).
    """
    workspace, session = _session(session_id, workspace_id)
    now = clock.now()
    using = db_alias()
    nudged = (
        Wake.objects.using(using)
        .filter(
            workspace_id=workspace,
            session_id=session,
            kind=SESSION_TURN,
            state=State.PENDING,
            fire_at__lte=now,
            due_at__gt=now,
        )
        .update(due_at=now, updated_at=now)
    )
    if nudged:
        announce_due(using, now)
    return nudged


def _limit(name: str) -> Any:
    return wakes_settings.budgets.get(name)


def _duration_limit(name: str) -> timedelta | None:
    value = _limit(name)
    return None if value is None else parse_duration(value, name=f"WAKES['BUDGETS'][{name!r}]")


def enforce_budget(using: str, fields: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Refuse a wake made for an agent that would go over a budget; lock what the counts depend on.

    Runs inside the create transaction, before the insert; the locks are held until it commits.
    Return the fields to insert: a new recurring chain's are fitted to the budgets for every
    occurrence (:func:`~django_wakes.engine.chain_budget.fit_chain`: its first occurrence moved to
    at least the minimum delay ahead, its end at the horizon).
    """
    session, workspace = fields.get("session_id"), fields["workspace_id"]
    depth_cap = _limit("CHAIN_MAX_DEPTH")
    if depth_cap is not None and fields.get("depth", 0) > depth_cap:
        raise BudgetExceeded("chain_max_depth", f"this wake would be {fields['depth']} deep; at most {depth_cap}")
    soonest, latest = _duration_limit("SESSION_MIN_DELAY"), _duration_limit("SESSION_MAX_HORIZON")
    cooldown = _duration_limit("SESSION_COOLDOWN")
    fields = chain_budget.fit_chain(fields, now, soonest=soonest, latest=latest, cooldown=cooldown)
    fire_at = fields.get("fire_at")
    if fire_at is not None:
        if soonest is not None and fire_at - now < soonest:
            raise BudgetExceeded("session_min_delay", f"a wake must fire at least {plain_duration(soonest)} from now")
        if latest is not None and fire_at - now > latest:
            raise BudgetExceeded("session_max_horizon", f"a wake must fire within {plain_duration(latest)} from now")
    if session is not None:
        control = _lock_session(using, workspace, session, now)
        if control.stopped_at is not None:
            raise _stopped(session, workspace)
        if cooldown is not None and control.last_agent_wake_at and now - control.last_agent_wake_at < cooldown:
            since = plain_duration(cooldown)
            raise BudgetExceeded("session_cooldown", f"this session made a wake less than {since} ago")
        cap = _limit("SESSION_MAX_LIVE")
        if cap is not None:
            mine = Wake.objects.using(using).filter(workspace_id=workspace, session_id=session)
            live = mine.filter(state__in=LIVE_STATES).count()
            if live >= cap:
                raise BudgetExceeded("session_max_live", f"this session has {live} live wakes; at most {cap}")
    workspace_cap = _limit("WORKSPACE_MAX_LIVE")
    if workspace_cap is not None:
        lock_or_create(WorkspaceLock.objects.using(using).all(), {"workspace_id": workspace})
        live = Wake.objects.using(using).filter(workspace_id=workspace, state__in=LIVE_STATES).count()
        if live >= workspace_cap:
            raise BudgetExceeded("workspace_max_live", f"this workspace has {live} live wakes; at most {workspace_cap}")
    return fields


def budget_spent(using: str, fields: dict[str, Any], now: datetime) -> None:
    """Note an agent-made wake for the session's cooldown (same transaction as its insert)."""
    session = fields.get("session_id")
    if session is not None:
        mine = SessionControl.objects.using(using).filter(workspace_id=fields["workspace_id"], session_id=session)
        mine.update(last_agent_wake_at=now, updated_at=now)
