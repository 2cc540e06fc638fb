"""JSON over HTTP for the programs that call us (the approval API, webhook senders): bounded bodies, stable refusals.

Every refusal is ``{"error": code, "detail": message}`` with its status, so a client can act on the
code and a person can read the message; bodies are read to at most one byte past their limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, JsonResponse


class BadRequest(Exception):
    """A JSON request to refuse: ``status``, a stable ``code``, a message for the caller and any headers to send."""

    def __init__(self, status: int, code: str, detail: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail
        self.headers = dict(headers or {})


def json_error(status: int, code: str, detail: str, **headers: str) -> JsonResponse:
    """Return ``{"error": code, "detail": detail}`` with ``status``."""
    response = JsonResponse({"error": code, "detail": detail}, status=status)
    for name, value in headers.items():
        response.headers[name.replace("_", "-")] = value
    return response


def refusal(exc: BadRequest) -> JsonResponse:
    response = json_error(exc.status, exc.code, exc.detail)
    for name, value in exc.headers.items():
        response.headers[name] = value
    return response


def method_not_allowed() -> JsonResponse:
    return json_error(405, "method_not_allowed", "Use POST.", Allow="POST")


def read_body(request: HttpRequest, max_bytes: int) -> bytes:
    """Return the request body if it is at most ``max_bytes`` long; raise a 413 ``BadRequest`` otherwise.

    The declared ``Content-Length`` is refused before anything is read; the body is then read to at
    most one byte past the limit, so a body longer than it declares (or declaring nothing, as under
    ASGI it may) is refused without being held in memory either.
    """
    too_large = BadRequest(413, "too_large", f"The body is larger than the limit of {max_bytes} bytes.")
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0  # unparseable: the read below still bounds it
    if declared > max_bytes:
        raise too_large
    body = request.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise too_large
    return body


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_object(body: bytes) -> dict[str, Any]:
    """Return the JSON object ``body`` holds (strict UTF-8, no NaN or Infinity); raise a 400 ``BadRequest``."""
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest(400, "bad_json", "The body is not valid JSON (UTF-8).") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "bad_json", "The body must be a JSON object.")
    return data


def refuse_unknown_fields(data: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise BadRequest(400, "bad_request", f"Unknown fields: {shown}; allowed: {', '.join(sorted(allowed))}.")
