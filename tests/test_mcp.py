"""The agent tools over MCP, driven by the MCP SDK's own client: in process, over stdio (``manage.py wakes mcp``
in a real subprocess) and over streamable HTTP (``django_wakes:mcp`` served by uvicorn in a real process).

The same five tools and schemas as ``dispatch`` (plus ``request_id`` on the create tools), the same results
as ``structuredContent``, refusals as tool errors (``isError``), approval tokens only to ``WAKES["ON_APPROVAL"]``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp
import pytest
from asgiref.sync import async_to_sync
from mcp.client.streamable_http import streamable_http_client

from django_wakes.agents import mcp_server, tools
from django_wakes.models import State, Wake
from tests import processes
from tests.processes import ROOT, Procs

WS, SESSION = "ws-mcp", "sess-mcp"


async def conversation(client: mcp.Client) -> dict[str, Any]:
    """What a model does through an MCP client: list the tools, call them, retry one, get refused."""
    seen: dict[str, Any] = {}
    listed = await client.list_tools()
    seen["tools"] = {tool.name: tool.input_schema for tool in listed.tools}
    made = await client.call_tool("schedule_followup", {"delay": "3d", "note": "check PR 42", "request_id": "r-1"})
    again = await client.call_tool("schedule_followup", {"delay": "3d", "note": "check PR 42", "request_id": "r-1"})
    seen["made"], seen["again"] = made.structured_content, again.structured_content
    assert not made.is_error and json.loads(made.content[0].text) == made.structured_content
    other = await client.call_tool("schedule_followup", {"delay": "1d", "note": "other", "request_id": "r-1"})
    seen["reused"] = (other.is_error, other.structured_content)
    refused = await client.call_tool("schedule_followup", {"delay": "5s", "note": "too soon"})
    seen["refused"] = (refused.is_error, refused.structured_content)
    asked = await client.call_tool("request_approval", {"prompt": "Deploy v2?", "expires_in": "1d"})
    seen["asked"] = (asked.is_error, asked.structured_content, asked.content[0].text)
    listing = await client.call_tool("list_wakes", {})
    seen["listed"] = listing.structured_content
    cancelled = await client.call_tool("cancel_wake", {"wake_id": made.structured_content["wake_id"]})
    seen["cancelled"] = cancelled.structured_content
    unknown = await client.call_tool("deploy", {})
    seen["unknown"] = (unknown.is_error, unknown.structured_content)
    return seen


def check(seen: dict[str, Any], tokens: list[str]) -> None:
    assert set(seen["tools"]) == set(tools.TOOL_NAMES)
    for definition in tools.tool_definitions("mcp"):
        schema = seen["tools"][definition["name"]]
        extra = {"request_id"} if definition["name"] in mcp_server.CREATE_TOOLS else set()
        assert set(schema["properties"]) == set(definition["inputSchema"]["properties"]) | extra
        assert {k: v for k, v in schema["properties"].items() if k != "request_id"} == definition["inputSchema"][
            "properties"
        ]
    made = seen["made"]
    assert made["note"] == "check PR 42" and made["state"] == "pending" and seen["again"] == made
    reused_error, reused = seen["reused"]
    assert reused_error and reused["error"]["field"] == "request_id"
    refused_error, refused = seen["refused"]
    assert refused_error and refused["error"]["code"] == "too_soon"
    asked_error, asked, text = seen["asked"]
    assert not asked_error and asked["trigger"] == "on_approval"
    assert (
        len(tokens) == 1 and tokens[0] not in text and tokens[0] not in json.dumps(seen)
    )  # the host's, not the model's
    assert [w["wake_id"] for w in seen["listed"]["wakes"]] == [asked["wake_id"], made["wake_id"]]
    assert seen["cancelled"]["cancelled"] is True
    unknown_error, unknown = seen["unknown"]
    assert unknown_error and unknown["error"]["code"] == "unknown_tool"
    rows = dict(Wake.objects.filter(session_id=SESSION, workspace_id=WS).values_list("pk", "state"))
    assert rows == {made["wake_id"]: State.CANCELLED, asked["wake_id"]: State.PENDING}  # one wake per request_id


@pytest.mark.django_db
def test_the_mcp_sdk_client_in_process(clock, spawned, settings):
    tokens: list[str] = []
    settings.WAKES = {**settings.WAKES, "ON_APPROVAL": lambda wake, token: tokens.append(token)}

    async def run() -> dict[str, Any]:
        mcp_server._identity.set((WS, SESSION))
        async with mcp.Client(mcp_server.build_server()) as client:
            return await conversation(client)

    check(async_to_sync(run)(), tokens)  # async_to_sync: the tools' database work runs on this test's connection


def approvals(procs: Procs) -> list[str]:
    path = procs.probe_dir / "approvals.jsonl"
    return [json.loads(line)["token"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.multiprocess
def test_the_mcp_sdk_client_over_stdio_with_manage_py_wakes_mcp(procs):
    server = mcp.StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "wakes", "mcp", "--workspace", WS, "--session", SESSION],
        env=procs.env(WAKES_TEST_MCP="1"),
        cwd=ROOT,
    )

    async def run() -> dict[str, Any]:
        async with mcp.Client(server) as client:
            return await conversation(client)

    check(async_to_sync(run)(), approvals(procs))


@pytest.mark.multiprocess
def test_wakes_mcp_refuses_an_unusable_session(procs):
    done = procs.manage("wakes", "mcp", "--workspace", WS, "--session", "")
    assert done.returncode != 0 and "session_id" in done.stderr


TOKEN = "mcp-test-token-0123456789abcdef"


@pytest.fixture
def mcp_http(procs: Procs) -> Iterator[tuple[str, Procs]]:
    tokens = json.dumps({TOKEN: [WS, SESSION]})
    server, base = processes.asgi_server(procs, WAKES_TEST_MCP="1", WAKES_TEST_MCP_TOKENS=tokens)
    yield f"{base}/wakes/mcp/", procs
    procs.stop(server)


@pytest.mark.multiprocess
def test_the_mcp_sdk_client_over_streamable_http_in_django(mcp_http):
    url, procs = mcp_http

    async def run() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            mcp.Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return await conversation(client)

    check(async_to_sync(run)(), approvals(procs))
    with httpx2.Client(timeout=30) as plain:
        assert plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 401
        assert plain.post(url, headers={"Authorization": "Bearer wrong"}, json={}).status_code == 401
        assert plain.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_the_mcp_endpoint_is_off_until_mcp_auth_is_set(client, settings):
    from django.urls import reverse

    url = reverse("django_wakes:mcp")
    assert client.post(url, "{}", content_type="application/json").status_code == 404
    settings.WAKES = {**settings.WAKES, "MCP_AUTH": lambda request: None}
    response = client.post(url, "{}", content_type="application/json")
    metadata = "http://testserver/wakes/mcp/oauth-protected-resource/"
    assert response.status_code == 401 and response["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}"'
