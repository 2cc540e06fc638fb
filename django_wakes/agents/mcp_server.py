"""The five agent tools over the Model Context Protocol, on the official ``mcp`` SDK (``django-wakes[mcp]``).

Agent runtimes that take their tools over MCP (Claude, the OpenAI Agents SDK, IDE agents) get the same
tools, schemas and results as :func:`~django_wakes.agents.dispatch.dispatch`, which runs every call:

* **stdio**: ``manage.py wakes mcp --workspace W --session S`` serves one agent session; the runtime
  starts it as a subprocess (:func:`serve_stdio`);
* **streamable HTTP**: ``django_wakes:mcp`` (``mcp/`` in ``django_wakes.urls``, :func:`mcp_endpoint`),
  stateless, JSON responses, each request's session told by ``WAKES["MCP_AUTH"](request) ->
  (workspace_id, session_id) | None`` (``None``: 401; no hook: 404). Any number of Django workers
  can serve it: nothing about a client is kept between requests. A request whose ``Origin`` is neither
  this host's nor in ``WAKES["MCP_ALLOWED_ORIGINS"]`` gets 403 (the transport spec's guard against DNS
  rebinding; no ``Origin``, as non-browser clients send, passes). The 401 names the OAuth protected
  resource metadata (RFC 9728, :func:`resource_metadata`) in ``WWW-Authenticate``, so an MCP client
  without a token starts discovery there.

A host error while running a call (``SPAWN_TURN`` unset, the database down, a hook that raises) reaches
the client as a JSON-RPC internal error that says only "internal error" and an error id; the exception
is logged here with that id, never sent.

A refusal is an MCP tool error (``isError: true``) carrying dispatch's ``{"error": {...}}``; a result
also comes as ``structuredContent``. Approval tokens go to ``WAKES["ON_APPROVAL"](wake, token)``, as MCP
has no per-call hook. MCP calls carry no stable call id, so a call the client retries creates a second
wake unless the model passes ``request_id`` (an optional argument the three create tools have here):
a repeated ``request_id`` returns the first call's wake and result.

The SDK is imported when a server is built, so ``django_wakes.urls`` imports without it.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable, MutableMapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ..tracing import foreign_caller
from .dispatch import adispatch
from .schemas import tool_definitions

if TYPE_CHECKING:  # pragma: no cover
    import mcp.types as types
    from django.http import HttpRequest, HttpResponse
    from mcp.server.lowlevel import Server

__all__ = [
    "CREATE_TOOLS",
    "REQUEST_ID",
    "build_server",
    "mcp_endpoint",
    "mcp_tools",
    "origin_allowed",
    "resource_metadata",
    "serve_stdio",
    "url_setting_problems",
]

logger = logging.getLogger("django_wakes")

#: The argument that makes an MCP create call idempotent, and the tools that take it.
REQUEST_ID = "request_id"
REQUEST_ID_MAX_LENGTH = 100
_REQUEST_ID = re.compile(rf"^[!-~]{{1,{REQUEST_ID_MAX_LENGTH}}}$")
CREATE_TOOLS = ("schedule_followup", "watch_event", "request_approval")
SERVER_NAME = "django-wakes"
INSTRUCTIONS = (
    "Durable follow-ups for this conversation: schedule a later turn (schedule_followup), wait for an event "
    "(watch_event), ask a human (request_approval), and see or cancel what is pending (list_wakes, cancel_wake). "
    "Each wake brings a new turn to this same conversation when it fires."
)

#: ``(workspace_id, session_id)`` of the calls being served: set by the transport, read by the tool handler.
_identity: ContextVar[tuple[str, str] | None] = ContextVar("django_wakes_mcp_identity", default=None)


def _sdk_missing() -> Exception:
    from django.core.exceptions import ImproperlyConfigured

    return ImproperlyConfigured("the MCP server needs the mcp package: pip install 'django-wakes[mcp]'")


def mcp_tools() -> list[dict[str, Any]]:
    """The tools as MCP lists them: ``tool_definitions("mcp")``, the create tools with ``request_id`` added."""
    tools = tool_definitions("mcp")
    for tool in tools:
        if tool["name"] in CREATE_TOOLS:
            tool["inputSchema"]["properties"][REQUEST_ID] = {
                "type": "string",
                "minLength": 1,
                "maxLength": REQUEST_ID_MAX_LENGTH,
                "pattern": _REQUEST_ID.pattern,
                "description": (
                    "Optional: a unique id of your choosing for this request (printable ASCII, no spaces). If you "
                    "repeat a call whose result you did not get, send the same request_id: you get the first "
                    "call's result instead of a second wake. Use a new one for each new request."
                ),
            }
    return tools


async def _call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """Run one MCP tool call through :func:`adispatch` for the session being served."""
    identity = _identity.get()
    if identity is None:  # pragma: no cover - every transport below sets it
        raise RuntimeError("no MCP session identity: serve through serve_stdio() or mcp_endpoint()")
    workspace_id, session_id = identity
    args = dict(arguments or {})
    request_id = args.pop(REQUEST_ID, None) if name in CREATE_TOOLS else None
    if request_id is not None and (
        not isinstance(request_id, str)
        or not 0 < len(request_id) <= REQUEST_ID_MAX_LENGTH
        or not request_id.isprintable()
    ):
        message = f"{REQUEST_ID} must be a non-empty string of at most {REQUEST_ID_MAX_LENGTH} printable characters"
        return {"error": {"code": "invalid_arguments", "message": message, "field": REQUEST_ID}}
    try:
        with foreign_caller():  # the MCP client's trace (its _meta traceparent) is linked, never continued
            return await adispatch(
                name,
                args,
                workspace_id=workspace_id,
                session_id=session_id,
                tool_call_id=f"mcp:{request_id}" if request_id is not None else None,
            )
    except ValueError:
        if request_id is None:
            raise
        message = (
            f"{REQUEST_ID} {request_id!r} was already used for a different request in this conversation: "
            "use a new request_id for a new request"
        )
        return {"error": {"code": "invalid_arguments", "message": message, "field": REQUEST_ID}}


def build_server() -> Server[Any]:
    """The MCP server: ``tools/list`` gives :func:`mcp_tools`, ``tools/call`` runs :func:`adispatch`."""
    try:
        import mcp.types as types
        from mcp.server.lowlevel import Server
    except ImportError as exc:  # pragma: no cover - the extra is installed where this is tested
        raise _sdk_missing() from exc

    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("django-wakes")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        release = ""

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool.model_validate(tool) for tool in mcp_tools()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await _call(params.name, params.arguments)
        except Exception as exc:  # a host error: logged in full here, only its id sent
            raise _host_error(params.name) from exc
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result))],
            structured_content=result,
            is_error="error" in result,
        )

    return Server(
        SERVER_NAME,
        version=release,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _host_error(tool: str) -> Exception:
    """Log the exception being handled under a new error id; return the generic JSON-RPC error that names the id."""
    from mcp.shared.exceptions import MCPError
    from mcp.types import INTERNAL_ERROR

    error_id = secrets.token_hex(8)
    logger.exception("MCP tool call %s failed in the host (error id %s)", tool, error_id)
    message = f"internal error in the host (error id {error_id}): the call was not done; tell the host's operators"
    return MCPError(code=INTERNAL_ERROR, message=message, data={"error_id": error_id})


def serve_stdio(*, workspace_id: str, session_id: str) -> None:
    """Serve the tools for one session over this process's stdin and stdout until the client closes them."""
    import anyio

    from ..validation import key

    identity = (key(workspace_id, name="workspace_id"), key(session_id, name="session_id"))
    try:
        from mcp.server.stdio import stdio_server
    except ImportError as exc:  # pragma: no cover
        raise _sdk_missing() from exc
    server = build_server()

    async def serve() -> None:
        _identity.set(identity)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    logger.info("MCP server on stdio for workspace %s, session %s", *identity)
    anyio.run(serve)


