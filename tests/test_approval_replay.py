"""Issue 26, finding 1: a replayed ``request_approval`` never rotates the link, and only the host re-issues one.

Before, each replay with the same ``request_id``/``tool_call_id`` rotated the token and called ``ON_APPROVAL``
again: the link the human had opened answered 404, and with ``on_timeout: "approve"`` the model won by
default. Driven through every surface a replay or an answer comes by: the MCP SDK's own client, ``dispatch``,
the Python API, the approval page (Django's test client) and the JSON API.
"""

from __future__ import annotations

import json
from typing import Any

import mcp
import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes import engine
from django_wakes.agents import mcp_server
from django_wakes.exceptions import (
    ApprovalAlreadyResolved,
    ApprovalNotFound,
    ApprovalReissueLimit,
    ApprovalSuperseded,
)
from django_wakes.models import RetiredApprovalToken, Wake

pytestmark = pytest.mark.django_db

WS, SESSION = "team-alice", "sess-replay"  # testproject.wakes.authorize: alice may answer in team-alice
PASSWORD = "correct horse battery staple"
ANSWER_URL = "/wakes/approve/answer/"
API_URL = "/wakes/approvals/api/"
REPLAYS = 10


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(django_user_model: Any) -> Client:
    browser = Client()
    browser.force_login(django_user_model.objects.create_user("alice", password=PASSWORD))
    return browser


@pytest.fixture
def hook(settings: Any) -> list[tuple[int, str]]:
    """``WAKES["ON_APPROVAL"]`` recording every ``(wake id, token)`` the host is handed."""
    handed: list[tuple[int, str]] = []
    settings.WAKES = {**settings.WAKES, "ON_APPROVAL": lambda wake, token: handed.append((wake.pk, token))}
    return handed


def open_link(browser: Client, token: str) -> Any:
    return browser.get(reverse("django_wakes:approve", args=[token]))


def reject_on_page(browser: Client, wake_id: int) -> Any:
    return browser.post(ANSWER_URL, {"wake": wake_id, "decision": "reject", "comment": "no"})


def api_answer(browser: Client, token: str, approved: bool = False) -> Any:
    body = json.dumps({"token": token, "approved": approved})
    return browser.post(API_URL, data=body, content_type="application/json")


def test_ten_mcp_replays_make_one_hook_call_and_the_humans_reject_wins(clock, spawned, hook, alice):
    """The attack as reported, through the MCP SDK client: the human's Reject on the opened page is recorded."""
    args = {"prompt": "Wire 10k to ACME?", "expires_in": "1h", "on_timeout": "approve", "request_id": "r-7"}

    async def model() -> list[Any]:
        mcp_server._identity.set((WS, SESSION))
        async with mcp.Client(mcp_server.build_server()) as client:
            first = await client.call_tool("request_approval", args)
            return [first] + [await client.call_tool("request_approval", args) for _ in range(REPLAYS)]

    def replay() -> list[Any]:
        return async_to_sync(model)()

    first, *again = replay()
    assert not first.is_error and all(r.structured_content == first.structured_content for r in again)
    [(wake_id, token)] = hook  # one call of ON_APPROVAL, one token
    assert open_link(alice, token)["Location"] == ANSWER_URL  # the human opens the page...
    replay()  # ...the model replays ten more times meanwhile...
    assert len(hook) == 1 and Wake.objects.get(pk=wake_id).token_hash == engine.hash_token(token)
    assert reject_on_page(alice, wake_id).status_code == 200  # ...and the human's answer lands
    clock.advance("2h")  # past the expiry: the default "approve" never applies
    django_wakes.run_due()
    assert spawned == [
        (SESSION, {"trigger": "on_approval", "answer": {"approved": False, "comment": "no"}, "resolved_by": "alice"})
    ]


def test_dispatch_replays_rotate_nothing_and_the_json_api_still_answers(clock, spawned, hook, alice):
    args = {"prompt": "Deploy?", "expires_in": "1d", "on_timeout": "approve"}
    results = [
        django_wakes.dispatch(
            "request_approval", args, workspace_id=WS, session_id=SESSION, tool_call_id="toolu_1", on_approval=None
        )
        for _ in range(1 + REPLAYS)
    ]
    assert all(r == results[0] for r in results) and Wake.objects.count() == 1
    [(wake_id, token)] = hook
    assert RetiredApprovalToken.objects.count() == 0
    response = api_answer(alice, token)
    assert response.status_code == 200 and response.json() == {"wake": wake_id, "approved": False}


