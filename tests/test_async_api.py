"""The async API (``aschedule``, ``adispatch``, ...) from an async view: Django's async test client and a real
ASGI server (uvicorn serving ``testproject.asgi``) run the same script through ``testproject/agent_views.py``.

The view is an ``async def``: calling the sync ``schedule()`` there raises ``SynchronousOnlyOperation``
(the script checks it first), so every other step shows the ``a*`` call working where the sync one cannot.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest
from asgiref.sync import async_to_sync

import django_wakes
from django_wakes.agents import tools
from django_wakes.engine import aio
from django_wakes.models import State, Wake
from tests import processes
from tests.processes import Procs

WS, SESSION = "ws-async", "sess-async"
TWINS = list(aio.__all__)


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_is_a_coroutine_function_with_the_sync_signature(name):
    twin = getattr(django_wakes, name)
    sync = getattr(django_wakes, name[1:])
    assert twin is getattr(aio, name) and inspect.iscoroutinefunction(twin)
    assert inspect.signature(twin) == inspect.signature(sync)
    assert twin.__name__ == name and "sync_to_async(thread_sensitive=True)" in (twin.__doc__ or "")
    assert inspect.iscoroutinefunction(django_wakes.adispatch) and django_wakes.adispatch is tools.adispatch


def script(post: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Drive every async call through the view; return what the host saw, for the caller to check rows."""
    seen: dict[str, Any] = {}
    assert post({"op": "schedule_sync", "kwargs": {"workspace_id": WS, "session_id": SESSION, "delay": "1h"}}) == {
        "error": "SynchronousOnlyOperation"
    }
    followup = {"name": "schedule_followup", "arguments": '{"delay": "2h", "note": "check CI"}'}
    first = post(
        {"op": "dispatch", "kwargs": {**followup, "workspace_id": WS, "session_id": SESSION, "tool_call_id": "c1"}}
    )
    again = post(
        {"op": "dispatch", "kwargs": {**followup, "workspace_id": WS, "session_id": SESSION, "tool_call_id": "c1"}}
    )
    assert first["result"]["note"] == "check CI" and again == first  # idempotent through the async path too
    seen["followup"] = first["result"]["wake_id"]
    refused = post(
        {
            "op": "dispatch",
            "kwargs": {
                "name": "schedule_followup",
                "arguments": {"delay": "1s", "note": "x"},
                "workspace_id": WS,
                "session_id": SESSION,
            },
        }
    )
    assert refused["result"]["error"]["code"] == "too_soon"
    asked = post(
        {
            "op": "dispatch",
            "kwargs": {
                "name": "request_approval",
                "arguments": {"prompt": "Deploy?", "expires_in": "1d"},
                "workspace_id": WS,
                "session_id": SESSION,
            },
        }
    )
    (token,) = asked["host"]["tokens"]
    assert token not in json.dumps(asked["result"])  # the model's side never carries it
    answered = post({"op": "resolve", "kwargs": {"token": token, "answer": {"approved": True}, "actor": "demo"}})
    assert answered["result"]["id"] == asked["result"]["wake_id"]
    again = post({"op": "resolve", "kwargs": {"token": token, "answer": {"approved": False}, "actor": "demo"}})
    assert again["error"] == "ApprovalAlreadyResolved"  # one-time tokens, through the async path too
    seen["approval"] = answered["result"]["id"]

    plain = post({"op": "schedule", "kwargs": {"workspace_id": WS, "session_id": SESSION, "delay": "3h"}})
    seen["plain"] = plain["result"]["id"]
    many = post(
        {
            "op": "schedule_many",
            "kwargs": {"items": [{"delay": "4h"}, {"delay": "5h"}], "workspace_id": WS, "session_id": "sess-other"},
        }
    )
    seen["many"] = [w["id"] for w in many["result"]]
    watched = post({"op": "watch", "kwargs": {"workspace_id": WS, "event_key": "ci:pass:1", "session_id": SESSION}})
    seen["watch"] = watched["result"]["id"]
    assert post({"op": "deliver_event", "kwargs": {"workspace_id": WS, "event_key": "ci:pass:1", "payload": {}}}) == {
        "result": 1,
        "host": {"tokens": []},
    }
    assert post({"op": "cancel", "kwargs": {"wake_id": seen["plain"]}})["result"] is True
    assert post({"op": "nudge_session", "kwargs": {"session_id": SESSION, "workspace_id": WS}})["result"] == 0
    stopped = post({"op": "stop_session", "kwargs": {"session_id": SESSION, "reason": "done", "workspace_id": WS}})
    assert stopped["result"] == 3  # the follow-up, the answered approval, the watch (the plain one is cancelled)
    late = post({"op": "dispatch", "kwargs": {**followup, "workspace_id": WS, "session_id": SESSION}})
    assert late["result"]["error"]["code"] == "session_stopped"
    assert post({"op": "resume_session", "kwargs": {"session_id": SESSION, "workspace_id": WS}})["result"] is True
    return seen


