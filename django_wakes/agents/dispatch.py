"""Run a model's tool call for its session: :func:`dispatch`, and :func:`adispatch` for async hosts.

Every wake a tool creates is of kind ``session_turn`` with the session set, so when it fires the
host's ``WAKES["SPAWN_TURN"]`` hook hands the turn back to the session. Bad model input (unknown
tool, bad JSON, unknown fields, wrong types, values out of range, a request the engine refuses) is
never an exception: it is ``{"error": {"code": ..., "message": ...}}``, with a message that says
what to fix, and nothing is written. A misconfigured host (an empty ``workspace_id``, no
``SPAWN_TURN``) gets an exception.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import clock
from ..exceptions import BudgetExceeded, UnknownKind, WakeError
from ..text import control_character
from .arguments import ToolError, bad_text, check_arguments, duration, parse_arguments, shown
from .describe import ON_TIMEOUT, SESSION_TURN, describe_wake, iso
from .schemas import LIST_DEFAULT, SCHEMAS, TOOL_NAMES

if TYPE_CHECKING:  # pragma: no cover
    from ..models import Wake
    from ..querysets import WakeQuerySet

__all__ = [
    "AGENT_CALL_OPTIONS",
    "ENGINE_ERROR_CODES",
    "ERROR_CODES",
    "MODEL_MESSAGES",
    "ApprovalHook",
    "adispatch",
    "dispatch",
    "engine_error",
]

logger = logging.getLogger("django_wakes")

#: Keyword arguments merged into every ``schedule``/``watch``/``request_approval`` call a tool makes:
#: a model's wakes always count against ``WAKES["BUDGETS"]`` (host code is limited only when it asks).
AGENT_CALL_OPTIONS: dict[str, Any] = {"budget": True}

#: The host's hook for approval tokens: ``on_approval(wake, token)``, called by :func:`dispatch`.
ApprovalHook = Callable[["Wake", str], object]

#: Every error code :func:`dispatch` returns, and what it means for the model.
ERROR_CODES: dict[str, str] = {
    "unknown_tool": "there is no tool of that name",
    "invalid_json": "the arguments are not valid JSON",
    "invalid_arguments": "an argument is missing, unknown, of the wrong type, out of range or unusable",
    "too_soon": "the time is in the past, or sooner than this host lets a wake fire",
    "too_far": "the time is further ahead than this host lets a wake fire, or past the year 9999",
    "invalid_request": "the arguments are well formed but the request cannot be done as asked",
    "not_found": "no wake of this session has that id",
    "budget_exceeded": "this session may not create more wakes like this now",
    "session_stopped": "this session was stopped and takes no new wakes",
    "unavailable": "the host did not enable this tool",
}

#: How :func:`dispatch` reports a :class:`~django_wakes.exceptions.WakeError` the engine raised:
#: the first class of the exception's MRO named here decides (names, not classes, so an exception
#: class added later maps by its name, and its base class's code applies until it is named here).
#: A ``BudgetExceeded`` about *when* a wake fires is ``too_soon`` or ``too_far`` (:data:`BUDGET_TIME_CODES`).
ENGINE_ERROR_CODES: dict[str, str] = {
    "BudgetExceeded": "budget_exceeded",
    "SessionStopped": "session_stopped",
    "InvalidDuration": "invalid_arguments",
    "InvalidTime": "invalid_arguments",
    "InvalidIntent": "invalid_arguments",
    "InvalidSchedule": "invalid_arguments",
    "ApprovalNotFound": "not_found",
    "WakeError": "invalid_request",
}

#: ``BudgetExceeded.limit`` values that bound a wake's time, not how many wakes: an argument to change.
BUDGET_TIME_CODES: dict[str, str] = {"session_min_delay": "too_soon", "session_max_horizon": "too_far"}

#: What the model is told instead of the engine's message (which is written for the host).
MODEL_MESSAGES: dict[str, str] = {
    "session_stopped": "this conversation was stopped and takes no new wakes: do not retry",
}

_TIME_FIELDS = ("delay", "at", "cron")


@dataclass(frozen=True)
class _Call:
    """One tool call: who makes it, its validated arguments, and how its creates are keyed."""

    name: str
    workspace_id: str
    session_id: str
    tool_call_id: str | None
    raw: dict[str, Any]
    args: dict[str, Any]

    @property
    def idempotency_key(self) -> str | None:
        """``tool:<len>:<workspace>:<len>:<session>:<tool_call_id>``, or a SHA-256 when that is no storable key.

        Workspace and session are written with their lengths, so ids with colons in them can never
        make two calls one key (with ``tool:<session>:<id>``, session ``a:b`` + call ``c`` was session
        ``a`` + call ``b:c``, and one session got the other's wake). The hash is of the three as a
        JSON list, as unambiguous (also when the id holds a control character, which a key may not).
        The engine refuses a key naming another session's wake besides.
        """
        if self.tool_call_id is None:
            return None
        workspace, session = self.workspace_id, self.session_id
        readable = f"tool:{len(workspace)}:{workspace}:{len(session)}:{session}:{self.tool_call_id}"
        if len(readable) <= 200 and bad_text(readable) is None and control_character(readable) is None:
            return readable
        digest = hashlib.sha256(json.dumps([workspace, session, self.tool_call_id]).encode())
        return f"tool:sha256:{digest.hexdigest()}"

    @property
    def digest(self) -> str:
        """A fingerprint of the call (tool and arguments): a retry has the same, another call does not.

        Of the arguments given a value: ``{"delay": "3d", "at": null}`` is the call ``{"delay": "3d"}``.
        """
        given = {k: v for k, v in self.raw.items() if v is not None}
        text = json.dumps([self.name, given], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def intent(self) -> dict[str, Any]:
        intent: dict[str, Any] = {"tool": self.name}
        if "note" in self.args:
            intent["note"] = self.args["note"]
        if self.tool_call_id is not None:
            intent["call_digest"] = self.digest
        return intent

    def create(self, create: Callable[..., Any], **kwargs: Any) -> Any:
        """Call an engine create function for this session; refuse a tool_call_id reused for another call."""
        from ..exceptions import IdempotencyConflict

        reused = f"tool_call_id {self.tool_call_id!r} was already used for another call in session {self.session_id!r}"
        try:
            made = create(
                **{
                    "workspace_id": self.workspace_id,
                    "session_id": self.session_id,
                    "intent": self.intent(),
                    "idempotency_key": self.idempotency_key,
                    **kwargs,
                    **AGENT_CALL_OPTIONS,
                }
            )
        except IdempotencyConflict as exc:  # the engine returned and rotated nothing
            raise ValueError(f"{reused}: a tool_call_id must identify one call") from exc
        wake = getattr(made, "wake", made)
        stored = wake.intent.get("call_digest") if isinstance(wake.intent, dict) else None
        if self.tool_call_id is not None and stored != self.digest:
            raise ValueError(f"{reused} (wake {wake.pk}): a tool_call_id must identify one call")
        return made

    def own_wakes(self) -> WakeQuerySet:
        """This session's turn wakes: the only wakes its model may see or cancel."""
        from ..engine import db_alias
        from ..models import Wake

        return Wake.objects.using(db_alias()).filter(
            workspace_id=self.workspace_id, session_id=self.session_id, kind=SESSION_TURN
        )

    @property
    def time_field(self) -> str | None:
        """The argument that says when the wake fires (``delay``, ``at`` or ``cron``), if any."""
        return next((f for f in _TIME_FIELDS if f in self.args), None)


def _schedule_followup(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    args = call.args
    given = [f for f in _TIME_FIELDS if f in args]
    if len(given) != 1:
        got = " and ".join(given) if given else "none of them"
        raise ToolError("invalid_arguments", f"give exactly one of delay, at or cron (got {got})")
    if "tz" in args and "cron" not in args:
        raise ToolError(
            "invalid_arguments", "tz applies only to cron: for at, write the offset into the time itself", field="tz"
        )
    if "expires_in" in args and "cron" in args:
        raise ToolError(
            "invalid_arguments",
            "expires_in applies to a one-off follow-up (delay or at), not to cron",
            field="expires_in",
        )
    now = clock.now()
    kwargs: dict[str, Any] = {}
    fires: datetime | None = None
    if "delay" in args:
        delay = duration("delay", args["delay"])
        fires = _after(now, delay, "delay")
        kwargs["delay"] = delay
    elif "at" in args:
        fires = args["at"]
        if fires <= now:
            raise ToolError(
                "too_soon",
                f"at {iso(fires)} is not in the future: it is now {iso(now)}. Use a later time, or delay.",
                field="at",
            )
        kwargs["at"] = fires
    else:
        kwargs.update(cron=args["cron"], tz=args.get("tz", "UTC"))
    if "expires_in" in args:
        expires_in = duration("expires_in", args["expires_in"])
        assert fires is not None  # expires_in is refused with cron above
        if _after(now, expires_in, "expires_in") <= fires:
            raise ToolError(
                "invalid_arguments",
                f"expires_in {args['expires_in']!r} ends before the follow-up fires ({iso(fires)}): "
                "make it longer than the delay, or leave it out",
                field="expires_in",
            )
        kwargs["expires_in"] = expires_in
    return describe_wake(call.create(engine.schedule, **kwargs))


def _after(now: datetime, delta: Any, field: str) -> datetime:
    try:
        moment: datetime = now + delta
    except OverflowError:
        raise ToolError("too_far", f"{field} ends after the year 9999", field=field) from None
    return moment


def _watch_event(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    kwargs: dict[str, Any] = {"event_key": call.args["event_key"]}
    if "expires_in" in call.args:
        kwargs["expires_in"] = duration("expires_in", call.args["expires_in"])
        _after(clock.now(), kwargs["expires_in"], "expires_in")
    return describe_wake(call.create(engine.watch, **kwargs))


def _request_approval(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    if on_approval is None:
        logger.warning(
            "request_approval was called in session %s but there is no approval hook (dispatch(on_approval=...) "
            "or WAKES['ON_APPROVAL']): refused",
            call.session_id,
        )
        raise ToolError("unavailable", "request_approval is not available here: no one can be asked. Do not retry it.")
    args = call.args
    expires_in = duration("expires_in", args["expires_in"])
    _after(clock.now(), expires_in, "expires_in")
    request = call.create(
        engine.request_approval,
        prompt=args["prompt"],
        expires_in=expires_in,
        on_expiry=ON_TIMEOUT[args.get("on_timeout", "notify")],
    )
    wake: Wake = request.wake
    if request.token is not None:
        # A new approval: the host gets its one token, once. A replay (token None) rotates nothing and
        # calls no hook, so a model repeating the call can neither void the link a person holds nor
        # make the host send more links (a new one is the host's call: reissue_approval).
        on_approval(wake, request.token)
    return describe_wake(wake)


_NOT_CANCELLED = {
    "fired": "it already fired",
    "expired": "it already expired",
    "dead": "it failed and will not run again",
    "superseded": "its session was stopped, so it will not fire",
    "firing": "it is firing right now and cannot be stopped",
}


def _cancel_wake(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    wake_id: int = call.args["wake_id"]
    own = call.own_wakes()
    wake = own.filter(pk=wake_id).first()
    if wake is None:
        raise ToolError(
            "not_found",
            f"this conversation has no wake {wake_id}: use list_wakes to see its wake ids",
            field="wake_id",
        )
    if wake.is_recurring and wake.chain_id:
        # A recurring follow-up: each occurrence is its own row, so any id of the series stops it.
        series = own.filter(chain_id=wake.chain_id)
        for _ in range(5):  # again while cancelling succeeded: a successor may have been booked meanwhile
            live = list(series.filter(state__in=["pending", "firing"]).values_list("pk", flat=True))
            if not [pk for pk in live if engine.cancel(pk)]:
                break
        wake = series.order_by("-occurrence", "-id").first() or wake
        closed = wake.end_at is not None and wake.fire_at is not None and wake.end_at <= wake.fire_at
        if wake.state == "cancelled" or closed:
            result = {"cancelled": True, **describe_wake(wake)}
            if wake.state != "cancelled":
                result["detail"] = "no further occurrences will fire"
            return result
        return {"cancelled": False, **describe_wake(wake), "detail": "the series already ended"}
    engine.cancel(wake.pk)
    wake.refresh_from_db()
    if wake.state == "cancelled":
        return {"cancelled": True, **describe_wake(wake)}
    state = str(wake.state)
    return {"cancelled": False, **describe_wake(wake), "detail": _NOT_CANCELLED.get(state, f"it is {state}")}


def _list_wakes(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from django.db.models import F

    limit: int = call.args.get("limit", LIST_DEFAULT)
    rows = list(
        call.own_wakes()
        .filter(state__in=["pending", "firing"])
        .order_by(F("due_at").asc(nulls_last=True), "id")[: limit + 1]
    )
    return {
        "wakes": [describe_wake(w) for w in rows[:limit]],
        "more": len(rows) > limit,
        "now": iso(clock.now()),
    }


_HANDLERS: dict[str, Callable[[_Call, ApprovalHook | None], dict[str, Any]]] = {
    "schedule_followup": _schedule_followup,
    "watch_event": _watch_event,
    "request_approval": _request_approval,
    "cancel_wake": _cancel_wake,
    "list_wakes": _list_wakes,
}


def engine_error(exc: WakeError, properties: Iterable[str], *, time_field: str | None = None) -> ToolError:
    """The refusal a model gets for an engine exception: its code, the engine's message, the field at fault.

    The field is the argument the message starts with (``"cron: ..."``); for ``too_soon`` and
    ``too_far``, the argument that set the time (``time_field``).
    """
    code = "invalid_request"
    for cls in type(exc).__mro__:
        if cls.__name__ in ENGINE_ERROR_CODES:
            code = ENGINE_ERROR_CODES[cls.__name__]
            break
    if isinstance(exc, BudgetExceeded) and exc.limit in BUDGET_TIME_CODES:
        code = BUDGET_TIME_CODES[exc.limit]
        return ToolError(code, f"{exc}: choose another time", field=time_field)
    message = str(exc)
    prefix = message.split(":", 1)[0].split(" ", 1)[0]
    return ToolError(code, MODEL_MESSAGES.get(code, message), field=prefix if prefix in properties else None)


def dispatch(
    name: str,
    arguments: Any,
    *,
    workspace_id: str,
    session_id: str,
    tool_call_id: str | None = None,
    on_approval: ApprovalHook | None = None,
) -> dict[str, Any]:
    """Run the tool call ``name(arguments)`` for a session; return the model-facing result.

    ``arguments``: a dict, or the JSON text a model emits (``None`` or ``""``: no arguments); an
    argument that is ``null`` counts as left out (strict modes send ``null`` for what the model
    leaves out). The result is JSON-able and goes to the model as it is: a tool's result, or
    ``{"error": {"code", "message"[, "field"]}}`` (codes in :data:`ERROR_CODES`) for bad model
    input, in which case nothing was written.

    ``tool_call_id`` (the API's id for this call) makes creates idempotent: a host that retries the
    call gets the same wake and the same result, never a second wake. ``on_approval(wake, token)``
    (default: ``WAKES["ON_APPROVAL"]``) receives the one-time token of an approval
    ``request_approval`` creates (once per approval: a retried call with the same ``tool_call_id`` gets
    the same result and calls no hook) for the host to deliver to a human; the token never appears in the
    result. Without a hook, ``request_approval`` answers ``unavailable``.

    Raise (host errors, not model input): ``ValueError`` for an unusable ``workspace_id``,
    ``session_id`` or ``tool_call_id``, or a ``tool_call_id`` reused for a different call;
    ``ImproperlyConfigured`` when ``WAKES["SPAWN_TURN"]`` is not set; whatever ``on_approval`` or
    the database raises.
    """
    from django.core.exceptions import ImproperlyConfigured

    from ..conf import wakes_settings
    from ..validation import key

    workspace = key(workspace_id, name="workspace_id")
    session = key(session_id, name="session_id")
    if tool_call_id is not None and (not isinstance(tool_call_id, str) or not tool_call_id):
        raise ValueError(f"tool_call_id must be a non-empty string or None, got {tool_call_id!r:.60}")
    if on_approval is None:
        on_approval = wakes_settings.on_approval
    elif not callable(on_approval):
        raise TypeError("on_approval must be a callable taking (wake, token)")
    try:
        handler = _HANDLERS.get(name) if isinstance(name, str) else None
        if handler is None:
            raise ToolError("unknown_tool", f"there is no tool {shown(name)}; the tools are {', '.join(TOOL_NAMES)}")
        raw = parse_arguments(arguments)
        args = check_arguments(name, SCHEMAS[name], raw)
        call = _Call(name, workspace, session, tool_call_id, raw, args)
        try:
            return handler(call, on_approval)
        except UnknownKind as exc:
            raise ImproperlyConfigured(f"django_wakes.agents.tools needs WAKES['SPAWN_TURN']: {exc}") from exc
        except WakeError as exc:
            raise engine_error(exc, SCHEMAS[name]["properties"], time_field=call.time_field) from exc
    except ToolError as refusal:
        return refusal.as_result()


_dispatch_in_thread = sync_to_async(dispatch, thread_sensitive=True)


async def adispatch(
    name: str,
    arguments: Any,
    *,
    workspace_id: str,
    session_id: str,
    tool_call_id: str | None = None,
    on_approval: ApprovalHook | None = None,
) -> dict[str, Any]:
    """:func:`dispatch` for async hosts (an ASGI view, an asyncio agent loop): the same call, transactions, result.

    Runs ``dispatch`` through ``sync_to_async(thread_sensitive=True)``, as Django's own ``a*``
    methods do: in the one thread Django's sync code shares, on that thread's connection, so a
    transaction never spans an ``await``. ``on_approval`` is called in that thread too.
    """
    result: dict[str, Any] = await _dispatch_in_thread(
        name,
        arguments,
        workspace_id=workspace_id,
        session_id=session_id,
        tool_call_id=tool_call_id,
        on_approval=on_approval,
    )
    return result