# --------------------------------------------------------------------------------------------------
# Streamable HTTP inside Django
# --------------------------------------------------------------------------------------------------


def _scope(request: HttpRequest) -> dict[str, Any]:
    """The ASGI scope of a Django request, for the SDK's transport (which speaks ASGI)."""
    port = int(request.get_port() or 0)
    remote = request.META.get("REMOTE_ADDR") or ""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in request.headers.items()
        ],
        "client": (remote, 0),
        "server": (request.get_host().rsplit(":", 1)[0], port),
    }


async def _serve_http(request: HttpRequest, identity: tuple[str, str]) -> HttpResponse:
    """Answer one POST with the SDK's stateless, JSON-response streamable-HTTP transport."""
    import anyio
    from django.http import HttpResponse
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    body = request.body
    delivered = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    status, headers, chunks = 500, [], []

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], message.get("headers", [])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    token = _identity.set(identity)
    try:
        manager = StreamableHTTPSessionManager(app=build_server(), stateless=True, json_response=True)
        async with manager.run():
            await manager.handle_request(_scope(request), receive, send)
    finally:
        _identity.reset(token)
    response = HttpResponse(b"".join(chunks), status=status)
    for name, value in headers:
        if name.lower() not in (b"content-length",):
            response[name.decode("latin-1")] = value.decode("latin-1")
    return response


