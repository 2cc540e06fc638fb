"""The tool definitions against the providers' own SDKs, and the arguments rules the schemas state.

Every style and strictness is checked with the SDK's own types (``anthropic.types.ToolParam``, OpenAI's
``ChatCompletionFunctionToolParam`` and Responses ``FunctionToolParam``, ``mcp.types.Tool``) and strict
helpers (OpenAI's strict-schema pass and ``parse()``, Anthropic's ``transform_schema``); the SDK clients
run for real against a stub transport (``httpx2.MockTransport``: only the network is replaced).
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timedelta
from typing import Any

import anthropic
import httpx2
import jsonschema
import mcp.types
import openai
import pydantic
import pytest
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam

from django_wakes.agents import tools
from django_wakes.models import Wake

pytestmark = pytest.mark.django_db

WS, SESSION = "ws-schemas", "sess-schemas"
# OpenAI Structured Outputs, "Supported schemas": the keywords a strict function schema may use.
OPENAI_STRICT_KEYWORDS = {
    "type",
    "description",
    "enum",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "properties",
    "required",
    "additionalProperties",
}


def call(name: str, arguments: Any, **kwargs: Any) -> dict[str, Any]:
    return tools.dispatch(name, arguments, workspace_id=WS, session_id=SESSION, **kwargs)


# --------------------------------------------------------------------------------------------------
# Shapes and strict modes, by the SDKs' own rules
# --------------------------------------------------------------------------------------------------

SDK_TYPES = {
    "anthropic": anthropic.types.ToolParam,
    "openai": ChatCompletionFunctionToolParam,
    "openai-responses": FunctionToolParam,
}


@pytest.mark.parametrize("strict", [False, True], ids=["plain", "strict"])
@pytest.mark.parametrize("style", list(SDK_TYPES))
def test_every_style_is_the_sdks_own_tool_type(style, strict):
    adapter = pydantic.TypeAdapter(SDK_TYPES[style])
    definitions = tools.tool_definitions(style, strict=strict)
    assert len(definitions) == 5
    for definition in definitions:
        assert adapter.validate_python(definition, strict=True) == definition
    if style == "openai-responses":  # that API is strict unless told otherwise: always said
        assert all(d["strict"] is strict for d in definitions)


def test_the_mcp_style_is_an_mcp_tool():
    for definition in tools.tool_definitions("mcp"):
        tool = mcp.types.Tool.model_validate(definition)
        assert tool.input_schema == definition["inputSchema"]
    with pytest.raises(ValueError, match="strict"):
        tools.tool_definitions("mcp", strict=True)


def test_the_full_schemas_are_valid_json_schema_in_both_drafts_without_a_top_level_combinator():
    for definition in tools.tool_definitions("anthropic"):
        schema = definition["input_schema"]
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft7Validator.check_schema(schema)
        assert not {"oneOf", "anyOf", "allOf"} & set(schema)  # the Anthropic API refuses them at the top level


def walk(schema: dict[str, Any]):
    yield schema
    for prop in schema.get("properties", {}).values():
        yield from walk(prop)


@pytest.mark.parametrize("style", ["openai", "openai-responses"])
def test_openai_strict_schemas_meet_the_strict_rules(style):
    for definition in tools.tool_definitions(style, strict=True):
        schema = definition["function"]["parameters"] if style == "openai" else definition["parameters"]
        assert (definition["function"] if style == "openai" else definition)["strict"] is True
        assert schema["required"] == list(schema["properties"])  # every property required
        assert schema["additionalProperties"] is False
        for node in walk(schema):
            assert set(node) <= OPENAI_STRICT_KEYWORDS, set(node) - OPENAI_STRICT_KEYWORDS
        full = tools.SCHEMAS[definition["name"] if style == "openai-responses" else definition["function"]["name"]]
        for name, prop in schema["properties"].items():
            nullable = isinstance(prop["type"], list)
            assert nullable == (name not in full["required"]), name  # optional ones, and only they, nullable
        # The SDK's own strict pass (what to_strict_json_schema runs) finds nothing to change.
        copied = copy.deepcopy(schema)
        assert _ensure_strict_json_schema(copied, path=(), root=copied) == schema


def test_anthropic_strict_schemas_are_what_the_sdks_transform_schema_keeps():
    for definition in tools.tool_definitions("anthropic", strict=True):
        assert definition["strict"] is True
        assert anthropic.transform_schema(definition["input_schema"]) == definition["input_schema"]
    # The full schemas are not (patterns, lengths, conditionals): strict mode needs its own.
    full = tools.tool_definitions("anthropic")[0]["input_schema"]
    assert anthropic.transform_schema(full) != full


class Stub:
    """A stub transport: records each request's JSON body and answers with the next canned reply."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.replies.pop(0))

    def client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self))


