"""The worked loops of docs/agents.md, run as written there, with the providers' SDKs against a stub transport.

Each loop's code block is read out of the doc and executed; the SDK clients (``anthropic``, ``openai``)
are real and talk to ``httpx2.MockTransport``, which plays the model with canned replies and records
what the SDK sent. The MCP loop talks to the MCP server in process through the MCP SDK's own client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import mcp
import openai
import pytest
from asgiref.sync import async_to_sync

import django_wakes
from django_wakes.agents import mcp_server, tools
from django_wakes.models import Wake

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"
WS, SESSION = "ws-loops", "sess-loops"


def doc_block(heading: str) -> dict[str, Any]:
    """Execute the first Python block after ``### heading`` in docs/agents.md; return what it defined."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(f"### {heading}\n") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, heading
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), f"docs/agents.md ({heading})", "exec"), namespace)  # noqa: S102 - our own doc
    return namespace


class Model:
    """The model behind the stub transport: canned replies in order, every request body recorded."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.replies.pop(0))


def claude(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def said(text: str) -> dict[str, Any]:
    return claude([{"type": "text", "text": text}], "end_turn")


FOLLOWUP = {"delay": "3d", "note": "check whether PR 42 merged"}


def test_the_anthropic_messages_loop(clock, settings):
    loop = doc_block("The Anthropic Messages API")
    model = Model(
        claude([use("toolu_1", "schedule_followup", {"delay": "3d"})], "tool_use"),  # no note: refused
        claude([use("toolu_2", "schedule_followup", FOLLOWUP)], "tool_use"),
        said("I will check back in 3 days."),
        said("PR 42 is merged."),  # the turn the wake starts
    )
    client = anthropic.Anthropic(
        api_key="sk-test",
        base_url="http://stub.invalid",
        http_client=httpx2.Client(transport=httpx2.MockTransport(model)),
    )
    conversations = {SESSION: [{"role": "user", "content": "Watch PR 42 for me"}]}

    def resume_session(session_id: str, result: dict[str, Any], *, workspace_id: str) -> None:  # as the doc shows
        context = tools.turn_context(session_id, result, workspace_id=workspace_id)
        conversations[session_id].append({"role": "user", "content": "[wake] " + json.dumps(context)})
        loop["claude_turn"](client, conversations[session_id], workspace_id=WS, session_id=session_id)

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": resume_session}
    last = loop["claude_turn"](client, conversations[SESSION], workspace_id=WS, session_id=SESSION)
    assert last.content[0].text == "I will check back in 3 days."
    assert model.requests[0]["tools"] == tools.tool_definitions("anthropic")
    (refusal,) = model.requests[1]["messages"][-1]["content"]
    assert refusal["tool_use_id"] == "toolu_1" and refusal["is_error"] is True
    assert json.loads(refusal["content"])["error"]["field"] == "note"
    (made,) = model.requests[2]["messages"][-1]["content"]
    created = json.loads(made["content"])
    assert made["is_error"] is False and created["fire_at"] == "2030-01-04T00:00:00+00:00"
    assert model.requests[2]["messages"][3]["content"][0] == {  # the assistant turn, sent back as the SDK read it
        "type": "tool_use",
        "id": "toolu_2",
        "name": "schedule_followup",
        "input": FOLLOWUP,
    }

    clock.advance("3d")
    assert django_wakes.run_due().fired == 1
    woken = model.requests[3]["messages"][-1]["content"]
    assert woken.startswith("[wake] ") and json.loads(woken[7:])["wake"]["wake_id"] == created["wake_id"]
    assert model.replies == [] and Wake.objects.get().state == "fired"


def test_the_openai_responses_loop(clock, spawned):
    loop = doc_block("The OpenAI Responses API")
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "watch_event",
        "arguments": json.dumps({"event_key": "ci:pass:abc123", "expires_in": "7d", "note": "merge it"}),
        "status": "completed",
    }
    text = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Waiting for CI.", "annotations": []}],
    }

    def response(item: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 0,
            "model": "gpt-5",
            "status": "completed",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [item],
        }

    model = Model(response(call), response(text))
    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://stub.invalid/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(model)),
    )
    items: list[Any] = [{"role": "user", "content": "Merge PR 42 when CI passes"}]
    last = loop["gpt_turn"](client, items, workspace_id=WS, session_id=SESSION)
    assert last.output[0].content[0].text == "Waiting for CI."
    assert model.requests[0]["tools"] == tools.tool_definitions("openai-responses", strict=True)
    sent = model.requests[1]["input"]
    assert sent[1]["type"] == "function_call" and sent[1]["call_id"] == "call_1"
    output = json.loads(sent[2]["output"])
    assert sent[2]["call_id"] == "call_1" and output["event_key"] == "ci:pass:abc123"
    assert output["expires_at"] == "2030-01-08T00:00:00+00:00" and output["note"] == "merge it"
    assert Wake.objects.get().event_key == "ci:pass:abc123"


def test_the_mcp_client_loop(clock, spawned):
    loop = doc_block("An MCP client")
    model = Model(
        claude(
            [
                use("toolu_1", "schedule_followup", {**FOLLOWUP, "request_id": "pr-42-followup"}),
                use("toolu_2", "schedule_followup", {"delay": "1s", "note": "too soon"}),
            ],
            "tool_use",
        ),
        said("I will check back in 3 days."),
    )
    client = anthropic.AsyncAnthropic(
        api_key="sk-test",
        base_url="http://stub.invalid",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(model)),
    )
    messages: list[Any] = [{"role": "user", "content": "Watch PR 42 for me"}]

    async def run() -> Any:
        mcp_server._identity.set((WS, SESSION))
        async with mcp.Client(mcp_server.build_server()) as server:
            return await loop["claude_turn_over_mcp"](client, server, messages)

    last = async_to_sync(run)()
    assert last.content[0].text == "I will check back in 3 days."
    offered = {tool["name"]: tool for tool in model.requests[0]["tools"]}
    assert offered["list_wakes"]["input_schema"] == tools.SCHEMAS["list_wakes"]
    assert "request_id" in offered["schedule_followup"]["input_schema"]["properties"]
    made, refused = model.requests[1]["messages"][-1]["content"]
    assert made["is_error"] is False and json.loads(made["content"])["note"] == FOLLOWUP["note"]
    assert refused["is_error"] is True and json.loads(refused["content"])["error"]["code"] == "too_soon"
    assert Wake.objects.get().intent["note"] == FOLLOWUP["note"]