def origin_allowed(request: HttpRequest) -> bool:
    """Whether the request's ``Origin`` may call the endpoint: none sent, this host's own, or a listed one.

    "This host's own" is ``request.get_host()``, which Django checks against ``ALLOWED_HOSTS``: a page
    on a rebound name (DNS rebinding) sends that name as ``Host`` and is refused there. Listed origins
    are ``WAKES["MCP_ALLOWED_ORIGINS"]`` (``"https://app.example.com"``, exact scheme, host and port).
    """
    from urllib.parse import urlsplit

    from ..conf import wakes_settings

    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if origin.rstrip("/").lower() in {o.rstrip("/").lower() for o in wakes_settings.mcp_allowed_origins}:
        return True
    parts = urlsplit(origin)
    return parts.scheme == request.scheme and bool(parts.netloc) and parts.netloc.lower() == request.get_host().lower()


def url_setting_problems() -> list[tuple[str, str]]:
    """``(setting, message)`` for each unusable ``MCP_ALLOWED_ORIGINS``/``MCP_AUTHORIZATION_SERVERS`` (system checks).

    Origins are ``scheme://host[:port]`` only (what a browser sends); authorization servers absolute
    http(s) URLs. One message per setting, about its first bad entry.
    """
    from urllib.parse import urlsplit

    from ..conf import wakes_settings

    problems = []
    for name, origins_only, what in (
        ("MCP_ALLOWED_ORIGINS", True, 'origins such as "https://app.example.com" (scheme, host and port only)'),
        ("MCP_AUTHORIZATION_SERVERS", False, "absolute http(s) URLs of OAuth authorization servers"),
    ):
        value = wakes_settings.get(name)
        for item in value if isinstance(value, list | tuple) else [value]:
            parts = urlsplit(item) if isinstance(item, str) else None
            usable = parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc)
            if usable and parts is not None and origins_only:
                usable = parts.path in ("", "/") and not parts.query and not parts.fragment
            if not isinstance(value, list | tuple) or not usable:
                problems.append((name, f"WAKES[{name!r}] must be a list of {what}; got {item!r:.100}"))
                break
    return problems


def _metadata_url(request: HttpRequest) -> str:
    from django.urls import reverse

    return request.build_absolute_uri(reverse("django_wakes:mcp_resource_metadata"))