def chat_reply(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call_ = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    message = {"role": "assistant", "content": None, "tool_calls": [call_]}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
    }


STRICT_FOLLOWUP = {"delay": "3d", "at": None, "cron": None, "tz": None, "note": "check PR 42", "expires_in": None}


def test_the_openai_sdk_auto_parses_strict_tool_calls_and_dispatch_reads_their_nulls(clock, spawned):
    stub = Stub(chat_reply("schedule_followup", STRICT_FOLLOWUP))
    client = openai.OpenAI(api_key="sk-test", base_url="http://stub.invalid/v1", http_client=stub.client())
    completion = client.chat.completions.parse(
        model="gpt-test",
        messages=[{"role": "user", "content": "check PR 42 in 3 days"}],
        tools=tools.tool_definitions("openai", strict=True),
    )
    assert stub.requests[0]["tools"] == tools.tool_definitions("openai", strict=True)
    tool_call = completion.choices[0].message.tool_calls[0]
    assert tool_call.function.parsed_arguments == STRICT_FOLLOWUP
    result = call(tool_call.function.name, tool_call.function.arguments, tool_call_id=tool_call.id)
    assert result["fire_at"] == "2030-01-04T00:00:00+00:00" and result["note"] == "check PR 42"
    # The same call without its nulls is the same call (a retry cannot tell them apart).
    assert call("schedule_followup", {"delay": "3d", "note": "check PR 42"}, tool_call_id=tool_call.id) == result
    assert Wake.objects.count() == 1
    with pytest.raises(ValueError, match="is not strict"):  # the SDK's own check refuses the plain ones
        client.chat.completions.parse(
            model="gpt-test", messages=[{"role": "user", "content": "x"}], tools=tools.tool_definitions("openai")
        )


def test_the_openai_responses_sdk_parses_the_flat_strict_tools(clock, spawned):
    arguments = {"event_key": "ci:pass:abc", "expires_in": "7d", "note": None}
    reply = {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "status": "completed",
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_7",
                "name": "watch_event",
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        ],
    }
    stub = Stub(reply)
    client = openai.OpenAI(api_key="sk-test", base_url="http://stub.invalid/v1", http_client=stub.client())
    response = client.responses.parse(
        model="gpt-test", input="wait for CI", tools=tools.tool_definitions("openai-responses", strict=True)
    )
    assert stub.requests[0]["tools"] == tools.tool_definitions("openai-responses", strict=True)
    item = response.output[0]
    assert item.parsed_arguments == arguments
    result = call(item.name, item.arguments, tool_call_id=item.call_id)
    assert (result["event_key"], result["note"], result["expires_at"]) == (
        "ci:pass:abc",
        None,
        "2030-01-08T00:00:00+00:00",
    )


# --------------------------------------------------------------------------------------------------
# Arguments: null is absent, RFC 3339 both ways, the codes and words a model reads
# --------------------------------------------------------------------------------------------------


def test_null_means_left_out_for_every_optional_argument_and_missing_for_a_required_one(clock, spawned):
    approvals: list[Any] = []
    nulls = {
        "schedule_followup": {"delay": "1h", "note": "n", "at": None, "cron": None, "tz": None, "expires_in": None},
        "watch_event": {"event_key": "k", "expires_in": None, "note": None},
        "request_approval": {"prompt": "ok?", "expires_in": "1d", "on_timeout": None, "note": None},
        "list_wakes": {"limit": None},
    }
    for name, arguments in nulls.items():
        assert "error" not in call(name, arguments, on_approval=lambda w, t: approvals.append(t)), name
    listed = {w["trigger"]: w for w in call("list_wakes", {"limit": None})["wakes"]}
    assert listed["on_approval"]["on_timeout"] == "notify" and listed["on_event"]["expires_at"] is None
    refused = call("watch_event", {"event_key": None})["error"]
    assert (refused["code"], refused["field"]) == ("invalid_arguments", "event_key")
    assert "missing" in refused["message"]


