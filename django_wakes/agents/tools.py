"""Tools a model can call, and the dispatcher that runs them on the session's behalf.

A host that runs an agent hands the model these tools (:func:`tool_definitions`, in the shape the
Anthropic or the OpenAI tool-calling API takes) and runs each tool call the model makes through
:func:`dispatch`, which returns a small JSON-able result to append to the conversation:

* ``schedule_followup`` — a turn for this session later: after a ``delay``, ``at`` a time, or on a ``cron``;
* ``watch_event`` — a turn when the host delivers an event key (``deliver_event``);
* ``request_approval`` — a turn when a human answers (the token goes to the host, never to the model);
* ``cancel_wake`` and ``list_wakes`` — this session's own wakes, and no one else's.

Every wake a tool creates is of kind ``session_turn`` with the session set, so when it fires the
host's ``WAKES["SPAWN_TURN"]`` hook hands the turn back to the session; :func:`turn_context` tells
that hook which wake fired and the note the model left. Bad model input (unknown tool, bad JSON,
unknown fields, wrong types, values out of range, a request the engine refuses) is never an exception:
it is ``{"error": {"code": ..., "message": ...}}``, with a message that says what to fix, and nothing
is written. A misconfigured host (an empty ``workspace_id``, no ``SPAWN_TURN``) gets an exception.

Importing this module imports no model, so tool definitions can be built before Django is set up;
the engine and the models are imported when a tool runs. See ``docs/agents.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from .. import clock
from ..durations import parse_duration
from ..exceptions import InvalidDuration, UnknownKind, WakeError

if TYPE_CHECKING:  # pragma: no cover
    from ..models import Wake
    from ..querysets import WakeQuerySet

__all__ = [
    "AGENT_CALL_OPTIONS",
    "ERROR_CODES",
    "TOOL_NAMES",
    "ApprovalHook",
    "describe_wake",
    "dispatch",
    "firing_turn_wake",
    "tool_definitions",
    "turn_context",
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
    "invalid_request": "the arguments are well formed but the request cannot be done as asked",
    "not_found": "no wake of this session has that id",
    "budget_exceeded": "this session may not create more wakes like this now",
    "session_stopped": "this session was stopped and takes no new wakes",
    "unavailable": "the host did not enable this tool",
}

#: How :func:`dispatch` reports a :class:`~django_wakes.exceptions.WakeError` the engine raised:
#: the first class of the exception's MRO named here decides (names, not classes, so an exception
#: class added later maps by its name, and its base class's code applies until it is named here).
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

#: What the model is told instead of the engine's message (which is written for the host).
MODEL_MESSAGES: dict[str, str] = {
    "session_stopped": "this conversation was stopped and takes no new wakes: do not retry",
}

#: The longest ``arguments`` JSON text accepted, in characters.
ARGUMENTS_MAX_CHARS = 65_536
#: The longest note, in characters.
NOTE_MAX_LENGTH = 4_000
#: The longest event key (the column's length).
EVENT_KEY_MAX_LENGTH = 200
#: The longest approval prompt (``validation.PROMPT_MAX_LENGTH``).
PROMPT_MAX_LENGTH = 10_000
#: The largest wake id (a signed 64-bit primary key).
WAKE_ID_MAX = 2**63 - 1
#: ``list_wakes``: how many by default, and at most.
LIST_DEFAULT, LIST_MAX = 20, 50
#: How much of an approval's prompt a wake summary repeats.
PROMPT_PREVIEW = 200

SESSION_TURN = "session_turn"  # sinks.SESSION_TURN, without importing the sink registry here

#: ``request_approval(on_timeout=...)`` -> the engine's ``on_expiry`` (``None``: the sink is told it expired).
ON_TIMEOUT: dict[str, dict[str, bool] | None] = {
    "reject": {"approved": False},
    "approve": {"approved": True},
    "notify": None,
}

_DURATION = 'a duration: a number and a unit (ms, s, m, h, d, w), parts run together, e.g. "90s", "15m", "1h30m", "3d"'
_NOTE = (
    "A note to your future self, handed back to you when this fires: what to check or do then, with the "
    "details you will need (ids, names, links), since you may not remember this conversation's context."
)


def _object(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_SCHEMAS: dict[str, dict[str, Any]] = {
    "schedule_followup": _object(
        {
            "delay": {
                "type": "string",
                "maxLength": 40,
                "description": f"Fire this long from now; {_DURATION}. Give exactly one of delay, at or cron.",
            },
            "at": {
                "type": "string",
                "format": "date-time",
                "description": (
                    "Fire at this moment: an ISO 8601 date-time with its UTC offset, e.g. "
                    '"2030-01-04T09:00:00+01:00" or "2030-01-04T08:00:00Z"; must be in the future. '
                    "Give exactly one of delay, at or cron."
                ),
            },
            "cron": {
                "type": "string",
                "maxLength": 120,
                "description": (
                    'Fire repeatedly on this 5-field cron schedule (minute hour day month weekday), e.g. "0 9 * * '
                    'MON-FRI" for 09:00 on weekdays; each occurrence is a separate turn with the same note. '
                    "Give exactly one of delay, at or cron."
                ),
            },
            "tz": {
                "type": "string",
                "maxLength": 64,
                "description": 'IANA time zone the cron schedule is read in, e.g. "Europe/Paris"; default "UTC". '
                "Only with cron.",
            },
            "note": {"type": "string", "minLength": 1, "maxLength": NOTE_MAX_LENGTH, "description": _NOTE},
            "expires_in": {
                "type": "string",
                "maxLength": 40,
                "description": (
                    f"Optional, only with delay or at: {_DURATION}, counted from now and longer than the delay. "
                    "If the follow-up could not fire by then (the system was down), you get a turn saying it "
                    "expired instead. Leave it out unless a late follow-up would be useless."
                ),
            },
        },
        ["note"],
    ),
    "watch_event": _object(
        {
            "event_key": {
                "type": "string",
                "minLength": 1,
                "maxLength": EVENT_KEY_MAX_LENGTH,
                "description": (
                    "The exact key of the event to wait for, in the format the system told you about "
                    '(e.g. "ci:pass:<commit sha>"); a key nobody delivers never fires.'
                ),
            },
            "expires_in": {
                "type": "string",
                "maxLength": 40,
                "description": (
                    f"Stop waiting after this long; {_DURATION}. You then get a turn saying the watch "
                    "expired. Recommended: without it an event that never comes leaves you waiting forever."
                ),
            },
            "note": {"type": "string", "minLength": 1, "maxLength": NOTE_MAX_LENGTH, "description": _NOTE},
        },
        ["event_key"],
    ),
    "request_approval": _object(
        {
            "prompt": {
                "type": "string",
                "minLength": 1,
                "maxLength": PROMPT_MAX_LENGTH,
                "description": (
                    "The question the human sees: what you want to do, why, and what happens if they approve; "
                    "complete on its own, since they may not see this conversation."
                ),
            },
            "expires_in": {
                "type": "string",
                "maxLength": 40,
                "description": f"How long the human has to answer; {_DURATION}.",
            },
            "on_timeout": {
                "type": "string",
                "enum": list(ON_TIMEOUT),
                "description": (
                    'What happens if no one answers in time: "notify" (the default) gives you a turn saying it '
                    'expired; "reject" gives you a turn with {"approved": false} as the answer; "approve" gives '
                    'you {"approved": true} (silence is consent: only for low-risk actions). A timed-out answer '
                    'is marked "defaulted": true.'
                ),
            },
            "note": {"type": "string", "minLength": 1, "maxLength": NOTE_MAX_LENGTH, "description": _NOTE},
        },
        ["prompt", "expires_in"],
    ),
    "cancel_wake": _object(
        {
            "wake_id": {
                "type": "integer",
                "minimum": 1,
                "maximum": WAKE_ID_MAX,
                "description": "The wake_id of the follow-up, watch or approval request to cancel, "
                "as a create tool or list_wakes returned it.",
            },
        },
        ["wake_id"],
    ),
    "list_wakes": _object(
        {
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": LIST_MAX,
                "description": f"At most this many wakes, soonest first; default {LIST_DEFAULT}.",
            },
        },
        [],
    ),
}

_DESCRIPTIONS: dict[str, str] = {
    "schedule_followup": (
        "Schedule a follow-up: a new turn for you in this same conversation at a later time, carrying the note "
        "you write now. It is durable: it fires even days later and across restarts. Use it to check back on "
        'something that takes time ("in 3 days, check whether PR #42 was merged"), to retry later, or for '
        'recurring work ("every weekday at 09:00, summarise new issues"). Give exactly one of delay (relative), '
        "at (an absolute time) or cron (recurring). The result is the follow-up: wake_id (keep it to cancel "
        'it), state "pending", trigger "at", fire_at (when it fires, ISO 8601 with offset), expires_at and '
        "your note. When it fires you get a turn with the note; nothing happens before then."
    ),
    "watch_event": (
        "Wait for an event and get a new turn in this conversation when it arrives: a CI run finishing, a "
        "webhook, a job completing; the event's payload comes with the turn. Use only event keys the system "
        "told you it delivers. Set expires_in so that you hear back (a turn saying the watch expired) if the "
        'event never comes. The result is the watch: wake_id, state "pending", trigger "on_event", event_key, '
        "fire_at (null until the event arrives), expires_at and your note. After calling this, end your turn "
        "rather than waiting: you will be woken."
    ),
    "request_approval": (
        "Ask a human to approve something before you do it (deploy, spend money, delete data, contact "
        "someone) and get a new turn in this conversation with their answer, "
        '{"approved": true or false, ...}. The system delivers the request to a person itself: you get no '
        "link or token, and you should not proceed with the action until the answer arrives. The result is "
        'the request: wake_id, state "pending", trigger "on_approval", fire_at (null until answered), '
        "expires_at (the answer deadline), on_timeout and your note. End your turn after calling this."
    ),
    "cancel_wake": (
        "Cancel one of this conversation's follow-ups, watches or approval requests that has not fired yet, by "
        "its wake_id; for a recurring follow-up this stops the whole series. The result has cancelled: true "
        "when it will not fire (again), or cancelled: false and a detail saying why (it already fired, "
        "expired, or is firing right now), with the wake's wake_id and state. An id that is not one of this "
        "conversation's wakes is not_found."
    ),
    "list_wakes": (
        "List this conversation's pending follow-ups, watches and approval requests (and any firing right now), "
        "soonest first: what will wake you, when, and the note you left. Use it before scheduling something "
        "you may have scheduled already, or to find a wake_id to cancel. The result has wakes (each with "
        "wake_id, state, trigger, fire_at, expires_at, note), more (true if there are more than the limit) "
        "and now, the current time."
    ),
}

#: The tools, in the order :func:`tool_definitions` lists them.
TOOL_NAMES: tuple[str, ...] = tuple(_SCHEMAS)


def tool_definitions(
    style: Literal["anthropic", "openai"] = "anthropic", *, names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Return the tool definitions in the shape one tool-calling API takes.

    ``"anthropic"``: ``{"name", "description", "input_schema"}`` each; ``"openai"``:
    ``{"type": "function", "function": {"name", "description", "parameters"}}`` each. ``names``
    offers only some tools (e.g. leave out ``request_approval`` when the host has no one to ask).
    Every call returns fresh dicts: a caller may change them.
    """
    chosen = list(TOOL_NAMES) if names is None else list(names)
    unknown = [n for n in chosen if n not in _SCHEMAS]
    if unknown:
        raise ValueError(f"unknown tool name(s) {unknown!r}; the tools are {', '.join(TOOL_NAMES)}")
    if style not in ("anthropic", "openai"):
        raise ValueError(f"style must be 'anthropic' or 'openai', got {style!r}")
    definitions: list[dict[str, Any]] = []
    for name in chosen:
        schema = json.loads(json.dumps(_SCHEMAS[name]))  # a deep copy
        if style == "anthropic":
            definitions.append({"name": name, "description": _DESCRIPTIONS[name], "input_schema": schema})
        else:
            definitions.append(
                {
                    "type": "function",
                    "function": {"name": name, "description": _DESCRIPTIONS[name], "parameters": schema},
                }
            )
    return definitions