def check_rows(seen: dict[str, Any]) -> None:
    states = dict(Wake.objects.values_list("pk", "state"))
    assert [states[seen[k]] for k in ("followup", "approval", "watch")] == [State.SUPERSEDED] * 3
    assert states[seen["plain"]] == State.CANCELLED
    assert [states[pk] for pk in seen["many"]] == [State.PENDING] * 2
    approval, watch = Wake.objects.get(pk=seen["approval"]), Wake.objects.get(pk=seen["watch"])
    assert approval.result["answer"] == {"approved": True} and watch.result["trigger"] == "on_event"
    assert len(states) == 6  # nothing written by the refused calls or the retried one


@pytest.mark.django_db
def test_the_async_api_from_an_async_view_under_djangos_async_client(async_client, spawned):
    def post(body: dict[str, Any]) -> dict[str, Any]:
        response = async_to_sync(async_client.post)("/agent/", json.dumps(body), content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    check_rows(script(post))


@pytest.fixture
def asgi_server(procs: Procs) -> Iterator[str]:
    """``uvicorn testproject.asgi:application`` against the test database; its base URL."""
    server, base = processes.asgi_server(procs)
    yield base
    procs.stop(server)


@pytest.mark.multiprocess
def test_the_async_api_from_an_async_view_under_a_real_asgi_server(asgi_server, procs):
    with httpx2.Client(base_url=asgi_server, timeout=30) as client:

        def post(body: dict[str, Any]) -> dict[str, Any]:
            response = client.post("/agent/", json=body)
            assert response.status_code == 200, response.text
            return response.json()

        seen = script(post)
    check_rows(seen)


@pytest.mark.django_db(transaction=True)
def test_the_async_api_from_a_plain_asyncio_agent_loop(spawned):
    """No Django request cycle: ``asyncio.run`` and concurrent calls, as an agent runtime's own loop makes them."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    async def agent_loop() -> list[dict[str, Any]]:
        calls = [
            django_wakes.adispatch(
                "schedule_followup",
                {"delay": f"{n + 1}h", "note": f"check {n}"},
                workspace_id=WS,
                session_id=f"loop-{n % 2}",
                tool_call_id=f"call-{n}",
            )
            for n in range(6)
        ]
        results = await asyncio.gather(
            *calls, django_wakes.adispatch("list_wakes", {}, workspace_id=WS, session_id="x")
        )
        await django_wakes.acancel(results[0]["wake_id"])
        await sync_to_async(close_old_connections)()  # what a long-running loop does between turns
        return list(results)

    results = asyncio.run(agent_loop())
    assert sorted(r["note"] for r in results[:6]) == [f"check {n}" for n in range(6)]
    assert results[6] == {"wakes": [], "more": False, "now": results[6]["now"]}
    assert Wake.objects.filter(state=State.PENDING).count() == 5
    assert Wake.objects.get(pk=results[0]["wake_id"]).state == State.CANCELLED