ACCEPTED_TIMES = {
    "2030-01-04T09:00:00Z": "2030-01-04T09:00:00+00:00",
    "2030-01-04t09:00:00z": "2030-01-04T09:00:00+00:00",  # RFC 3339 allows lower case T and Z
    "2030-01-04T10:30:00+01:30": "2030-01-04T09:00:00+00:00",
    "2030-01-03T23:00:00-10:00": "2030-01-04T09:00:00+00:00",
    "2030-01-04T09:00:00.123456789Z": "2030-01-04T09:00:00.123456+00:00",
    "2030-06-30T23:59:60Z": "2030-07-01T00:00:00+00:00",  # a leap second: the next second, as POSIX counts
    "2032-02-29T00:00:00Z": "2032-02-29T00:00:00+00:00",
}
REFUSED_TIMES = [
    "2030-01-04 09:00:00+00:00",  # a space for T
    "2030-01-04T09:00+00:00",  # no seconds
    "20300104T090000Z",  # ISO 8601 basic format
    "2030-W01-5T09:00:00Z",  # a week date
    "2030-004T09:00:00Z",  # an ordinal date
    "2030-01-04T09:00:00",  # no offset
    "2030-01-04T09:00:00+0100",  # an offset without colon
    "2030-01-04T09:00:00+24:00",
    "2030-02-29T00:00:00Z",  # 2030 is no leap year
    "2030-04-31T00:00:00Z",
    "2030-01-04T24:00:00Z",
    "2030-01-04",
]


@pytest.mark.parametrize(("text", "fires"), list(ACCEPTED_TIMES.items()))
def test_every_rfc3339_date_time_is_accepted(clock, spawned, settings, text, fires):
    budgets(settings, SESSION_MAX_HORIZON=None)
    result = call("schedule_followup", {"at": text, "note": "n"})
    assert result.get("fire_at") == fires, result
    assert jsonschema.Draft202012Validator(tools.SCHEMAS["schedule_followup"]).is_valid({"at": text, "note": "n"})


@pytest.mark.parametrize("text", REFUSED_TIMES)
def test_nothing_but_rfc3339_is_accepted(clock, spawned, text):
    result = call("schedule_followup", {"at": text, "note": "n"})
    assert (result["error"]["code"], result["error"]["field"]) == ("invalid_arguments", "at"), result
    assert Wake.objects.count() == 0
    schema = tools.SCHEMAS["schedule_followup"]
    checker = jsonschema.FormatChecker()
    checker.checks("date-time", raises=ValueError)(_calendar_date_time)
    assert not jsonschema.Draft202012Validator(schema, format_checker=checker).is_valid({"at": text, "note": "n"})


def _calendar_date_time(text: str) -> bool:
    """The calendar half of ``format: date-time`` (the pattern is the other): a real day of a real month."""
    datetime(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    return True


def budgets(settings: Any, **limits: Any) -> None:
    """Set ``WAKES["BUDGETS"]`` for this test, keeping the rest of ``WAKES`` (``SPAWN_TURN`` included)."""
    settings.WAKES = {**settings.WAKES, "BUDGETS": limits}


@pytest.mark.parametrize(
    ("arguments", "code", "field", "words"),
    [
        ({"delay": "5s", "note": "n"}, "too_soon", "delay", "at least 10 seconds from now"),
        ({"at": "2030-01-01T00:00:05Z", "note": "n"}, "too_soon", "at", "at least 10 seconds from now"),
        ({"at": "2029-12-31T00:00:00Z", "note": "n"}, "too_soon", "at", "not in the future"),
        ({"delay": "91d", "note": "n"}, "too_far", "delay", "within 90 days from now"),
        ({"cron": "0 0 29 2 *", "note": "n"}, "too_far", "cron", "within 90 days from now"),  # next: 2032
        ({"delay": "99999999w", "note": "n"}, "too_far", "delay", "year 9999"),
        ({"delay": "9999999999w", "note": "n"}, "too_far", "delay", "year 9999"),  # too long for a timedelta
    ],
)
def test_a_time_out_of_bounds_is_too_soon_or_too_far_in_plain_units(clock, spawned, arguments, code, field, words):
    error = call("schedule_followup", arguments)["error"]
    assert (error["code"], error.get("field")) == (code, field), error
    assert words in error["message"], error
    assert not re.search(r"(^|\s)\d+:\d\d:\d\d(\s|$)|day,", error["message"]), error  # no str(timedelta)
    assert Wake.objects.count() == 0


def test_budget_exceeded_is_only_for_budgets_and_speaks_plain_units(clock, spawned, settings):
    budgets(settings, SESSION_MAX_LIVE=1, SESSION_COOLDOWN="90s")
    assert "error" not in call("schedule_followup", {"delay": "1h", "note": "first"})
    error = call("schedule_followup", {"delay": "1h", "note": "second"})["error"]
    assert error["code"] == "budget_exceeded" and "less than 1 minute 30 seconds ago" in error["message"]
    clock.advance(timedelta(minutes=2))
    error = call("schedule_followup", {"delay": "1h", "note": "second"})["error"]
    assert error["code"] == "budget_exceeded" and "1 live wakes; at most 1" in error["message"]
    assert Wake.objects.count() == 1