def test_a_python_replay_returns_the_approval_without_a_token(clock, sinks):
    sinks("t.replay")
    first = django_wakes.request_approval(
        workspace_id=WS, kind="t.replay", prompt="Ship?", expires_in="1h", idempotency_key="k"
    )
    for _ in range(REPLAYS):
        again = django_wakes.request_approval(
            workspace_id=WS, kind="t.replay", prompt="Ship?", expires_in="1h", idempotency_key="k"
        )
        assert again.wake.pk == first.wake.pk and again.token is None
    assert Wake.objects.get().token_hash == engine.hash_token(first.token)


def test_the_host_reissues_and_the_old_link_says_a_newer_link_was_sent(clock, sinks, alice):
    sinks("t.replay")
    first = django_wakes.request_approval(workspace_id=WS, kind="t.replay", prompt="Ship?", expires_in="1h")
    newer = django_wakes.reissue_approval(first.wake.pk)
    assert newer.wake.pk == first.wake.pk and newer.token and newer.token != first.token
    retired = RetiredApprovalToken.objects.get()
    assert retired.token_hash == engine.hash_token(first.token) and first.token not in retired.token_hash
    # The engine, the link, and the JSON API all say "superseded", never "not found".
    with pytest.raises(ApprovalSuperseded):
        django_wakes.resolve(first.token, {"approved": True}, "alice")
    old = open_link(Client(), first.token)
    assert old.status_code == 302 and old["Location"] == "/wakes/approve/refused/superseded/" and not old.cookies
    page = Client().get(old["Location"])
    assert page.status_code == 410 and "A newer link was sent" in page.content.decode()
    response = api_answer(alice, first.token)
    assert response.status_code == 410 and response.json()["error"] == "superseded"
    # The new link answers; afterwards the old one says what became of the approval.
    assert api_answer(alice, newer.token, approved=True).status_code == 200
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.resolve(first.token, {"approved": True}, "alice")
    with pytest.raises(ApprovalAlreadyResolved):
        django_wakes.reissue_approval(first.wake.pk)  # answered: nothing to re-issue
    with pytest.raises(ApprovalNotFound):
        django_wakes.reissue_approval(first.wake.pk + 1000)


def test_a_page_opened_before_a_reissue_still_answers(clock, sinks, alice):
    """Re-issuing retires a link, not the page a person has open: the answer is never lost to it."""
    calls = sinks("t.replay")
    first = django_wakes.request_approval(workspace_id=WS, kind="t.replay", prompt="Ship?", expires_in="1h")
    open_link(alice, first.token)
    assert alice.get(ANSWER_URL).status_code == 200  # the page shows the prompt
    django_wakes.reissue_approval(first.wake.pk)
    django_wakes.reissue_approval(first.wake.pk)
    assert alice.get(ANSWER_URL).status_code == 200  # a reload still shows it
    assert reject_on_page(alice, first.wake.pk).status_code == 200
    django_wakes.run_due()
    assert calls.results == [
        {"trigger": "on_approval", "answer": {"approved": False, "comment": "no"}, "resolved_by": "alice"}
    ]


def test_reissues_are_bounded(clock, sinks):
    sinks("t.replay")
    req = django_wakes.request_approval(workspace_id=WS, kind="t.replay", prompt="Ship?", expires_in="1h")
    tokens = [django_wakes.reissue_approval(req.wake.pk).token for _ in range(engine.MAX_REISSUES)]
    with pytest.raises(ApprovalReissueLimit):
        django_wakes.reissue_approval(req.wake.pk)
    assert RetiredApprovalToken.objects.filter(wake=req.wake).count() == engine.MAX_REISSUES
    assert Wake.objects.get().token_hash == engine.hash_token(tokens[-1])  # the refused call changed nothing
    Wake.objects.all().delete()
    assert not RetiredApprovalToken.objects.exists()  # deleted with their approval