def resource_metadata(request: HttpRequest) -> HttpResponse:
    """``mcp/oauth-protected-resource/``: the endpoint's OAuth protected resource metadata (RFC 9728).

    ``resource`` is the endpoint's absolute URL; ``authorization_servers`` lists
    ``WAKES["MCP_AUTHORIZATION_SERVERS"]`` and is left out when the host names none (RFC 9728 makes it
    optional): the host then hands out its bearer tokens itself, and an OAuth client can discover that it
    cannot get one by OAuth. Public (no credentials), readable from any origin; 404 while ``MCP_AUTH`` is unset.
    """
    from django.http import Http404, JsonResponse
    from django.urls import reverse

    from ..conf import wakes_settings

    if wakes_settings.mcp_auth is None:
        raise Http404("the MCP endpoint is off: set WAKES['MCP_AUTH']")
    metadata: dict[str, Any] = {
        "resource": request.build_absolute_uri(reverse("django_wakes:mcp")),
        "bearer_methods_supported": ["header"],
        "resource_name": SERVER_NAME,
    }
    servers = wakes_settings.mcp_authorization_servers
    if servers:
        metadata["authorization_servers"] = servers
    response = JsonResponse(metadata)
    response["Access-Control-Allow-Origin"] = "*"  # public metadata, for browser-based MCP clients
    return response


async def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    """``mcp/``: the tools over streamable HTTP for the session ``WAKES["MCP_AUTH"](request)`` names.

    404 while ``MCP_AUTH`` is unset, 403 for an ``Origin`` :func:`origin_allowed` refuses, 401 when
    ``MCP_AUTH`` answers ``None`` (with ``WWW-Authenticate: Bearer resource_metadata="..."``), 405 for
    anything but POST (the server is stateless: no GET stream, no session to DELETE). CSRF does not
    apply (a client sends JSON with its own credentials): ``MCP_AUTH`` must authenticate with something
    a browser does not send by itself, such as a bearer token, never the session cookie alone.
    """
    from asgiref.sync import sync_to_async
    from django.http import Http404, JsonResponse

    from ..conf import wakes_settings
    from ..validation import key

    auth = wakes_settings.mcp_auth
    if auth is None:
        raise Http404("the MCP endpoint is off: set WAKES['MCP_AUTH']")
    if not origin_allowed(request):
        logger.warning("MCP endpoint: refused a request from origin %r (403)", request.headers.get("Origin", "")[:200])
        return JsonResponse({"error": "this origin may not call the MCP endpoint"}, status=403)
    if request.method != "POST":
        response = JsonResponse({"error": "this MCP server is stateless: POST JSON-RPC messages"}, status=405)
        response["Allow"] = "POST"
        return response
    identity = await sync_to_async(auth, thread_sensitive=True)(request)
    if identity is None:
        response = JsonResponse({"error": "not authenticated"}, status=401)
        response["WWW-Authenticate"] = f'Bearer resource_metadata="{_metadata_url(request)}"'
        return response
    workspace_id, session_id = identity
    return await _serve_http(request, (key(workspace_id, name="workspace_id"), key(session_id, name="session_id")))


def _csrf_exempt_endpoint() -> Callable[..., Any]:
    from django.views.decorators.cache import never_cache
    from django.views.decorators.csrf import csrf_exempt

    return csrf_exempt(never_cache(mcp_endpoint))


#: What ``django_wakes.urls`` routes: :func:`mcp_endpoint`, CSRF-exempt and never cached.
mcp_view = _csrf_exempt_endpoint()


def _metadata_view() -> Callable[..., Any]:
    from django.views.decorators.http import require_safe

    return require_safe(resource_metadata)


#: What ``django_wakes.urls`` routes at ``mcp/oauth-protected-resource/``: :func:`resource_metadata`, GET/HEAD only.
resource_metadata_view = _metadata_view()
