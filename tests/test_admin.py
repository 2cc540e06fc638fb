"""The operator console: read-only pages, exact search, and the cancel/retry actions (plus ``requeue``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse

import django_wakes
from django_wakes import clock
from django_wakes.models import Outcome, Receipt, ReceiptState, Runner, State, TriggerType, Wake, WakeAttempt
from django_wakes.querysets import stale_after
from django_wakes.testing import fake_clock

pytestmark = pytest.mark.django_db

KIND = "test.admin"
START = datetime(2030, 1, 1, tzinfo=UTC)
CHANGELIST = "admin:django_wakes_wake_changelist"


@pytest.fixture(autouse=True)
def kind(sinks) -> str:
    """Register a sink for this module's kind (conftest restores the registry afterwards)."""
    sinks(KIND)
    return KIND


def make_wake(state: str = State.PENDING, **fields: Any) -> Wake:
    now = clock.now()
    values: dict[str, Any] = {
        "workspace_id": "ws-admin",
        "trigger_type": TriggerType.AT,
        "kind": KIND,
        "state": state,
        "fire_at": now,
        "due_at": now,
        "created_at": now,
        "updated_at": now,
    }
    if state == State.FIRING:
        values.update(lease_until=now + timedelta(minutes=5), claim_token="c" * 32, claimed_at=now, attempts=1)
    if state in (State.FIRED, State.EXPIRED, State.CANCELLED, State.DEAD):
        values.update(settled_at=now)
    values.update(fields)
    return Wake.objects.create(**values)


@pytest.fixture
def every_state() -> dict[str, Wake]:
    """One wake in each state, plus an approval (whose token hash must never be shown)."""
    wakes = {state: make_wake(state) for state in State.values}
    wakes["dead"].last_error = "Traceback (most recent call last):\n  ...\nRuntimeError: <sink> broke & stayed broke"
    wakes["dead"].attempts = 5
    wakes["dead"].save()
    wakes["approval"] = django_wakes.request_approval(
        workspace_id="ws-admin", prompt="Ship it?", expires_in="1h", kind=KIND
    ).wake
    return wakes


def changelist(client: Any, **params: str) -> Any:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def shown_ids(response: Any) -> set[int]:
    return {wake.pk for wake in response.context["cl"].result_list}


# --------------------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------------------


def test_changelist_shows_wakes_in_every_state(admin_client: Any, every_state: dict[str, Wake]) -> None:
    response = changelist(admin_client)
    assert shown_ids(response) == {wake.pk for wake in every_state.values()}
    html = response.content.decode()
    assert "5/5" in html  # attempts of max
    # The error summary is the traceback's last line, escaped (never marked safe).
    assert "RuntimeError: &lt;sink&gt; broke &amp; stayed broke" in html
    assert "<sink>" not in html
    assert every_state["approval"].token_hash not in html


@pytest.mark.parametrize(
    "params",
    [
        {"state__exact": "dead"},
        {"trigger_type__exact": "on_approval"},
        {"kind": KIND},
        {"attention": "dead"},
        {"attention": "overdue"},
        {"attention": "lapsed"},
        {"attention": "failing"},
        {"created_at__year": "2030"},
    ],
)
def test_changelist_filters_load(admin_client: Any, every_state: dict[str, Wake], params: dict[str, str]) -> None:
    changelist(admin_client, **params)


def test_dead_letter_filter_shows_only_dead_wakes(admin_client: Any, every_state: dict[str, Wake]) -> None:
    response = changelist(admin_client, attention="dead")
    assert shown_ids(response) == {every_state["dead"].pk}
    assert "dead letter" in response.content.decode()


def test_attention_filters_find_overdue_lapsed_and_failing_wakes(admin_client: Any) -> None:
    with fake_clock(START) as fake:
        overdue = make_wake(due_at=START - timedelta(minutes=5))
        make_wake(due_at=START)  # due now, not overdue yet
        lapsed = make_wake(State.FIRING, lease_until=START - timedelta(seconds=1))
        make_wake(State.FIRING)  # lease still held
        failing = make_wake(last_error="boom", attempts=1, due_at=START + timedelta(minutes=1))
        fake.advance("1s")
        assert shown_ids(changelist(admin_client, attention="overdue")) == {overdue.pk}
        assert shown_ids(changelist(admin_client, attention="lapsed")) == {lapsed.pk}
        assert shown_ids(changelist(admin_client, attention="failing")) == {failing.pk}


def test_lateness_is_shown_when_there_is_no_error(admin_client: Any) -> None:
    with fake_clock(START):
        make_wake(due_at=START - timedelta(minutes=10))
        make_wake(State.FIRED, due_at=START - timedelta(seconds=3), claimed_at=START)
        html = changelist(admin_client).content.decode()
    assert "due for 10m00s" in html
    assert "started late by 3.0s" in html


