"""The five tools as a model sees them: names, descriptions, JSON Schemas, in each API's shape.

One full schema per tool is the contract (:data:`SCHEMAS`): ``dispatch()`` checks arguments against
exactly these keywords, so a call valid under the schema is refused only for what JSON Schema
cannot state (docs/agents.md, "What the schema cannot say"). :func:`tool_definitions` derives the
shape each tool-calling API takes and, with ``strict=True``, the subset that API's strict mode
accepts (constrained decoding): every property required and optional ones nullable for OpenAI,
the keywords the Anthropic SDK's ``transform_schema`` keeps for Anthropic; what a strict subset
drops, ``dispatch()`` still checks.

Imports nothing from Django: definitions can be built before settings are configured.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal

__all__ = [
    "CRON_PATTERN",
    "DATE_TIME_PATTERN",
    "DURATION_PATTERN",
    "POSITIVE_DURATION_PATTERN",
    "SCHEMAS",
    "STYLES",
    "TEXT_PATTERN",
    "TOOL_NAMES",
    "TZ_PATTERN",
    "Style",
    "tool_definitions",
]

Style = Literal["anthropic", "openai", "openai-responses", "mcp"]
#: The shapes :func:`tool_definitions` can give.
STYLES: tuple[str, ...] = ("anthropic", "openai", "openai-responses", "mcp")

#: The longest ``arguments`` JSON text accepted, in characters.
ARGUMENTS_MAX_CHARS = 65_536
#: The longest note, in characters.
NOTE_MAX_LENGTH = 4_000
#: The longest event key (the column's length).
EVENT_KEY_MAX_LENGTH = 200
#: The longest approval prompt (``validation.PROMPT_MAX_LENGTH``).
PROMPT_MAX_LENGTH = 10_000
#: The longest duration text.
DURATION_MAX_LENGTH = 40
#: The longest cron expression a tool takes (``schedules.cron.CRON_MAX_LENGTH`` is larger).
CRON_MAX_LENGTH = 120
#: The longest time zone name.
TZ_MAX_LENGTH = 64
#: The largest wake id (a signed 64-bit primary key).
WAKE_ID_MAX = 2**63 - 1
#: ``list_wakes``: how many by default, and at most.
LIST_DEFAULT, LIST_MAX = 20, 50

# Patterns read the same in ECMA-262 and Python ``re`` (no look-around, no flags, no ``\d`` or ``\s``,
# whose Unicode meanings differ: Python's ``\d`` matches "٠"), so providers' decoders and Python
# validators agree; ``dispatch()`` applies them with ``re.search`` as JSON Schema validators do.

#: What counts as blank: Python's and ECMA-262's white space alike (each has some the other lacks).
_SPACE = r"\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
#: Text that is not blank and has no NUL character (a NUL can be stored on no database).
TEXT_PATTERN = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"
_UNIT = r"(ms|s|m|h|d|w)"
_NUMBER = r"[0-9]+(\.[0-9]{1,3})?"  # at most 3 decimals: 0.001ms is 1 microsecond, the clock's grain
#: A duration: number+unit parts run together ("90s", "1h30m", "1.5h").
DURATION_PATTERN = rf"^({_NUMBER}{_UNIT})+$"
#: A duration with at least one non-zero digit (expiries must be longer than nothing).
_NON_ZERO = r"([0-9]*[1-9][0-9]*(\.[0-9]{1,3})?|[0-9]+\.([0-9]{0,2}[1-9]|[0-9]?[1-9][0-9]|[1-9][0-9][0-9]))"
POSITIVE_DURATION_PATTERN = rf"^({_NUMBER}{_UNIT})*{_NON_ZERO}{_UNIT}({_NUMBER}{_UNIT})*$"
#: RFC 3339 ``date-time`` (section 5.6), ``T``/``Z`` in either case, a leap second allowed; the
#: calendar (30 February) is ``format: date-time``'s part, checked by ``dispatch()``.
DATE_TIME_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)"
    r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)


def _cron_field(value: str) -> str:
    item = rf"(\*|({value})(-({value}))?)(/[1-9][0-9]?)?"
    return rf"{item}(,{item})*"


_MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
_DAYS = "SUN|MON|TUE|WED|THU|FRI|SAT"
#: Five cron fields (minute hour day-of-month month day-of-week): ``*``, values, ranges, lists,
#: steps, English month and day names in capitals.
CRON_PATTERN = (
    "^"
    + " ".join(
        _cron_field(v)
        for v in (
            r"[0-5]?[0-9]",
            r"[01]?[0-9]|2[0-3]",
            r"0?[1-9]|[12][0-9]|3[01]",
            rf"0?[1-9]|1[0-2]|{_MONTHS}",
            rf"[0-7]|{_DAYS}",
        )
    )
    + "$"
)
#: An IANA time zone name's shape ("UTC", "Europe/Paris", "America/Argentina/Buenos_Aires").
TZ_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"

_DURATION = 'a duration: a number and a unit (ms, s, m, h, d, w), parts run together, e.g. "90s", "15m", "1h30m", "3d"'
_NOTE = (
    "A note to your future self, handed back to you when this fires: what to check or do then, with the "
    "details you will need (ids, names, links), since you may not remember this conversation's context. "
    f"At most {NOTE_MAX_LENGTH:,} characters."
)
#: ``request_approval(on_timeout=...)`` values, the default first.
ON_TIMEOUT_VALUES = ("notify", "reject", "approve")


def _text(max_length: int, description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": TEXT_PATTERN,
        "description": description,
    }


def _duration(description: str, *, positive: bool) -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": DURATION_MAX_LENGTH,
        "pattern": POSITIVE_DURATION_PATTERN if positive else DURATION_PATTERN,
        "description": description,
    }


def _object(properties: dict[str, dict[str, Any]], required: list[str], **rules: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False, **rules}


def _present(*names: str) -> dict[str, Any]:
    return {"anyOf": [{"required": [name]} for name in names]} if len(names) > 1 else {"required": list(names)}


#: The full schema of each tool: what ``dispatch()`` checks, keyword for keyword.
SCHEMAS: dict[str, dict[str, Any]] = {
    "schedule_followup": _object(
        {
            "delay": _duration(
                f"Fire this long from now; {_DURATION}. Give exactly one of delay, at or cron.", positive=False
            ),
            "at": {
                "type": "string",
                "format": "date-time",
                "pattern": DATE_TIME_PATTERN,
                "description": (
                    "Fire at this moment: an RFC 3339 date-time with seconds and its UTC offset, e.g. "
                    '"2030-01-04T09:00:00+01:00" or "2030-01-04T08:00:00Z"; must be in the future. '
                    "Give exactly one of delay, at or cron."
                ),
            },
            "cron": {
                "type": "string",
                "maxLength": CRON_MAX_LENGTH,
                "pattern": CRON_PATTERN,
                "description": (
                    'Fire repeatedly on this 5-field cron schedule (minute hour day month weekday), e.g. "0 9 * * '
                    'MON-FRI" for 09:00 on weekdays; fields are *, numbers, ranges (1-5), lists (1,15), steps '
                    "(*/15) and English month or day names in capitals. Each occurrence is a separate turn with the "
                    "same note. Give exactly one of delay, at or cron."
                ),
            },
            "tz": {
                "type": "string",
                "maxLength": TZ_MAX_LENGTH,
                "pattern": TZ_PATTERN,
                "description": 'IANA time zone the cron schedule is read in, e.g. "Europe/Paris"; default "UTC". '
                "Only with cron.",
            },
            "note": _text(NOTE_MAX_LENGTH, _NOTE),
            "expires_in": _duration(
                f"Optional, only with delay or at: {_DURATION}, counted from now and longer than the delay. "
                "If the follow-up could not fire by then (the system was down), you get a turn saying it "
                "expired instead. Leave it out unless a late follow-up would be useless.",
                positive=True,
            ),
        },
        ["note"],
        # Exactly one of delay, at, cron; tz only with cron; expires_in never with cron. No oneOf/anyOf
        # at the top level: the Anthropic API refuses those there, if/then/else it takes.
        **{
            "if": {"required": ["cron"]},
            "then": {"not": _present("delay", "at", "expires_in")},
            "else": {"oneOf": [{"required": ["delay"]}, {"required": ["at"]}], "not": {"required": ["tz"]}},
        },
    ),
    "watch_event": _object(
        {
            "event_key": _text(
                EVENT_KEY_MAX_LENGTH,
                "The exact key of the event to wait for, in the format the system told you about "
                '(e.g. "ci:pass:<commit sha>"); a key nobody delivers never fires.',
            ),
            "expires_in": _duration(
                f"Stop waiting after this long; {_DURATION}. You then get a turn saying the watch "
                "expired. Recommended: without it an event that never comes leaves you waiting forever.",
                positive=True,
            ),
            "note": _text(NOTE_MAX_LENGTH, _NOTE),
        },
        ["event_key"],
    ),
    "request_approval": _object(
        {
            "prompt": _text(
                PROMPT_MAX_LENGTH,
                "The question the human sees: what you want to do, why, and what happens if they approve; "
                f"complete on its own, since they may not see this conversation. At most {PROMPT_MAX_LENGTH:,} "
                "characters.",
            ),
            "expires_in": _duration(f"How long the human has to answer; {_DURATION}.", positive=True),
            "on_timeout": {
                "type": "string",
                "enum": list(ON_TIMEOUT_VALUES),
                "description": (
                    'What happens if no one answers in time: "notify" (the default) gives you a turn saying it '
                    'expired; "reject" gives you a turn with {"approved": false} as the answer; "approve" gives '
                    'you {"approved": true} (silence is consent: only for low-risk actions). A timed-out answer '
                    'is marked "defaulted": true.'
                ),
            },
            "note": _text(NOTE_MAX_LENGTH, _NOTE),
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

DESCRIPTIONS: dict[str, str] = {
    "schedule_followup": (
        "Schedule a follow-up: a new turn for you in this same conversation at a later time, carrying the note "
        "you write now. It is durable: it fires even days later and across restarts. Use it to check back on "
        'something that takes time ("in 3 days, check whether PR #42 was merged"), to retry later, or for '
        'recurring work ("every weekday at 09:00, summarise new issues"). Give exactly one of delay (relative), '
        "at (an absolute time) or cron (recurring); leave the others out or null. The result is the follow-up: "
        'wake_id (keep it to cancel it), state "pending", trigger "at", fire_at (when it fires, RFC 3339 with '
        "offset), expires_at and your note. When it fires you get a turn with the note; nothing happens before "
        "then."
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
TOOL_NAMES: tuple[str, ...] = tuple(SCHEMAS)

# What each strict mode keeps of a property (everything else is left to dispatch()).
# OpenAI: "Supported schemas" of Structured Outputs (no length keywords, no conditionals).
_OPENAI_STRICT_KEYWORDS = frozenset({"type", "description", "enum", "pattern", "format", "minimum", "maximum"})
# Anthropic: what the SDK's transform_schema() keeps for a string or an integer (it moves the rest into
# the description); optional properties may stay optional.
_ANTHROPIC_STRICT_KEYWORDS = frozenset({"type", "description", "enum", "format"})


def _openai_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Every property required, the optional ones nullable (null means absent to ``dispatch()``)."""
    properties: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        kept = {k: v for k, v in prop.items() if k in _OPENAI_STRICT_KEYWORDS}
        if name not in schema["required"]:
            kept["type"] = [kept["type"], "null"]
            if "enum" in kept:
                kept["enum"] = [*kept["enum"], None]
        properties[name] = kept
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _anthropic_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The keywords ``transform_schema`` keeps: an enum stands without its type; optional stays optional."""
    properties = {}
    for name, prop in schema["properties"].items():
        kept = {k: v for k, v in prop.items() if k in _ANTHROPIC_STRICT_KEYWORDS}
        if "enum" in kept:
            del kept["type"]
        properties[name] = kept
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        "required": list(schema["required"]),
    }


def tool_definitions(
    style: Style = "anthropic", *, strict: bool = False, names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Return the tool definitions in the shape one tool-calling API takes.

    * ``"anthropic"`` (Messages API ``tools``): ``{"name", "description", "input_schema"}``, with
      ``"strict": true`` when ``strict``;
    * ``"openai"`` (Chat Completions ``tools``): ``{"type": "function", "function": {"name",
      "description", "parameters", "strict"}}``;
    * ``"openai-responses"`` (Responses API ``tools``): ``{"type": "function", "name", "description",
      "parameters", "strict"}``; ``strict`` is always written, since that API's default is strict;
    * ``"mcp"`` (an MCP ``Tool``): ``{"name", "description", "inputSchema"}`` (MCP has no strict mode).

    ``strict=True`` gives the schemas that provider's strict mode (constrained decoding) accepts;
    ``dispatch()`` checks what they leave out. ``names`` offers only some tools (e.g. leave out
    ``request_approval`` when the host has no one to ask). Every call returns fresh dicts.
    """
    chosen = list(TOOL_NAMES) if names is None else list(names)
    unknown = [n for n in chosen if n not in SCHEMAS]
    if unknown:
        raise ValueError(f"unknown tool name(s) {unknown!r}; the tools are {', '.join(TOOL_NAMES)}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {', '.join(map(repr, STYLES))}, got {style!r}")
    if strict and style == "mcp":
        raise ValueError("MCP has no strict mode: use strict=False with style 'mcp'")
    definitions: list[dict[str, Any]] = []
    for name in chosen:
        schema = copy.deepcopy(SCHEMAS[name])
        if strict:
            schema = _anthropic_strict(schema) if style == "anthropic" else _openai_strict(schema)
        description = DESCRIPTIONS[name]
        if style == "anthropic":
            tool: dict[str, Any] = {"name": name, "description": description, "input_schema": schema}
            if strict:
                tool["strict"] = True
        elif style == "openai":
            function = {"name": name, "description": description, "parameters": schema, "strict": strict}
            tool = {"type": "function", "function": function}
        elif style == "openai-responses":
            tool = {"type": "function", "name": name, "description": description, "parameters": schema}
            tool["strict"] = strict
        else:
            tool = {"name": name, "description": description, "inputSchema": schema}
        definitions.append(tool)
    return definitions
