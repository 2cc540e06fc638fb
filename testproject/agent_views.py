"""An async view that drives django-wakes' async API, as an ASGI host's agent loop would.

``POST /agent/`` with ``{"op": <name>, "kwargs": {...}}`` awaits ``django_wakes.a<name>(**kwargs)``
(or ``adispatch``) inside the event loop and answers with what it returned, as JSON. ``"op":
"schedule_sync"`` calls the sync ``schedule()`` from the same coroutine, to show the view really runs
in the loop (Django refuses it there). Approval tokens the tools hand to ``on_approval`` come back
under ``"host"``: the host's side, never the model's. For tests only (tests/test_async_api.py):
no authentication, no CSRF.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import SynchronousOnlyOperation
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import django_wakes

OPS = {
    "dispatch",
    "schedule",
    "schedule_many",
    "watch",
    "request_approval",
    "deliver_event",
    "resolve",
    "cancel",
    "stop_session",
    "resume_session",
    "nudge_session",
}


def _plain(value: Any) -> Any:
    """What an async API call returned, as JSON: a wake as its id and state, a request with its token."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "token") and hasattr(value, "wake"):
        return {"wake": _plain(value.wake), "token": value.token}
    if hasattr(value, "pk") and hasattr(value, "state"):
        return {"id": value.pk, "state": str(value.state), "session_id": value.session_id}
    return value


@csrf_exempt
@require_POST
async def agent(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    op, kwargs = body["op"], body.get("kwargs", {})
    if op == "schedule_sync":
        try:
            django_wakes.schedule(**kwargs)
        except SynchronousOnlyOperation as exc:
            return JsonResponse({"error": type(exc).__name__})
        return JsonResponse({"error": None})
    if op not in OPS:
        return JsonResponse({"error": f"unknown op {op!r}"}, status=400)
    tokens: list[str] = []
    if op == "dispatch":
        kwargs["on_approval"] = lambda wake, token: tokens.append(token)
        result = await django_wakes.adispatch(kwargs.pop("name"), kwargs.pop("arguments"), **kwargs)
    else:
        try:
            result = await getattr(django_wakes, f"a{op}")(**kwargs)
        except django_wakes.WakeError as exc:
            return JsonResponse({"error": type(exc).__name__, "message": str(exc)})
    return JsonResponse({"result": _plain(result), "host": {"tokens": tokens}})