def test_search_matches_prefixes_of_keys_and_kinds_and_exact_ids(admin_client: Any, sinks: Any) -> None:
    sinks("billing.charge")
    alpha = make_wake(workspace_id="ws-alpha", session_id="sess-1", serial_key="acct/7:lane")
    beta = make_wake(
        workspace_id="ws-beta", event_key="order.paid", idempotency_key="idem-7", kind="billing.charge", chain_id="c9"
    )
    assert shown_ids(changelist(admin_client, q="ws-alpha")) == {alpha.pk}
    assert shown_ids(changelist(admin_client, q="ws-")) == {alpha.pk, beta.pk}  # a prefix
    assert shown_ids(changelist(admin_client, q="sess")) == {alpha.pk}
    assert shown_ids(changelist(admin_client, q="acct/7")) == {alpha.pk}
    assert shown_ids(changelist(admin_client, q="order.")) == {beta.pk}
    assert shown_ids(changelist(admin_client, q="billing")) == {beta.pk}  # kind, by prefix
    assert shown_ids(changelist(admin_client, q="idem-7")) == {beta.pk}
    assert shown_ids(changelist(admin_client, q="idem")) == set()  # idempotency keys: exact only
    assert shown_ids(changelist(admin_client, q="c9")) == {beta.pk}
    assert shown_ids(changelist(admin_client, q=str(beta.pk))) == {beta.pk}
    assert shown_ids(changelist(admin_client, q="alpha")) == set()  # a prefix, never a substring
    assert shown_ids(changelist(admin_client, q="99999999999999999999")) == set()  # beyond a bigint


def test_change_page_is_inspect_only_and_hides_secrets(admin_client: Any, every_state: dict[str, Wake]) -> None:
    approval = every_state["approval"]
    url = reverse("admin:django_wakes_wake_change", args=[approval.pk])
    response = admin_client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Ship it?" in html
    assert approval.token_hash not in html
    assert "token_hash" not in html and "token hash" not in html.lower()
    assert 'name="_save"' not in html
    assert admin_client.post(url, {"state": "cancelled"}).status_code == 403
    approval.refresh_from_db()
    assert approval.state == State.PENDING


def test_change_page_shows_the_attempt_log(admin_client: Any) -> None:
    wake = make_wake(State.DEAD, attempts=2, last_error="ValueError: second")
    for number, error in ((1, "Traceback\nKeyError: 'first'"), (2, "ValueError: second")):
        WakeAttempt.objects.create(
            wake=wake,
            number=number,
            runner_id="host:1:abc",
            started_at=clock.now(),
            finished_at=clock.now() + timedelta(milliseconds=1500),
            outcome=Outcome.FAILED,
            error=error,
        )
    html = admin_client.get(reverse("admin:django_wakes_wake_change", args=[wake.pk])).content.decode()
    assert "KeyError: &#x27;first&#x27;" in html
    assert "host:1:abc" in html
    assert "1.5s" in html
    assert "attempt_log-__prefix__" not in html  # no blank row to add one


def test_no_add_or_delete(admin_client: Any) -> None:
    wake = make_wake()
    assert admin_client.get(reverse("admin:django_wakes_wake_add")).status_code == 403
    assert admin_client.get(reverse("admin:django_wakes_wake_delete", args=[wake.pk])).status_code == 403
    html = changelist(admin_client).content.decode()
    assert reverse("admin:django_wakes_wake_add") not in html
    assert "delete_selected" not in html


def test_view_only_staff_sees_no_actions(client: Any, django_user_model: Any) -> None:
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_wake"))
    client.force_login(user)
    make_wake()
    html = changelist(client).content.decode()
    assert "cancel_pending" not in html and "retry_dead" not in html


# --------------------------------------------------------------------------------------------------
# Actions
# --------------------------------------------------------------------------------------------------


def run_action(client: Any, action: str, wakes: list[Wake]) -> list[str]:
    response = client.post(
        reverse(CHANGELIST), {"action": action, "_selected_action": [w.pk for w in wakes]}, follow=True
    )
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_cancel_action_cancels_only_pending_wakes(admin_client: Any, every_state: dict[str, Wake]) -> None:
    selected = [every_state[s] for s in ("pending", "firing", "fired", "dead")] + [every_state["approval"]]
    before = {w.pk: Wake.objects.get(pk=w.pk).state for w in Wake.objects.all()}
    reported = run_action(admin_client, "cancel_pending", selected)
    assert reported == [
        "2 wakes were cancelled.",
        "3 selected wakes were skipped: only pending wakes can be cancelled.",
    ]
    after = dict(Wake.objects.values_list("pk", "state"))
    changed = {pk for pk in after if after[pk] != before[pk]}
    assert changed == {every_state["pending"].pk, every_state["approval"].pk}
    assert {after[pk] for pk in changed} == {State.CANCELLED}
    assert LogEntry.objects.filter(object_id__in=[str(pk) for pk in changed]).count() == 2


