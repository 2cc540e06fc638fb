"""What a model is told about a wake: the one summary every tool result uses, and the turn a wake starts.

:func:`describe_wake` is the shape of every create result and ``list_wakes`` entry;
:func:`turn_context` is what the host's ``SPAWN_TURN`` hook tells the model when a wake fires.
Never the intent beyond its note, never a token. Models are imported when called, not at import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..models import Wake

__all__ = ["ON_TIMEOUT", "PROMPT_PREVIEW", "SESSION_TURN", "describe_wake", "firing_turn_wake", "iso", "turn_context"]

#: How much of an approval's prompt a wake summary repeats.
PROMPT_PREVIEW = 200

SESSION_TURN = "session_turn"  # sinks.SESSION_TURN, without importing the sink registry here

#: ``request_approval(on_timeout=...)`` -> the engine's ``on_expiry`` (``None``: the sink is told it expired).
ON_TIMEOUT: dict[str, dict[str, bool] | None] = {
    "notify": None,
    "reject": {"approved": False},
    "approve": {"approved": True},
}


def iso(moment: datetime | None) -> str | None:
    """``moment`` in UTC as RFC 3339 text (``2030-01-04T00:00:00+00:00``), or ``None``."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


def describe_wake(wake: Wake) -> dict[str, Any]:
    """Return the model-facing summary of ``wake``: the shape every tool result and ``list_wakes`` entry uses.

    Always ``wake_id``, ``state``, ``trigger`` (``at``, ``on_event`` or ``on_approval``), ``fire_at``
    and ``expires_at`` (RFC 3339 with offset, or ``null``) and ``note`` (or ``null``); then ``cron`` and
    ``tz`` (or ``every``) for a recurring follow-up, ``event_key`` for a watch, ``prompt`` (its first
    200 characters) and ``on_timeout`` for an approval. Never the intent beyond its note, never a token.
    """
    intent = wake.intent if isinstance(wake.intent, dict) else {}
    note = intent.get("note")
    summary: dict[str, Any] = {
        "wake_id": wake.pk,
        "state": str(wake.state),
        "trigger": str(wake.trigger_type),
        "fire_at": iso(wake.fire_at),
        "expires_at": iso(wake.expires_at),
        "note": note if isinstance(note, str) else None,
    }
    if wake.cron:
        summary.update(cron=wake.cron, tz=wake.tz or "UTC")
    elif wake.every is not None:
        summary["every"] = f"{int(wake.every.total_seconds())}s"
    if wake.trigger_type == "on_event":
        summary["event_key"] = wake.event_key
    elif wake.trigger_type == "on_approval":
        prompt = wake.prompt
        summary["prompt"] = prompt if len(prompt) <= PROMPT_PREVIEW else prompt[: PROMPT_PREVIEW - 3] + "..."
        timeout = {json.dumps(v, sort_keys=True): k for k, v in ON_TIMEOUT.items()}
        summary["on_timeout"] = timeout.get(json.dumps(wake.on_expiry, sort_keys=True), "custom")
    return summary


def firing_turn_wake(session_id: str, *, workspace_id: str) -> Wake | None:
    """Return the ``session_turn`` wake of the workspace's session that is firing now, if exactly one is.

    Call it from the ``SPAWN_TURN`` hook (handed the session, the trigger's result and, when it takes
    it, the workspace) to learn which wake it runs for. Inside the hook this is the wake being fired (the engine keeps
    it in a context variable); elsewhere, a session's turns share a lane by default, so at most one of
    them fires at a time; ``None`` when none is firing, or when several are (wakes given a lane of
    their own by their creator).
    """
    from ..engine import db_alias
    from ..engine.shared import firing_wake
    from ..models import State, Wake

    current = firing_wake.get()
    if (
        current is not None
        and (current.workspace_id, current.session_id) == (workspace_id, session_id)
        and current.kind == SESSION_TURN
    ):
        return current

    rows = list(
        Wake.objects.using(db_alias())
        .filter(workspace_id=workspace_id, session_id=session_id, kind=SESSION_TURN, state=State.FIRING)
        .order_by("-claimed_at")[:2]
    )
    return rows[0] if len(rows) == 1 else None


def turn_context(session_id: str, result: Mapping[str, Any], *, workspace_id: str) -> dict[str, Any]:
    """Return what to tell the model in the turn ``SPAWN_TURN(session_id, result, workspace_id=...)`` starts.

    ``{"wake": <describe_wake of the firing wake, with its note> or None, "result": result}``:
    ``result`` is what the trigger delivered (``{"trigger": "at"}``, an event's ``payload``, an
    approval's ``answer``, or ``"expired": true``).
    """
    wake = firing_turn_wake(session_id, workspace_id=workspace_id)
    return {"wake": describe_wake(wake) if wake is not None else None, "result": dict(result)}