# --------------------------------------------------------------------------------------------------
# Errors and validation
# --------------------------------------------------------------------------------------------------


class ToolError(Exception):
    """A refusal :func:`dispatch` returns to the model as ``{"error": {"code", "message"[, "field"]}}``."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.field = code, message, field

    def as_result(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _shown(value: Any) -> str:
    """``value`` as short JSON for a message: ASCII, so a NUL or lone surrogate the model sent stays escaped."""
    text = json.dumps(value, default=str) if _json_type(value) != "object" else "{...}"
    return text if len(text) <= 60 else text[:57] + "..."


def _bad_text(text: str) -> str | None:
    """Why a string can be stored the same way on no database (a NUL or a lone surrogate), or ``None``."""
    for char in text:
        if char == "\x00":
            return "must not contain a NUL character (U+0000)"
        if "\ud800" <= char <= "\udfff":
            return "must not contain a lone surrogate (invalid Unicode)"
    return None


def _check(field: str, prop: Mapping[str, Any], value: Any) -> Any:
    """Return ``value`` (a ``date-time`` parsed to an aware datetime) if it meets ``prop``; raise otherwise."""
    kind = prop["type"]
    if kind == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # JSON Schema: 3.0 is an integer
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolError(
                "invalid_arguments", f"{field} must be an integer, got {_json_type(value)} {_shown(value)}", field=field
            )
        if "minimum" in prop and value < prop["minimum"]:
            raise ToolError(
                "invalid_arguments", f"{field} must be at least {prop['minimum']}, got {value}", field=field
            )
        if "maximum" in prop and value > prop["maximum"]:
            raise ToolError("invalid_arguments", f"{field} must be at most {prop['maximum']}, got {value}", field=field)
        return value
    if kind != "string":  # pragma: no cover - the schemas above use strings and integers only
        raise AssertionError(f"unsupported schema type {kind!r}")
    if not isinstance(value, str):
        hint = " (omit it instead of passing null)" if value is None else ""
        raise ToolError(
            "invalid_arguments", f"{field} must be a string, got {_json_type(value)} {_shown(value)}{hint}", field=field
        )
    if not value.strip():
        raise ToolError("invalid_arguments", f"{field} must not be empty or blank", field=field)
    problem = _bad_text(value)
    if problem:
        raise ToolError("invalid_arguments", f"{field} {problem}", field=field)
    if "maxLength" in prop and len(value) > prop["maxLength"]:
        raise ToolError(
            "invalid_arguments",
            f"{field} is {len(value)} characters long; the limit is {prop['maxLength']}: shorten it",
            field=field,
        )
    if "enum" in prop and value not in prop["enum"]:
        allowed = ", ".join(json.dumps(v) for v in prop["enum"])
        raise ToolError("invalid_arguments", f"{field} must be one of {allowed}, got {_shown(value)}", field=field)
    if prop.get("format") == "date-time":
        return _date_time(field, value)
    return value


def _date_time(field: str, value: str) -> datetime:
    example = '"2030-01-04T09:00:00+01:00" or "2030-01-04T08:00:00Z"'
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ToolError(
            "invalid_arguments",
            f"{field} must be an ISO 8601 date-time such as {example}, got {_shown(value)}",
            field=field,
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ToolError(
            "invalid_arguments",
            f"{field} {_shown(value)} has no UTC offset: add one, e.g. {example} (or use delay for a relative time)",
            field=field,
        )
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ToolError("invalid_arguments", f"{field} {_shown(value)} is out of range", field=field) from None


def _validate(name: str, schema: Mapping[str, Any], arguments: Any) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema (the subset the schemas above use); return them cleaned."""
    if not isinstance(arguments, dict):
        raise ToolError("invalid_arguments", f"{name} takes a JSON object of arguments, got {_json_type(arguments)}")
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    accepted = ", ".join(properties) or "no arguments"
    unknown = [f for f in arguments if f not in properties]
    if unknown:
        listed = ", ".join(_shown(f) for f in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        first = unknown[0]
        plain = isinstance(first, str) and len(first) <= 100 and _bad_text(first) is None
        raise ToolError(
            "invalid_arguments",
            f"unknown argument{'s' if len(unknown) > 1 else ''} {listed}; {name} accepts: {accepted}",
            field=first if plain else None,
        )
    for field in schema["required"]:
        if field not in arguments:
            raise ToolError(
                "invalid_arguments", f"missing required argument {field!r} ({properties[field]['type']})", field=field
            )
    return {field: _check(field, properties[field], value) for field, value in arguments.items()}


def _parse_arguments(arguments: Any) -> Any:
    """Return the arguments as Python values: a mapping as a dict, JSON text parsed, ``None`` or ``""`` as ``{}``."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, bytes | bytearray):
        try:
            arguments = bytes(arguments).decode()
        except UnicodeDecodeError:
            raise ToolError("invalid_json", "the arguments are not UTF-8 text: send a JSON object") from None
    if not isinstance(arguments, str):
        return arguments  # refused by _validate as "not a JSON object"
    if not arguments.strip():
        return {}
    if len(arguments) > ARGUMENTS_MAX_CHARS:
        raise ToolError(
            "invalid_arguments",
            f"the arguments are {len(arguments)} characters long; the limit is {ARGUMENTS_MAX_CHARS}",
        )

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(arguments, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or "nested too deeply"
        raise ToolError(
            "invalid_json", f'the arguments are not valid JSON ({detail}): send one JSON object, e.g. {{"wake_id": 12}}'
        ) from None


def _duration(field: str, value: str, *, allow_zero: bool = True) -> timedelta:
    try:
        return parse_duration(value, name=field, allow_zero=allow_zero)
    except InvalidDuration as exc:
        raise ToolError("invalid_arguments", str(exc), field=field) from None


def _engine_error(exc: WakeError, properties: Iterable[str]) -> ToolError:
    code = "invalid_request"
    for cls in type(exc).__mro__:
        if cls.__name__ in ENGINE_ERROR_CODES:
            code = ENGINE_ERROR_CODES[cls.__name__]
            break
    message = str(exc)
    prefix = message.split(":", 1)[0].split(" ", 1)[0]
    return ToolError(code, MODEL_MESSAGES.get(code, message), field=prefix if prefix in properties else None)


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def describe_wake(wake: Wake) -> dict[str, Any]:
    """Return the model-facing summary of ``wake``: the shape every tool result and ``list_wakes`` entry uses.

    Always ``wake_id``, ``state``, ``trigger`` (``at``, ``on_event`` or ``on_approval``), ``fire_at``
    and ``expires_at`` (ISO 8601 with offset, or ``null``) and ``note`` (or ``null``); then ``cron`` and
    ``tz`` (or ``every``) for a recurring follow-up, ``event_key`` for a watch, ``prompt`` (its first
    200 characters) and ``on_timeout`` for an approval. Never the intent beyond its note, never a token.
    """
    intent = wake.intent if isinstance(wake.intent, dict) else {}
    note = intent.get("note")
    summary: dict[str, Any] = {
        "wake_id": wake.pk,
        "state": str(wake.state),
        "trigger": str(wake.trigger_type),
        "fire_at": _iso(wake.fire_at),
        "expires_at": _iso(wake.expires_at),
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


def firing_turn_wake(session_id: str) -> Wake | None:
    """Return the ``session_turn`` wake of ``session_id`` that is firing now, if exactly one is.

    Call it from the ``SPAWN_TURN`` hook (which is handed only the session and the trigger's result)
    to learn which wake it runs for. Inside the hook this is the wake being fired (the engine keeps
    it in a context variable); elsewhere, a session's turns share a lane by default, so at most one of
    them fires at a time; ``None`` when none is firing, or when several are (wakes given a lane of
    their own by their creator).
    """
    from ..engine import db_alias
    from ..engine.shared import firing_wake
    from ..models import State, Wake

    current = firing_wake.get()
    if current is not None and current.session_id == session_id and current.kind == SESSION_TURN:
        return current

    rows = list(
        Wake.objects.using(db_alias())
        .filter(session_id=session_id, kind=SESSION_TURN, state=State.FIRING)
        .order_by("-claimed_at")[:2]
    )
    return rows[0] if len(rows) == 1 else None


def turn_context(session_id: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """Return what to tell the model in the turn ``SPAWN_TURN(session_id, result)`` starts.

    ``{"wake": <describe_wake of the firing wake, with its note> or None, "result": result}``:
    ``result`` is what the trigger delivered (``{"trigger": "at"}``, an event's ``payload``, an
    approval's ``answer``, or ``"expired": true``).
    """
    wake = firing_turn_wake(session_id)
    return {"wake": describe_wake(wake) if wake is not None else None, "result": dict(result)}


# --------------------------------------------------------------------------------------------------
# The tools
# --------------------------------------------------------------------------------------------------


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
        JSON list, as unambiguous. The engine refuses a key naming another session's wake besides.
        """
        if self.tool_call_id is None:
            return None
        workspace, session = self.workspace_id, self.session_id
        readable = f"tool:{len(workspace)}:{workspace}:{len(session)}:{session}:{self.tool_call_id}"
        if len(readable) <= 200 and _bad_text(readable) is None:
            return readable
        digest = hashlib.sha256(json.dumps([workspace, session, self.tool_call_id]).encode())
        return f"tool:sha256:{digest.hexdigest()}"

    @property
    def digest(self) -> str:
        """A fingerprint of the call (tool and arguments): a retry has the same, another call does not."""
        text = json.dumps([self.name, self.raw], sort_keys=True, separators=(",", ":"))
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


def _schedule_followup(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine
    from ..engine.shared import after

    args = call.args
    given = [f for f in ("delay", "at", "cron") if f in args]
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
        delay = _duration("delay", args["delay"])
        kwargs["delay"] = delay
        fires = after(now, delay, name="delay")
    elif "at" in args:
        fires = args["at"]
        if fires <= now:
            raise ToolError(
                "invalid_arguments",
                f"at {_iso(fires)} is not in the future: it is now {_iso(now)}. Use a later time, or delay.",
                field="at",
            )
        kwargs["at"] = fires
    else:
        kwargs.update(cron=args["cron"], tz=args.get("tz", "UTC"))
    if "expires_in" in args:
        expires_in = _duration("expires_in", args["expires_in"], allow_zero=False)
        assert fires is not None  # expires_in is refused with cron above
        if after(now, expires_in, name="expires_in") <= fires:
            raise ToolError(
                "invalid_arguments",
                f"expires_in {args['expires_in']!r} ends before the follow-up fires ({_iso(fires)}): "
                "make it longer than the delay, or leave it out",
                field="expires_in",
            )
        kwargs["expires_in"] = expires_in
    return describe_wake(call.create(engine.schedule, **kwargs))


def _watch_event(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    kwargs: dict[str, Any] = {"event_key": call.args["event_key"]}
    if "expires_in" in call.args:
        kwargs["expires_in"] = _duration("expires_in", call.args["expires_in"], allow_zero=False)
    return describe_wake(call.create(engine.watch, **kwargs))


def _request_approval(call: _Call, on_approval: ApprovalHook | None) -> dict[str, Any]:
    from .. import engine

    if on_approval is None:
        logger.warning(
            "request_approval was called in session %s but dispatch() was given no on_approval hook: refused",
            call.session_id,
        )
        raise ToolError("unavailable", "request_approval is not available here: no one can be asked. Do not retry it.")
    args = call.args
    request = call.create(
        engine.request_approval,
        prompt=args["prompt"],
        expires_in=_duration("expires_in", args["expires_in"], allow_zero=False),
        on_expiry=ON_TIMEOUT[args.get("on_timeout", "notify")],
    )
    wake: Wake = request.wake
    if wake.token_hash == engine.hash_token(request.token):
        # New, or a retried call whose approval is still open (the engine rotated its token):
        # the host gets the valid token. An approval already answered has none to hand out.
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
        "now": _iso(clock.now()),
    }


_HANDLERS: dict[str, Callable[[_Call, ApprovalHook | None], dict[str, Any]]] = {
    "schedule_followup": _schedule_followup,
    "watch_event": _watch_event,
    "request_approval": _request_approval,
    "cancel_wake": _cancel_wake,
    "list_wakes": _list_wakes,
}


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

    ``arguments``: a dict, or the JSON text a model emits (``None`` or ``""``: no arguments). The
    result is JSON-able and goes to the model as it is: a tool's result, or
    ``{"error": {"code", "message"[, "field"]}}`` (codes in :data:`ERROR_CODES`) for bad model
    input, in which case nothing was written.

    ``tool_call_id`` (the API's id for this call) makes creates idempotent: a host that retries the
    call gets the same wake and the same result, never a second wake. ``on_approval(wake, token)``
    receives the one-time token of an approval ``request_approval`` creates (again, with a fresh
    token, when a retried call finds it still open) for the host to deliver to a human; the token
    never appears in the result. Without the hook, ``request_approval`` answers ``unavailable``.

    Raise (host errors, not model input): ``ValueError`` for an unusable ``workspace_id``,
    ``session_id`` or ``tool_call_id``, or a ``tool_call_id`` reused for a different call;
    ``ImproperlyConfigured`` when ``WAKES["SPAWN_TURN"]`` is not set; whatever ``on_approval`` or
    the database raises.
    """
    from django.core.exceptions import ImproperlyConfigured

    from ..validation import key

    workspace = key(workspace_id, name="workspace_id")
    session = key(session_id, name="session_id")
    if tool_call_id is not None and (not isinstance(tool_call_id, str) or not tool_call_id):
        raise ValueError(f"tool_call_id must be a non-empty string or None, got {tool_call_id!r:.60}")
    if on_approval is not None and not callable(on_approval):
        raise TypeError("on_approval must be a callable taking (wake, token)")
    try:
        handler = _HANDLERS.get(name) if isinstance(name, str) else None
        if handler is None:
            raise ToolError("unknown_tool", f"there is no tool {_shown(name)}; the tools are {', '.join(TOOL_NAMES)}")
        raw = _parse_arguments(arguments)
        args = _validate(name, _SCHEMAS[name], raw)
        call = _Call(name, workspace, session, tool_call_id, raw, args)
        try:
            return handler(call, on_approval)
        except UnknownKind as exc:
            raise ImproperlyConfigured(f"django_wakes.agents.tools needs WAKES['SPAWN_TURN']: {exc}") from exc
        except WakeError as exc:
            raise _engine_error(exc, _SCHEMAS[name]["properties"]) from exc
    except ToolError as refusal:
        return refusal.as_result()
