"""The MCP endpoint's border (issue 26), driven by the MCP SDK's own streamable-HTTP client against uvicorn.

``Origin`` is checked (403 for a foreign page, as the transport spec requires against DNS rebinding), the
401 names the OAuth protected resource metadata (RFC 9728) where the SDK's OAuth client starts discovery,
and a host error reaches the client as a generic error with an id, its exception only in the server's log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import mcp
import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import extract_resource_metadata_from_www_auth
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata, OAuthToken, ProtectedResourceMetadata
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from mcp.shared.exceptions import MCPError

from tests import processes
from tests.processes import Procs

WS, SESSION = "ws-mcp-border", "sess-border"
TOKEN = "mcp-border-token-0123456789abcdef"
LISTED = "https://agents.example.com"
EVIL = "https://evil.example"


@pytest.fixture
def server(procs: Procs) -> Iterator[tuple[str, str, Procs, Any]]:
    """uvicorn serving the testproject: one bearer token, one listed origin, an authorization server, no SPAWN_TURN."""
    env = {
        "WAKES_TEST_MCP": "1",
        "WAKES_TEST_MCP_TOKENS": json.dumps({TOKEN: [WS, SESSION]}),
        "WAKES_TEST_MCP_ALLOWED_ORIGINS": json.dumps([LISTED]),
        "WAKES_TEST_NO_SPAWN_TURN": "1",
    }
    # The authorization server is this same host (so the SDK's discovery requests are seen in its log).
    proc, base = processes.asgi_server(procs, **env, WAKES_TEST_MCP_AUTHORIZATION_SERVERS='["http://as.invalid/"]')
    yield base, f"{base}/wakes/mcp/", procs, proc
    procs.stop(proc)


def ping(url: str, **headers: str) -> int:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    accept = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {TOKEN}"}
    with httpx2.Client(timeout=30) as http:
        return int(http.post(url, json=body, headers={**accept, **headers}).status_code)


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, as the SDK's task groups raise them."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def list_tools(url: str, **headers: str) -> list[str]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}", **headers}, timeout=60) as http,
        mcp.Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return [tool.name for tool in (await client.list_tools()).tools]


@pytest.mark.multiprocess
def test_a_foreign_origin_gets_403_and_the_hosts_own_a_listed_one_or_none_pass(server):
    base, url, procs, proc = server
    assert ping(url, Origin=EVIL) == 403  # was 200 with a valid token
    assert ping(url, Origin="null") == 403
    assert ping(url, Origin=base.replace("127.0.0.1", "localhost")) == 403  # another host name, same machine
    assert ping(url, Origin=base) == 200 and ping(url, Origin=LISTED) == 200 and ping(url) == 200
    with pytest.raises(
        BaseExceptionGroup
    ) as refused:  # the SDK client itself, as a page on evil.example would drive it
        async_to_sync(list_tools)(url, Origin=EVIL)
    assert [type(e) for e in leaves(refused.value)] == [MCPError]  # "Server returned an error response"
    assert "request_approval" in async_to_sync(list_tools)(url)  # no Origin: a non-browser client
    assert "request_approval" in async_to_sync(list_tools)(url, Origin=LISTED)


@pytest.mark.multiprocess
def test_the_401_leads_the_sdks_oauth_client_to_the_protected_resource_metadata(server):
    base, url, procs, proc = server
    with httpx2.Client(timeout=30) as http:
        challenge = http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert challenge.status_code == 401
        metadata_url = extract_resource_metadata_from_www_auth(challenge)
        assert metadata_url == f"{base}/wakes/mcp/oauth-protected-resource/"
        answer = http.get(metadata_url)
    assert answer.status_code == 200
    metadata = ProtectedResourceMetadata.model_validate_json(answer.content)
    assert check_resource_allowed(resource_url_from_server_url(url), str(metadata.resource))
    assert [str(s) for s in metadata.authorization_servers] == ["http://as.invalid/"]

    class Memory:
        async def get_tokens(self) -> OAuthToken | None:
            return None

        async def set_tokens(self, tokens: OAuthToken) -> None: ...

        async def get_client_info(self) -> Any:
            return None

        async def set_client_info(self, client_info: Any) -> None: ...

    asked: list[str] = []

    async def record(request: httpx2.Request) -> None:
        asked.append(f"{request.method} {request.url}")

    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(redirect_uris=["http://127.0.0.1:1/callback"]),
        storage=Memory(),
    )

    async def run() -> None:
        async with (
            httpx2.AsyncClient(auth=provider, timeout=30, event_hooks={"request": [record]}) as http,
            mcp.Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as stopped:  # the authorization server does not exist: it stops there
        async_to_sync(run)()
    assert [type(e) for e in leaves(stopped.value)] == [httpx2.ConnectError]  # as.invalid does not resolve
    assert asked[:2] == [f"POST {url}", f"GET {metadata_url}"], asked  # discovery starts where the 401 says
    assert any("as.invalid" in line for line in asked[2:]), asked  # and goes on to the named authorization server


@pytest.mark.multiprocess
def test_a_host_error_reaches_the_client_as_a_generic_error_with_an_id(server):
    base, url, procs, proc = server

    async def run() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http,
            mcp.Client(streamable_http_client(url, http_client=http)) as client,
        ):
            try:
                result = await client.call_tool("schedule_followup", {"delay": "1d", "note": "x"})
            except MCPError as exc:
                return exc
            return result

    error = async_to_sync(run)()
    assert isinstance(error, MCPError), error  # SPAWN_TURN is unset on this server: a host error
    message = error.error.message
    assert "error id" in message
    for detail in ("SPAWN_TURN", "ImproperlyConfigured", "session_turn", "Traceback", "UnknownKind"):
        assert detail not in message and detail not in json.dumps(error.error.data), message
    error_id = error.error.data["error_id"]
    processes.wait_for(lambda: error_id in procs.log(proc), timeout=10, what="the error id in the server's log")
    log = procs.log(proc)
    assert "ImproperlyConfigured" in log and "SPAWN_TURN" in log  # the whole exception, server-side only


def test_without_an_authorization_server_the_metadata_names_none(client, settings):
    settings.WAKES = {**settings.WAKES, "MCP_AUTH": lambda request: None}
    url = reverse("django_wakes:mcp_resource_metadata")
    response = client.get(url)
    assert response.status_code == 200 and response["Access-Control-Allow-Origin"] == "*"
    assert response.json() == {
        "resource": "http://testserver/wakes/mcp/",
        "bearer_methods_supported": ["header"],
        "resource_name": "django-wakes",
    }
    challenge = client.post(reverse("django_wakes:mcp"), "{}", content_type="application/json")
    assert challenge["WWW-Authenticate"] == f'Bearer resource_metadata="http://testserver{url}"'
    settings.WAKES = {k: v for k, v in settings.WAKES.items() if k != "MCP_AUTH"}
    assert client.get(url).status_code == 404  # off with the endpoint