def test_retry_action_requeues_only_dead_wakes(admin_client: Any, every_state: dict[str, Wake]) -> None:
    dead, fired = every_state["dead"], every_state["fired"]
    with fake_clock(START):
        reported = run_action(admin_client, "retry_dead", [dead, fired, every_state["cancelled"]])
    assert reported == [
        "1 dead wake was requeued to fire now.",
        "2 selected wakes were skipped: only dead wakes can be retried.",
    ]
    dead.refresh_from_db()
    assert (dead.state, dead.attempts, dead.due_at, dead.settled_at) == (State.PENDING, 0, START, None)
    assert "stayed broke" in dead.last_error
    for state in ("fired", "cancelled", "pending", "firing", "expired"):
        row = Wake.objects.get(pk=every_state[state].pk)
        assert row.state == state


def test_action_reports_only_skips_when_nothing_qualifies(admin_client: Any) -> None:
    fired = make_wake(State.FIRED)
    assert run_action(admin_client, "retry_dead", [fired]) == [
        "1 selected wake was skipped: only dead wakes can be retried."
    ]
    assert run_action(admin_client, "cancel_pending", [fired]) == [
        "1 selected wake was skipped: only pending wakes can be cancelled."
    ]


# --------------------------------------------------------------------------------------------------
# django_wakes.requeue
# --------------------------------------------------------------------------------------------------


def test_requeue_is_a_single_winner_transition_out_of_dead() -> None:
    with fake_clock(START):
        dead = make_wake(State.DEAD, attempts=5, last_error="boom", serial_key="lane-1", result={"trigger": "at"})
        others = [make_wake(state) for state in State.values if state != State.DEAD]
        assert django_wakes.requeue(dead.pk) is True
        assert django_wakes.requeue(dead.pk) is False
        assert not any(django_wakes.requeue(w.pk) for w in others)
        assert django_wakes.requeue(10**12) is False
    dead.refresh_from_db()
    assert dead.state == State.PENDING
    assert (dead.attempts, dead.due_at, dead.lane_lock, dead.settled_at) == (0, START, None, None)
    assert (dead.last_error, dead.result) == ("boom", {"trigger": "at"})


def test_requeued_wake_fires_again() -> None:
    from django_wakes import engine

    assert django_wakes.requeue is engine.requeue
    with fake_clock(START) as fake:
        dead = make_wake(State.DEAD, attempts=5, last_error="boom", due_at=START - timedelta(hours=1))
        django_wakes.requeue(dead.pk)
        fake.advance("1s")
        report = django_wakes.run_due(runner_id="test-admin")
    assert report.outcomes == {dead.pk: Outcome.FIRED}
    dead.refresh_from_db()
    assert (dead.state, dead.attempts, dead.last_error) == (State.FIRED, 1, "")


def test_requeue_closes_a_recurring_chain_that_already_booked_its_successor() -> None:
    fire_at = START - timedelta(minutes=1)
    with fake_clock(START):
        dead = make_wake(State.DEAD, cron="* * * * *", chain_id="chain-1", fire_at=fire_at, attempts=5)
        one_shot_end = START + timedelta(days=1)
        plain = make_wake(State.DEAD, end_at=one_shot_end)
        assert django_wakes.requeue(dead.pk) and django_wakes.requeue(plain.pk)
    dead.refresh_from_db()
    plain.refresh_from_db()
    assert dead.end_at == fire_at
    assert plain.end_at == one_shot_end


# --------------------------------------------------------------------------------------------------
# Receipts and runners
# --------------------------------------------------------------------------------------------------


def test_receipt_pages_are_read_only_and_hide_the_owner(admin_client: Any) -> None:
    receipt = Receipt.objects.create(
        session_id="sess-9",
        key="charge-card",
        state=ReceiptState.DONE,
        result={"charge": "ch_1"},
        owner="f" * 32,
        lease_until=clock.now(),
        created_at=clock.now(),
        completed_at=clock.now(),
    )
    response = admin_client.get(reverse("admin:django_wakes_receipt_changelist"), {"q": "sess-9"})
    assert response.status_code == 200
    assert "charge-card" in response.content.decode()
    html = admin_client.get(reverse("admin:django_wakes_receipt_change", args=[receipt.pk])).content.decode()
    assert "ch_1" in html
    assert "f" * 32 not in html
    assert 'name="_save"' not in html
    assert admin_client.get(reverse("admin:django_wakes_receipt_add")).status_code == 403


def test_runner_page_tells_live_from_stale(admin_client: Any) -> None:
    with fake_clock(START):
        Runner.objects.create(id="host-a:1:aaa", host="host-a", pid=1, started_at=START, heartbeat_at=START)
        old = START - stale_after() - timedelta(seconds=1)
        Runner.objects.create(id="host-b:2:bbb", host="host-b", pid=2, started_at=old, heartbeat_at=old)
        url = reverse("admin:django_wakes_runner_changelist")
        html = admin_client.get(url).content.decode()
        assert ">live<" in html and ">stale<" in html
        live = admin_client.get(url, {"liveness": "live"}).context["cl"].result_list
        stale = admin_client.get(url, {"liveness": "stale"}).context["cl"].result_list
    assert [r.pk for r in live] == ["host-a:1:aaa"]
    assert [r.pk for r in stale] == ["host-b:2:bbb"]
    assert admin_client.get(reverse("admin:django_wakes_runner_add")).status_code == 403
