"""Tools a model can call, and the dispatcher that runs them on the session's behalf.

A host that runs an agent hands the model these tools (:func:`tool_definitions`, in the shape the
Anthropic Messages API, OpenAI's Chat Completions or Responses API, or MCP takes, strict or not)
and runs each tool call the model makes through :func:`dispatch` (or :func:`adispatch` from async
code), which returns a small JSON-able result to append to the conversation:

* ``schedule_followup`` — a turn for this session later: after a ``delay``, ``at`` a time, or on a ``cron``;
* ``watch_event`` — a turn when the host delivers an event key (``deliver_event``);
* ``request_approval`` — a turn when a human answers (the token goes to the host, never to the model);
* ``cancel_wake`` and ``list_wakes`` — this session's own wakes, and no one else's.

The pieces live by concern: :mod:`.schemas` (names, descriptions, JSON Schemas, API shapes),
:mod:`.arguments` (checking arguments against them), :mod:`.dispatch` (running a call),
:mod:`.describe` (what the model is told about a wake), :mod:`.mcp_server` (the same tools over MCP).
This module is their one public face, re-exported as ``django_wakes.tools``.

Importing this module imports no model, so tool definitions can be built before Django is set up;
the engine and the models are imported when a tool runs. See ``docs/agents.md``.
"""

from __future__ import annotations

from .arguments import ToolError
from .describe import ON_TIMEOUT, describe_wake, firing_turn_wake, turn_context
from .dispatch import (
    AGENT_CALL_OPTIONS,
    ENGINE_ERROR_CODES,
    ERROR_CODES,
    MODEL_MESSAGES,
    ApprovalHook,
    adispatch,
    dispatch,
    engine_error,
)
from .schemas import SCHEMAS, STYLES, TOOL_NAMES, Style, tool_definitions

__all__ = [
    "AGENT_CALL_OPTIONS",
    "ENGINE_ERROR_CODES",
    "ERROR_CODES",
    "MODEL_MESSAGES",
    "ON_TIMEOUT",
    "SCHEMAS",
    "STYLES",
    "TOOL_NAMES",
    "ApprovalHook",
    "Style",
    "ToolError",
    "adispatch",
    "describe_wake",
    "dispatch",
    "engine_error",
    "firing_turn_wake",
    "tool_definitions",
    "turn_context",
]
