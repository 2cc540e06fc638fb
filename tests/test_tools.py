"""``django_wakes.agents.tools``: the agent-facing tool definitions and ``dispatch``.

What a model sees (schemas, descriptions, results, error dicts), what each call writes (or, for bad
input, does not write), idempotent retries, session isolation, approval tokens kept from the model,
and a followup travelling through ``run_due`` back to its session through ``SPAWN_TURN``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_wakes
from django_wakes import engine
from django_wakes.agents import tools
from django_wakes.exceptions import ApprovalNotFound, InvalidSchedule, InvalidWake, WakeError
from django_wakes.models import State, TriggerType, Wake

pytestmark = pytest.mark.django_db

WS = "ws-tools"
SESSION = "sess-tools"
NOW = datetime(2030, 1, 1, tzinfo=UTC)  # the clock fixture's time
ALL_TOOLS = tools.TOOL_NAMES

KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "description",
}


def call(name: str, arguments: Any = None, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("workspace_id", WS)
    kwargs.setdefault("session_id", SESSION)
    return tools.dispatch(name, arguments, **kwargs)


def followup(note: str = "check PR 42", delay: str = "3d", **kwargs: Any) -> dict[str, Any]:
    return call("schedule_followup", {"delay": delay, "note": note}, **kwargs)


class Approvals(list):
    """An ``on_approval`` hook that records ``(wake_id, token)``."""

    def __call__(self, wake: Wake, token: str) -> None:
        self.append((wake.pk, token))


# --------------------------------------------------------------------------------------------------
# Definitions
# --------------------------------------------------------------------------------------------------


def test_every_schema_is_a_closed_object_whose_properties_are_typed_and_described():
    assert tools.TOOL_NAMES == ("schedule_followup", "watch_event", "request_approval", "cancel_wake", "list_wakes")
    for definition in tools.tool_definitions():
        schema = definition["input_schema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema) <= KEYWORDS | {"if", "then", "else"}
        assert set(schema["required"]) <= set(schema["properties"])
        assert len(definition["description"]) > 100, definition["name"]
        for field, prop in schema["properties"].items():
            assert set(prop) <= KEYWORDS, (definition["name"], field)
            assert prop["type"] in ("string", "integer"), field
            assert len(prop["description"]) > 20, (definition["name"], field)
            if "enum" in prop:
                assert all(isinstance(v, str) for v in prop["enum"])
            if "format" in prop:
                assert prop["format"] == "date-time"
            for bound in ("minimum", "maximum", "minLength", "maxLength"):
                assert isinstance(prop.get(bound, 0), int)
        json.dumps(definition)  # plain JSON


def test_the_schemas_say_what_the_brief_asks():
    schemas = {d["name"]: d["input_schema"] for d in tools.tool_definitions()}
    assert schemas["schedule_followup"]["required"] == ["note"]
    assert set(schemas["schedule_followup"]["properties"]) == {"delay", "at", "cron", "tz", "note", "expires_in"}
    assert schemas["schedule_followup"]["properties"]["at"]["format"] == "date-time"
    assert schemas["watch_event"]["required"] == ["event_key"]
    assert set(schemas["watch_event"]["properties"]) == {"event_key", "expires_in", "note"}
    assert schemas["request_approval"]["required"] == ["prompt", "expires_in"]
    assert schemas["request_approval"]["properties"]["on_timeout"]["enum"] == ["notify", "reject", "approve"]
    assert schemas["cancel_wake"]["properties"]["wake_id"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 2**63 - 1,
        "description": schemas["cancel_wake"]["properties"]["wake_id"]["description"],
    }
    assert schemas["list_wakes"]["required"] == []
    assert schemas["list_wakes"]["properties"]["limit"]["maximum"] == 50


def test_anthropic_and_openai_shapes():
    anthropic = tools.tool_definitions("anthropic")
    openai = tools.tool_definitions(style="openai")
    assert [d["name"] for d in anthropic] == list(tools.TOOL_NAMES)
    for a, o in zip(anthropic, openai, strict=True):
        assert set(a) == {"name", "description", "input_schema"}
        assert set(o) == {"type", "function"} and o["type"] == "function"
        assert o["function"] == {
            "name": a["name"],
            "description": a["description"],
            "parameters": a["input_schema"],
            "strict": False,
        }


def test_a_host_offers_some_tools_and_gets_fresh_copies():
    chosen = tools.tool_definitions(names=["list_wakes", "schedule_followup"])
    assert [d["name"] for d in chosen] == ["list_wakes", "schedule_followup"]
    chosen[1]["input_schema"]["properties"].clear()
    assert tools.tool_definitions(names=["schedule_followup"])[0]["input_schema"]["properties"]
    with pytest.raises(ValueError, match="unknown tool"):
        tools.tool_definitions(names=["deploy"])
    with pytest.raises(ValueError, match="style"):
        tools.tool_definitions("gemini")  # type: ignore[arg-type]


def test_importing_tools_needs_no_django_setup_and_imports_no_model():
    code = (
        "import sys, django_wakes.agents.tools as t; "
        "assert len(t.tool_definitions('openai')) == 5; "
        "assert 'django_wakes.models' not in sys.modules and 'django_wakes.engine' not in sys.modules; "
        "import django_wakes; assert 'django_wakes.agents.tools' not in django_wakes.__all__"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------------------------------
# schedule_followup
# --------------------------------------------------------------------------------------------------


def test_schedule_followup_with_a_delay(clock, spawned):
    result = followup("check whether PR 42 merged", "3d")
    wake = Wake.objects.get()
    assert result == {
        "wake_id": wake.pk,
        "state": "pending",
        "trigger": "at",
        "fire_at": "2030-01-04T00:00:00+00:00",
        "expires_at": None,
        "note": "check whether PR 42 merged",
    }
    assert wake.kind == "session_turn"
    assert (wake.workspace_id, wake.session_id) == (WS, SESSION)
    assert wake.trigger_type == TriggerType.AT
    assert wake.fire_at == NOW + timedelta(days=3)
    assert wake.intent == {"tool": "schedule_followup", "note": "check whether PR 42 merged"}
    assert wake.idempotency_key is None


def test_schedule_followup_at_a_time_with_an_offset(clock, spawned):
    result = call("schedule_followup", {"at": "2030-01-02T09:30:00+01:00", "note": "standup"})
    assert result["fire_at"] == "2030-01-02T08:30:00+00:00"
    assert Wake.objects.get().fire_at == datetime(2030, 1, 2, 8, 30, tzinfo=UTC)
    assert call("schedule_followup", {"at": "2030-01-02T10:00:00Z", "note": "z"})["fire_at"] == (
        "2030-01-02T10:00:00+00:00"
    )


def test_schedule_followup_on_a_cron_in_a_time_zone(clock, spawned):
    result = call("schedule_followup", {"cron": "0 9 * * MON-FRI", "tz": "Europe/Paris", "note": "triage"})
    wake = Wake.objects.get()
    assert wake.is_recurring and wake.cron == "0 9 * * MON-FRI" and wake.tz == "Europe/Paris"
    assert result["fire_at"] == "2030-01-01T08:00:00+00:00"  # Tuesday 09:00 in Paris
    assert (result["cron"], result["tz"]) == ("0 9 * * MON-FRI", "Europe/Paris")
    assert call("schedule_followup", {"cron": "0 9 * * *", "note": "utc"})["tz"] == "UTC"


def test_schedule_followup_with_an_expiry(clock, spawned):
    result = call("schedule_followup", {"delay": "1h", "expires_in": "2h", "note": "n"})
    assert result["fire_at"] == "2030-01-01T01:00:00+00:00"
    assert result["expires_at"] == "2030-01-01T02:00:00+00:00"


def test_watch_event_then_the_event_reaches_the_session(clock, spawned):
    result = call("watch_event", {"event_key": "ci:pass:abc", "expires_in": "7d", "note": "merge it"})
    wake = Wake.objects.get()
    assert result == {
        "wake_id": wake.pk,
        "state": "pending",
        "trigger": "on_event",
        "fire_at": None,
        "expires_at": "2030-01-08T00:00:00+00:00",
        "note": "merge it",
        "event_key": "ci:pass:abc",
    }
    assert wake.intent == {"tool": "watch_event", "note": "merge it"} and wake.kind == "session_turn"
    assert call("watch_event", {"event_key": "deploy:done"})["expires_at"] is None
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass:abc", payload={"build": 7}) == 1
    django_wakes.run_due()
    assert spawned == [(SESSION, {"trigger": "on_event", "event_key": "ci:pass:abc", "payload": {"build": 7}})]


# --------------------------------------------------------------------------------------------------
# request_approval: the token goes to the host, never to the model
# --------------------------------------------------------------------------------------------------


def test_request_approval_hands_the_token_to_the_host_only(clock, spawned):
    hook = Approvals()
    result = call(
        "request_approval",
        {"prompt": "Deploy v2 to production?", "expires_in": "1d", "note": "deploy if yes"},
        on_approval=hook,
        tool_call_id="toolu_01",
    )
    wake = Wake.objects.get()
    [(wake_id, token)] = hook
    assert wake_id == wake.pk
    assert token not in json.dumps(result)
    assert wake.token_hash not in json.dumps(result)
    assert result == {
        "wake_id": wake.pk,
        "state": "pending",
        "trigger": "on_approval",
        "fire_at": None,
        "expires_at": "2030-01-02T00:00:00+00:00",
        "note": "deploy if yes",
        "prompt": "Deploy v2 to production?",
        "on_timeout": "notify",
    }
    assert wake.on_expiry is None and wake.prompt == "Deploy v2 to production?"
    django_wakes.resolve(token, {"approved": True}, actor="demo")
    django_wakes.run_due()
    assert spawned == [(SESSION, {"trigger": "on_approval", "answer": {"approved": True}, "resolved_by": "demo"})]
    for listed in (call("list_wakes"), call("cancel_wake", {"wake_id": wake.pk})):
        assert token not in json.dumps(listed)


@pytest.mark.parametrize(
    ("on_timeout", "on_expiry"), [("reject", {"approved": False}), ("approve", {"approved": True}), ("notify", None)]
)
def test_on_timeout_becomes_the_answer_on_expiry(clock, spawned, on_timeout, on_expiry):
    args = {"prompt": "Ship?", "expires_in": "1h", "on_timeout": on_timeout}
    result = call("request_approval", args, on_approval=Approvals())
    wake = Wake.objects.get()
    assert wake.on_expiry == on_expiry and result["on_timeout"] == on_timeout
    clock.advance("1h")
    django_wakes.run_due()
    if on_expiry is None:
        assert spawned == [(SESSION, {"trigger": "on_approval", "expired": True})]
    else:
        assert spawned == [(SESSION, {"trigger": "on_approval", "answer": on_expiry, "defaulted": True})]


def test_a_retried_approval_keeps_its_token_calls_no_hook_and_the_model_sees_the_same_result(clock):
    hook = Approvals()
    args = {"prompt": "Deploy?", "expires_in": "1d"}
    first = call("request_approval", args, on_approval=hook, tool_call_id="toolu_9")
    second = call("request_approval", json.dumps(args), on_approval=hook, tool_call_id="toolu_9")
    assert first == second and Wake.objects.count() == 1
    [(_, token)] = hook  # one hook call: the replay rotated nothing and asked the host for nothing
    django_wakes.resolve(token, {"approved": True}, actor="demo")
    third = call("request_approval", args, on_approval=hook, tool_call_id="toolu_9")
    assert third == {**first, "fire_at": "2030-01-01T00:00:00+00:00"}  # when the answer came
    assert len(hook) == 1


def test_request_approval_without_a_host_hook_is_unavailable(clock, caplog):
    result = call("request_approval", {"prompt": "Deploy?", "expires_in": "1d"})
    assert result["error"]["code"] == "unavailable"
    assert Wake.objects.count() == 0
    assert "on_approval" in caplog.text


# --------------------------------------------------------------------------------------------------
# Bad input: an error dict the model can act on, and nothing written
# --------------------------------------------------------------------------------------------------

BAD_CALLS = [
    # (name, arguments, code, field, words in the message)
    ("deploy", {}, "unknown_tool", None, "schedule_followup"),
    (None, {}, "unknown_tool", None, "list_wakes"),
    ("schedule_followup", '{"delay": "3d", "note": ', "invalid_json", None, "JSON"),
    ("schedule_followup", '{"delay": NaN, "note": "x"}', "invalid_json", None, "NaN"),
    ("schedule_followup", "[1, 2]", "invalid_arguments", None, "JSON object"),
    ("schedule_followup", '"3d"', "invalid_arguments", None, "JSON object"),
    ("schedule_followup", b"\xff", "invalid_json", None, "UTF-8"),
    ("schedule_followup", "[" * 100_000, "invalid_arguments", None, "limit"),
    ("schedule_followup", "[" * 60_000, "invalid_json", None, "JSON"),
    ("schedule_followup", {"delay": "3d", "note": "x", "when": "now"}, "invalid_arguments", "when", "accepts"),
    ("list_wakes", {f"x{i}": i for i in range(9)}, "invalid_arguments", "x0", '"x4", ...'),
    ("schedule_followup", {"delay": "3d"}, "invalid_arguments", "note", "missing"),
    ("schedule_followup", {"delay": 3, "note": "x"}, "invalid_arguments", "delay", "string"),
    ("schedule_followup", {"delay": None, "note": "x"}, "invalid_arguments", None, "exactly one"),
    ("schedule_followup", {"delay": "3 days", "note": "x"}, "invalid_arguments", "delay", "1h30m"),
    ("schedule_followup", {"delay": "3d", "note": "   "}, "invalid_arguments", "note", "blank"),
    ("schedule_followup", {"delay": "3d", "note": "a\x00b"}, "invalid_arguments", "note", "NUL"),
    ("schedule_followup", {"delay": "3d", "note": "\ud800"}, "invalid_arguments", "note", "surrogate"),
    ("schedule_followup", {"delay": "3d", "note": "x" * 4001}, "invalid_arguments", "note", "4000"),
    ("schedule_followup", {"delay": "99999999999d", "note": "x"}, "too_far", "delay", "delay"),
    ("schedule_followup", {"note": "x"}, "invalid_arguments", None, "exactly one"),
    ("schedule_followup", {"delay": "1h", "cron": "0 9 * * *", "note": "x"}, "invalid_arguments", None, "exactly one"),
    ("schedule_followup", {"at": "2030-01-02T09:00:00", "note": "x"}, "invalid_arguments", "at", "offset"),
    ("schedule_followup", {"at": "tomorrow 9am", "note": "x"}, "invalid_arguments", "at", "RFC 3339"),
    ("schedule_followup", {"at": "2029-06-01T09:00:00Z", "note": "x"}, "too_soon", "at", "2030-01-01"),
    ("schedule_followup", {"at": "0001-01-01T00:00:00+01:00", "note": "x"}, "too_soon", "at", "past"),
    ("schedule_followup", {"delay": "1h", "tz": "UTC", "note": "x"}, "invalid_arguments", "tz", "cron"),
    ("schedule_followup", {"cron": "0 9 * *", "note": "x"}, "invalid_arguments", "cron", "5-field cron"),
    ("schedule_followup", {"cron": "0 0 9 * * *", "note": "x"}, "invalid_arguments", "cron", "5-field cron"),
    ("schedule_followup", {"cron": "0 9 * * *", "tz": "Mars/Olympus", "note": "x"}, "invalid_arguments", "tz", "Mars"),
    (
        "schedule_followup",
        {"cron": "0 9 * * *", "expires_in": "1d", "note": "x"},
        "invalid_arguments",
        "expires_in",
        "",
    ),
    (
        "schedule_followup",
        {"delay": "2h", "expires_in": "1h", "note": "x"},
        "invalid_arguments",
        "expires_in",
        "longer",
    ),
    ("watch_event", {}, "invalid_arguments", "event_key", "missing"),
    ("watch_event", {"event_key": "k" * 201}, "invalid_arguments", "event_key", "200"),
    ("watch_event", {"event_key": "ci", "expires_in": "0s"}, "invalid_arguments", "expires_in", "longer than zero"),
    ("watch_event", {"event_key": ["a", "b"]}, "invalid_arguments", "event_key", "array"),
    ("request_approval", {"prompt": "Deploy?"}, "invalid_arguments", "expires_in", "missing"),
    (
        "request_approval",
        {"prompt": "?", "expires_in": "1d", "on_timeout": "deny"},
        "invalid_arguments",
        "on_timeout",
        "reject",
    ),
    ("request_approval", {"prompt": "p" * 10_001, "expires_in": "1d"}, "invalid_arguments", "prompt", "10000"),
    ("cancel_wake", {}, "invalid_arguments", "wake_id", "missing"),
    ("cancel_wake", {"wake_id": "12"}, "invalid_arguments", "wake_id", "integer"),
    ("cancel_wake", {"wake_id": True}, "invalid_arguments", "wake_id", "boolean"),
    ("cancel_wake", {"wake_id": 1.5}, "invalid_arguments", "wake_id", "integer"),
    ("cancel_wake", {"wake_id": 0}, "invalid_arguments", "wake_id", "at least 1"),
    ("cancel_wake", {"wake_id": 2**63}, "invalid_arguments", "wake_id", "at most"),
    ("cancel_wake", {"wake_id": 999_999}, "not_found", "wake_id", "list_wakes"),
    ("list_wakes", {"limit": 51}, "invalid_arguments", "limit", "at most 50"),
    ("list_wakes", {"limit": 0}, "invalid_arguments", "limit", "at least 1"),
    ("list_wakes", {"since": "1d"}, "invalid_arguments", "since", "limit"),
]


@pytest.mark.parametrize(("name", "arguments", "code", "field", "words"), BAD_CALLS)
def test_bad_input_is_an_error_dict_and_writes_nothing(clock, name, arguments, code, field, words):
    followup()  # a wake of this session exists: nothing below touches it
    before = list(Wake.objects.values_list("pk", "state", "updated_at"))
    result = call(name, arguments, on_approval=Approvals(), tool_call_id="call_bad")
    assert set(result) == {"error"}
    error = result["error"]
    assert error["code"] == code, error
    assert error["code"] in tools.ERROR_CODES
    assert error.get("field") == field, error
    assert words in error["message"], error
    json.dumps(result)
    assert list(Wake.objects.values_list("pk", "state", "updated_at")) == before


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("schedule_followup", {"delay": "3d", "note": "x", "\ud800": 1}),
        ("schedule_followup", {"delay": "3d", "note": "x", "k\x00" + "y" * 500: 1}),
        ("watch_event", {"event_key": ["\ud800", "\x00"]}),
        ("\ud800\x00", {}),
    ],
)
def test_an_error_never_echoes_what_no_host_can_encode(clock, name, arguments):
    result = call(name, arguments)
    assert result["error"]["code"] in ("invalid_arguments", "unknown_tool")
    text = json.dumps(result, ensure_ascii=False)
    text.encode()  # no lone surrogate
    assert "\x00" not in text and len(text) < 600
    assert result["error"].get("field") in (None, "event_key")


def test_errors_the_engine_raises_map_to_codes_by_exception_class():
    class BudgetExceeded(InvalidWake):
        pass

    class SessionStopped(InvalidWake):
        pass

    class SomethingNew(InvalidSchedule):
        pass

    def code(exc: WakeError) -> tuple[str, str | None]:
        error = tools.engine_error(exc, ["cron", "note"]).as_result()["error"]
        return error["code"], error.get("field")

    assert code(BudgetExceeded("SESSION_MAX_LIVE: 20 live wakes")) == ("budget_exceeded", None)
    assert code(SessionStopped("session 's' is stopped; resume_session() it first")) == ("session_stopped", None)
    message = tools.engine_error(SessionStopped("resume_session() it first"), []).message
    assert "resume_session" not in message and "stopped" in message
    assert code(SomethingNew("cron: no")) == ("invalid_arguments", "cron")
    assert code(InvalidWake("expires_at is not in the future")) == ("invalid_request", None)
    assert code(ApprovalNotFound("no")) == ("not_found", None)
    assert code(WakeError("?")) == ("invalid_request", None)


def test_engine_refusals_reach_the_model_as_error_dicts(clock, monkeypatch):
    def refuse(**kwargs: Any) -> Wake:
        raise InvalidWake("could not create the wake: its idempotency/coalesce slot kept changing hands")

    monkeypatch.setattr(engine, "watch", refuse)
    assert call("watch_event", {"event_key": "ci"}) == {
        "error": {
            "code": "invalid_request",
            "message": "could not create the wake: its idempotency/coalesce slot kept changing hands",
        }
    }


# --------------------------------------------------------------------------------------------------
# Arguments as JSON text, and the host's own mistakes
# --------------------------------------------------------------------------------------------------


def test_arguments_as_the_json_text_a_model_emits(clock):
    result = call("schedule_followup", '{"delay": "90s", "note": "ping"}')
    assert result["fire_at"] == "2030-01-01T00:01:30+00:00"
    assert call("schedule_followup", b'{"delay": "1m", "note": "bytes"}')["state"] == "pending"
    for empty in (None, "", "  ", "{}", {}):
        assert [w["note"] for w in call("list_wakes", empty)["wakes"]] == ["bytes", "ping"]
    assert call("cancel_wake", f'{{"wake_id": {result["wake_id"]}.0}}')["cancelled"] is True


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"workspace_id": ""}, ValueError),
        ({"session_id": None}, ValueError),
        ({"session_id": "s" * 201}, ValueError),
        ({"tool_call_id": ""}, ValueError),
        ({"tool_call_id": 7}, ValueError),
        ({"on_approval": "send"}, TypeError),
    ],
)
def test_host_misconfiguration_raises(clock, kwargs, error):
    with pytest.raises(error):
        call("list_wakes", {}, **kwargs)
    assert Wake.objects.count() == 0


def test_without_spawn_turn_the_host_is_told(clock, settings):
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": None}
    with pytest.raises(ImproperlyConfigured, match="SPAWN_TURN"):
        followup()
    assert Wake.objects.count() == 0


def test_agent_call_options_go_into_every_create(clock, monkeypatch):
    monkeypatch.setitem(tools.AGENT_CALL_OPTIONS, "max_attempts", 2)
    followup()
    call("watch_event", {"event_key": "ci"})
    call("request_approval", {"prompt": "?", "expires_in": "1d"}, on_approval=Approvals())
    assert list(Wake.objects.values_list("max_attempts", flat=True)) == [2, 2, 2]


# --------------------------------------------------------------------------------------------------
# Idempotent retries
# --------------------------------------------------------------------------------------------------


def test_a_retried_tool_call_creates_nothing_twice(clock):
    first = followup(tool_call_id="toolu_A")
    clock.advance("5s")  # the retry comes a little later: still the same follow-up, the same result
    assert followup(tool_call_id="toolu_A") == first
    assert (
        call("schedule_followup", json.dumps({"note": "check PR 42", "delay": "3d"}), tool_call_id="toolu_A") == first
    )
    assert Wake.objects.count() == 1
    wake = Wake.objects.get()
    assert wake.idempotency_key == f"tool:{len(WS)}:{WS}:{len(SESSION)}:{SESSION}:toolu_A"
    assert followup(tool_call_id="toolu_B")["wake_id"] != first["wake_id"]
    assert call("watch_event", {"event_key": "ci"}, tool_call_id="toolu_C") == call(
        "watch_event", {"event_key": "ci"}, tool_call_id="toolu_C"
    )
    assert Wake.objects.count() == 3


def test_a_tool_call_id_reused_for_another_call_is_a_host_error(clock):
    followup(tool_call_id="call_0")
    with pytest.raises(ValueError, match="already used"):
        followup("another note", tool_call_id="call_0")
    with pytest.raises(ValueError, match="already used"):
        call("watch_event", {"event_key": "ci"}, tool_call_id="call_0")
    assert Wake.objects.count() == 1


def test_an_approvals_call_id_reused_for_another_call_keeps_the_first_token(clock):
    hook = Approvals()
    call("request_approval", {"prompt": "Deploy?", "expires_in": "1d"}, on_approval=hook, tool_call_id="call_1")
    with pytest.raises(ValueError, match="already used"):
        call("request_approval", {"prompt": "Delete?", "expires_in": "1d"}, on_approval=hook, tool_call_id="call_1")
    [(_, token)] = hook
    assert Wake.objects.get().token_hash == engine.hash_token(token)


def test_the_same_tool_call_id_in_another_session_or_workspace_is_another_call(clock):
    mine = followup(tool_call_id="call_0")
    theirs = followup(tool_call_id="call_0", session_id="sess-other")
    elsewhere = followup(tool_call_id="call_0", workspace_id="ws-other")
    assert len({mine["wake_id"], theirs["wake_id"], elsewhere["wake_id"]}) == 3


@pytest.mark.parametrize("attacker_args", [{}, {"prompt": "Anything at all?", "note": "mine"}])
def test_a_colon_in_a_session_id_never_reaches_another_sessions_approval(clock, spawned, attacker_args):
    """Session ``a:b`` + call ``c`` and session ``a`` + call ``b:c`` once made one key: the attacker got
    the victim's wake (note and prompt), and its dispatch rotated the victim's token into its own hook."""
    victim, attacker = Approvals(), Approvals()
    args = {"prompt": "Wire 10k to ACME?", "expires_in": "1d", "note": "victim's private note"}
    theirs = call("request_approval", args, session_id="a:b", tool_call_id="c", on_approval=victim)
    mine = call("request_approval", {**args, **attacker_args}, session_id="a", tool_call_id="b:c", on_approval=attacker)
    assert mine["wake_id"] != theirs["wake_id"]
    assert Wake.objects.get(pk=mine["wake_id"]).session_id == "a"
    [(victim_wake, victim_token)] = victim
    [(attacker_wake, _)] = attacker
    assert victim_wake == theirs["wake_id"] and attacker_wake == mine["wake_id"]
    assert Wake.objects.get(pk=theirs["wake_id"]).token_hash == engine.hash_token(victim_token)  # not rotated
    django_wakes.resolve(victim_token, {"approved": True}, actor="demo")  # the victim's link still works
    django_wakes.run_due()
    assert ("a:b", {"trigger": "on_approval", "answer": {"approved": True}, "resolved_by": "demo"}) in spawned


@pytest.mark.parametrize(("session_id", "tool_call_id"), [("user", "42:functions.x:0"), ("user:42:functions.x", "0")])
def test_keys_of_colon_separated_ids_are_all_distinct(clock, session_id, tool_call_id):
    followup(session_id="user:42", tool_call_id="functions.x:0")
    created = followup("another note", session_id=session_id, tool_call_id=tool_call_id)
    assert Wake.objects.filter(pk=created["wake_id"], session_id=session_id).exists()
    assert len(set(Wake.objects.values_list("idempotency_key", flat=True))) == Wake.objects.count()


def test_a_long_tool_call_id_is_hashed_into_a_storable_key(clock):
    result = followup(tool_call_id="x" * 500)
    assert followup(tool_call_id="x" * 500) == result
    key = Wake.objects.get().idempotency_key
    assert key is not None and key.startswith("tool:sha256:") and len(key) <= 200


# --------------------------------------------------------------------------------------------------
# cancel_wake and list_wakes: this session's wakes only
# --------------------------------------------------------------------------------------------------


def test_cancel_wake_cancels_and_a_retry_answers_the_same(clock, spawned):
    created = followup()
    first = call("cancel_wake", {"wake_id": created["wake_id"]})
    assert first == {**created, "state": "cancelled", "cancelled": True}
    assert call("cancel_wake", {"wake_id": created["wake_id"]}) == first
    assert Wake.objects.get().state == State.CANCELLED
    clock.advance("3d")
    django_wakes.run_due()
    assert spawned == []


def test_cancel_wake_after_it_fired_says_so(clock, spawned):
    created = followup(delay="1m")
    clock.advance("1m")
    django_wakes.run_due()
    result = call("cancel_wake", {"wake_id": created["wake_id"]})
    assert result == {**created, "state": "fired", "cancelled": False, "detail": "it already fired"}


@pytest.mark.parametrize(
    "other",
    [{"session_id": "sess-other"}, {"workspace_id": "ws-other"}, {"workspace_id": "ws-other", "session_id": "x"}],
)
def test_another_sessions_wake_is_not_found_and_untouched(clock, other):
    theirs = followup(**other)
    result = call("cancel_wake", {"wake_id": theirs["wake_id"]})
    assert result["error"]["code"] == "not_found"
    assert str(theirs["wake_id"]) in result["error"]["message"]
    assert Wake.objects.get(pk=theirs["wake_id"]).state == State.PENDING
    assert call("list_wakes")["wakes"] == []
    assert [w["wake_id"] for w in call("list_wakes", **other)["wakes"]] == [theirs["wake_id"]]


def test_host_wakes_of_other_kinds_are_not_the_models(clock, sinks):
    sinks("billing.remind")
    host = django_wakes.schedule(workspace_id=WS, session_id=SESSION, kind="billing.remind", delay="1d")
    assert call("cancel_wake", {"wake_id": host.pk})["error"]["code"] == "not_found"
    assert call("list_wakes")["wakes"] == []


def test_cancel_wake_stops_a_whole_recurring_series_by_any_of_its_ids(clock, spawned):
    first = call("schedule_followup", {"cron": "0 9 * * *", "note": "daily"})
    clock.set(datetime(2030, 1, 1, 9, tzinfo=UTC))
    django_wakes.run_due()
    [(session, _)] = spawned
    upcoming = call("list_wakes")["wakes"]
    assert [w["fire_at"] for w in upcoming] == ["2030-01-02T09:00:00+00:00"]
    assert upcoming[0]["wake_id"] != first["wake_id"] and upcoming[0]["note"] == "daily"
    result = call("cancel_wake", {"wake_id": first["wake_id"]})
    assert result["cancelled"] is True and result["wake_id"] == upcoming[0]["wake_id"]
    assert result["state"] == "cancelled"
    assert call("cancel_wake", {"wake_id": first["wake_id"]}) == result
    assert call("list_wakes")["wakes"] == []
    clock.set(datetime(2030, 1, 5, tzinfo=UTC))
    django_wakes.run_due()
    assert len(spawned) == 1


def test_list_wakes_soonest_first_live_only_with_a_limit(clock, spawned):
    later = followup("later", "2d")
    watch = call("watch_event", {"event_key": "ci"})  # no expiry: no due time, listed last
    soon = followup("soon", "1h")
    gone = followup("gone", "1d")
    call("cancel_wake", {"wake_id": gone["wake_id"]})
    approval = call("request_approval", {"prompt": "?", "expires_in": "1d"}, on_approval=Approvals())
    listed = call("list_wakes")
    assert listed == {"wakes": [soon, approval, later, watch], "more": False, "now": "2030-01-01T00:00:00+00:00"}
    assert call("list_wakes", {"limit": 2}) == {"wakes": [soon, approval], "more": True, "now": listed["now"]}
    clock.advance("1h")
    django_wakes.run_due()
    assert [w["note"] for w in call("list_wakes")["wakes"]] == [None, "later", None]


def test_list_wakes_shows_a_long_prompt_shortened(clock):
    call("request_approval", {"prompt": "p" * 5000, "expires_in": "1d"}, on_approval=Approvals())
    [listed] = call("list_wakes")["wakes"]
    assert len(listed["prompt"]) == 200 and listed["prompt"].endswith("...")


# --------------------------------------------------------------------------------------------------
# Firing: the turn comes back to the session with the note
# --------------------------------------------------------------------------------------------------


def test_a_followup_fired_by_run_due_reaches_the_session(clock, spawned):
    followup("check whether PR 42 merged", "3d")
    clock.advance("3d")
    assert django_wakes.run_due().fired == 1
    assert spawned == [(SESSION, {"trigger": "at"})]


@pytest.fixture
def turns(settings: Any) -> list[tuple[str, dict[str, Any]]]:
    """Point ``SPAWN_TURN`` at a hook that records ``(session_id, turn_context(session_id, result, ...))``."""
    recorded: list[tuple[str, dict[str, Any]]] = []

    def spawn_turn(session_id: str, result: dict[str, Any], *, workspace_id: str) -> None:
        recorded.append((session_id, tools.turn_context(session_id, result, workspace_id=workspace_id)))

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": spawn_turn}
    return recorded


def test_spawn_turn_learns_the_note_through_turn_context(clock, turns):
    created = followup("check whether PR 42 merged", "3d")
    clock.advance("3d")
    assert django_wakes.run_due().fired == 1
    assert turns == [(SESSION, {"wake": {**created, "state": "firing"}, "result": {"trigger": "at"}})]
    outside_a_turn = tools.turn_context(SESSION, {"trigger": "at"}, workspace_id=WS)
    assert outside_a_turn == {"wake": None, "result": {"trigger": "at"}}


def test_followups_due_at_one_instant_each_bring_their_own_note(clock, turns):
    """A session's turn wakes share a lane (the engine's default), so one fires at a time and is found."""
    created = followup("first", "3d")
    other = followup("second, same instant", "3d")
    elsewhere = followup("another session", "3d", session_id="sess-2")
    clock.advance("3d")
    while django_wakes.run_due().fired:
        pass
    assert len(turns) == 3
    by_note = {context["wake"]["note"]: (session, context["wake"]["wake_id"]) for session, context in turns}
    assert by_note == {
        "first": (SESSION, created["wake_id"]),
        "second, same instant": (SESSION, other["wake_id"]),
        "another session": ("sess-2", elsewhere["wake_id"]),
    }
