"""The operator console beyond read-only pages: what the list says, the hung and unwakeable filters,
the wake page's buttons (confirm, then an engine transition and a message), and the lanes page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_wakes
from django_wakes import clock
from django_wakes.console.display import compact_duration
from django_wakes.models import Outcome, PausedLane, Runner, State, TriggerType, Wake, WakeAttempt
from django_wakes.testing import fake_clock
from tests.factories import WakeFactory

pytestmark = pytest.mark.django_db

KIND = "test.console"
START = datetime(2030, 1, 1, tzinfo=UTC)
CHANGELIST = "admin:django_wakes_wake_changelist"
LANES = "admin:django_wakes_lanes"


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def page(client: Any, name: str = CHANGELIST, *args: Any, **params: str) -> Any:
    response = client.get(reverse(name, args=args), params)
    assert response.status_code == 200, response.status_code
    return response


def shown_ids(response: Any) -> set[int]:
    return {wake.pk for wake in response.context["cl"].result_list}


def wake_page(client: Any, wake: Wake) -> str:
    return page(client, "admin:django_wakes_wake_change", wake.pk).content.decode()


def operate_url(wake: Wake, operation: str) -> str:
    return reverse("admin:django_wakes_wake_operate", args=[wake.pk, operation])


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def staff(django_user_model: Any, name: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_wakes", codename__in=codenames)
    )
    return user


def firing(**fields: Any) -> Wake:
    values: dict[str, Any] = {
        "kind": KIND,
        "state": State.FIRING,
        "claim_token": "t" * 32,
        "claimed_at": clock.now(),
        "claimed_by": "host-a:1:aaa",
        "lease_until": clock.now() + timedelta(seconds=15),
        "attempts": 1,
    }
    values.update(fields)
    if values.get("serial_key"):
        values["lane_lock"] = values["serial_key"]
    return WakeFactory(**values)


def live_runner(runner_id: str = "host-a:1:aaa", kinds: list[str] | None = None) -> Runner:
    now = clock.now()
    return Runner.objects.create(id=runner_id, host="host-a", pid=1, started_at=now, heartbeat_at=now, kinds=kinds)


# --------------------------------------------------------------------------------------------------
# The list: triggers, times, tasks
# --------------------------------------------------------------------------------------------------


def test_triggers_are_shown_as_what_they_are(admin_client: Any) -> None:
    with fake_clock(START):
        django_wakes.schedule(workspace_id="w", kind=KIND, cron="0 9 * * MON-FRI", tz="Europe/Paris")
        django_wakes.schedule(workspace_id="w", kind=KIND, every="5m")
        django_wakes.schedule(workspace_id="w", kind=KIND, at=START + timedelta(hours=1, seconds=7))
        django_wakes.watch(workspace_id="w", kind=KIND, event_key="ci:pass:abc", expires_in="1h")
        django_wakes.request_approval(workspace_id="w", kind=KIND, prompt="ok?", expires_in="1h")
        html = page(admin_client).content.decode()
    text = re.sub(r"<(span|/span|wbr)[^>]*>", "", html).replace("&quot;", '"')  # keys break after ":" and "/"
    assert 'cron "0 9 * * MON-FRI" (Europe/Paris)' in text
    assert "every 5m" in html
    # today's time without its date (the date and UTC on hover), as the list shows times
    assert 'at <time datetime="2030-01-01T01:00:07+00:00" title="2030-01-01 01:00:07 UTC">01:00:07</time>' in html
    assert "event ci:pass:abc" in text
    assert '<td class="field-trigger">approval</td>' in html
    assert [compact_duration(timedelta(seconds=s)) for s in (90, 3600, 5400, 86400)] == ["1m30s", "1h", "1h30m", "1d"]


def test_a_recurring_wakes_trigger_and_chain_link_to_the_chain_page(admin_client: Any) -> None:
    chain = django_wakes.schedule(workspace_id="w", kind=KIND, every="15m")
    url = reverse("admin:django_wakes_chain", args=[chain.chain_id])
    assert f'<a href="{url}" title="the chain&#x27;s page">every 15m</a>' in page(admin_client).content.decode()
    assert f">{chain.chain_id}</a>" in wake_page(admin_client, chain)
    assert admin_client.get(url).status_code == 200


def test_times_are_in_the_operators_zone_to_the_second_with_utc_on_hover(admin_client: Any, settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", kind=KIND, at=START + timedelta(seconds=5))
        django_wakes.schedule(workspace_id="w", kind=KIND, at=START + timedelta(days=1, seconds=5))
        detail = wake_page(admin_client, wake)
        html = page(admin_client).content.decode()
    assert 'title="2030-01-01 00:00:05 UTC">2030-01-01 01:00:05 CET</time>' in detail
    # the list: today's times without their date, another day's with it
    assert 'title="2030-01-01 00:00:05 UTC">01:00:05</time>' in html
    assert 'title="2030-01-02 00:00:05 UTC"><span class="wake-date">2030-01-02</span> 01:00:05</time>' in html
    assert "(today's without their date)" in html
    assert "Times are in Europe/Paris" in html


def test_the_list_counts_at_most_ten_thousand_and_lists_kinds_without_scanning(admin_client: Any, sinks: Any) -> None:
    sinks("reports.export")
    Wake.objects.bulk_create(
        Wake(workspace_id="w", trigger_type=TriggerType.AT, kind=KIND, created_at=START, updated_at=START)
        for _ in range(10_001)
    )
    with CaptureQueriesContext(connection) as queries:
        html = page(admin_client).content.decode()
    assert "more than 10,000 wakes" in html
    assert not [q["sql"] for q in queries if "DISTINCT" in q["sql"].upper()]  # no filter lists its choices by scanning
    assert '?kind=reports.export"' in html and f'?kind={KIND}"' in html  # the registered kinds are the choices
    assert len(shown_ids(page(admin_client, kind="reports.export"))) == 0


def test_task_wakes_show_their_call_and_output(admin_client: Any, sinks: Any) -> None:
    sinks("django_wakes.task")
    wake = WakeFactory(
        kind="django_wakes.task",
        intent={"task": "shop.tasks.send_receipt", "args": [42, "eur"], "kwargs": {"retry": True}},
        output={"sent": 1},
        priority=5,
        queue_name="mail",
        settled=True,
    )
    html = page(admin_client).content.decode()
    assert "shop.tasks.send_receipt(42, &quot;eur&quot;, retry=true)" in html
    assert "{&quot;sent&quot;: 1}" in html
    assert ">mail<" in html and ">p5<" in html
    detail = wake_page(admin_client, wake)
    assert "<code>shop.tasks.send_receipt(42, &quot;eur&quot;, retry=true)</code>" in detail
    assert "&quot;sent&quot;: 1" in detail  # the output, as JSON


# --------------------------------------------------------------------------------------------------
# Hung and unwakeable
# --------------------------------------------------------------------------------------------------


def test_a_sink_hung_past_its_lease_under_a_live_runner_is_hung_not_lapsed(admin_client: Any, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    with fake_clock(START) as fake:
        live_runner(kinds=[KIND])
        hung = firing(claimed_at=START - timedelta(seconds=75))  # the runner keeps renewing its lease
        hung.lease_until = START + timedelta(seconds=10)
        hung.save()
        fresh = firing(claimed_at=START - timedelta(seconds=2))
        gone = firing(claimed_at=START - timedelta(seconds=75), lease_until=START - timedelta(seconds=1))
        assert shown_ids(page(admin_client, attention="hung")) == {hung.pk}  # a lapsed lease is another story
        assert shown_ids(page(admin_client, attention="lapsed")) == {gone.pk}
        assert shown_ids(page(admin_client, attention="overdue")) == set()
        html = page(admin_client).content.decode()
        assert "hung: firing for 1m15s, longer than its lease (15s)" in html
        assert "firing for 2.0s" in html
        fake.advance("1s")
    assert fresh.pk not in shown_ids(page(admin_client, attention="hung"))


def test_hung_also_means_far_longer_than_the_kind_usually_takes(admin_client: Any, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "LEASE": "5m"}
    with fake_clock(START):
        for _ in range(6):
            done = WakeFactory(kind=KIND, settled=True)
            WakeAttempt.objects.create(
                wake=done,
                number=1,
                started_at=START - timedelta(hours=1),
                finished_at=START - timedelta(hours=1) + timedelta(milliseconds=200),
                outcome=Outcome.FIRED,
            )
        slow = firing(claimed_at=START - timedelta(seconds=8), lease_until=START + timedelta(minutes=5))
        usual = firing(claimed_at=START - timedelta(seconds=1), lease_until=START + timedelta(minutes=5))
        response = page(admin_client, attention="hung")
        assert shown_ids(response) == {slow.pk}
        assert f"firing for 8.0s; {KIND} usually takes 0.2s" in response.content.decode()
        assert usual.pk not in shown_ids(response)


def test_unwakeable_asks_the_live_runners_not_the_admins_registry(admin_client: Any, sinks: Any) -> None:
    sinks("only.in.admin")
    with fake_clock(START):
        live_runner(kinds=[KIND])
        fireable = WakeFactory(kind=KIND, due_at=START - timedelta(minutes=5))
        stranded = WakeFactory(kind="only.in.admin", due_at=START - timedelta(minutes=5))
        future = WakeFactory(kind="only.in.admin", due_at=START + timedelta(minutes=5))
        response = page(admin_client, attention="unwakeable")
        assert shown_ids(response) == {stranded.pk}
        assert shown_ids(page(admin_client, attention="overdue")) == {fireable.pk, stranded.pk}
        html = page(admin_client).content.decode()
        assert "unwakeable: no live runner fires kind only.in.admin" in html
    assert future.pk not in shown_ids(response)


def test_without_live_runners_recording_kinds_the_admins_registry_decides(admin_client: Any) -> None:
    with fake_clock(START):
        live_runner(kinds=None)  # a runner from before Runner.kinds
        registered = WakeFactory(kind=KIND, due_at=START - timedelta(minutes=5))
        unknown = WakeFactory(kind="nobody.has.this", due_at=START - timedelta(minutes=5))
        assert shown_ids(page(admin_client, attention="unwakeable")) == {unknown.pk}
        assert registered.pk in shown_ids(page(admin_client, attention="overdue"))


def test_a_runner_records_its_kinds_when_it_registers() -> None:
    from django_wakes.engine import runners

    runners.register("host-z:9:zzz", kinds=["b.kind", "a.kind"])
    assert Runner.objects.get(pk="host-z:9:zzz").kinds == ["a.kind", "b.kind"]


def test_runwakes_registers_with_the_kinds_of_its_registry(sinks: Any) -> None:
    from django_wakes.runner import Sweeper
    from django_wakes.sinks import registry

    sinks("only.on.runners")
    sweeper = Sweeper(interval=0.05, lease=timedelta(seconds=30), listen=False)
    sweeper._register()  # what run() does first
    kinds = Runner.objects.get(pk=sweeper.runner_id).kinds
    assert kinds == registry.kinds() and "only.on.runners" in kinds


# --------------------------------------------------------------------------------------------------
# The wake page: attempts, in flight, runner links
# --------------------------------------------------------------------------------------------------


def test_a_lapsed_wake_shows_its_in_flight_attempt_and_links_its_runner(admin_client: Any) -> None:
    with fake_clock(START):
        live_runner("host-a:1:aaa")
        lapsed = firing(lease_until=START - timedelta(seconds=30), claimed_at=START - timedelta(seconds=45))
        WakeAttempt.objects.create(
            wake=lapsed,
            number=0,
            runner_id="host-gone:2:bbb",
            started_at=START - timedelta(minutes=5),
            finished_at=START - timedelta(minutes=4),
            outcome=Outcome.ABANDONED,
            error_type="",
        )
        html = wake_page(admin_client, lapsed)
    runner_url = reverse("admin:django_wakes_runner_change", args=[quote("host-a:1:aaa")])
    assert "attempt 1 · claimed by" in html
    assert f'<a href="{runner_url}">host-a:1:aaa</a>' in html  # in flight, and "claimed by"
    assert html.count(f'<a href="{runner_url}">') == 2
    assert 'class="wake-lapsed">lapsed' in html
    assert "lease lapsed 30s ago: its runner is gone" in html  # the why: lapsed, not hung
    assert "hung:" not in html
    assert "host-gone:2:bbb <span" in html and "(gone)" in html  # its row aged out: no dead link


def test_the_attempt_history_shows_error_types(admin_client: Any) -> None:
    wake = WakeFactory(kind=KIND, state=State.DEAD, attempts=1, last_error="ValueError: bad")
    WakeAttempt.objects.create(
        wake=wake,
        number=1,
        runner_id="r",
        started_at=clock.now(),
        finished_at=clock.now(),
        outcome=Outcome.FAILED,
        error="ValueError: bad",
        error_type="builtins.ValueError",
    )
    assert "builtins.ValueError" in wake_page(admin_client, wake)


def page_fields(html: str) -> set[str]:
    """The fields of a wake page's fieldsets (``<div class="form-row field-x">``), not the attempts' columns."""
    return set(re.findall(r'<div class="form-row[^"]* field-([a-z_]+)"', html))


def test_the_wake_page_leaves_out_empty_fields_and_shows_the_attempts_near_the_top(admin_client: Any) -> None:
    wake = WakeFactory(kind=KIND, state=State.DEAD, attempts=1, settled_at=clock.now(), last_error="ValueError: bad")
    WakeAttempt.objects.create(
        wake=wake, number=1, runner_id="r", started_at=clock.now(), finished_at=clock.now(), outcome=Outcome.FAILED
    )
    html = wake_page(admin_client, wake)
    fields = page_fields(html)
    assert {"state", "why_now", "kind", "queue_name", "attempts", "settled_at_s", "last_error_details"} <= fields
    empty = {"event_key", "prompt", "in_flight", "claimed_by_link", "lane_lock", "result_json", "expires_at_s",
             "guarded", "start_guard", "priority", "depth", "fence", "chain", "what_it_does"}  # fmt: skip
    assert fields & empty == set()
    assert len(fields) <= 18, sorted(fields)  # of the 41 the page can show
    assert ">Recurrence<" not in html and ">Trigger<" not in html  # fieldsets with nothing to show are gone
    assert html.index('id="attempt_log-group"') < html.index(">Identity<")  # right after state, why and trigger
    assert "icon-no.svg" not in html


def test_a_guarded_wakes_page_says_its_sink_starts_are_recorded_in_words(admin_client: Any) -> None:
    wake = WakeFactory(kind=KIND, guarded=True, priority=3)
    html = wake_page(admin_client, wake)
    assert "yes: a runner died holding this wake, so each claim records when its sink starts" in html
    assert "icon-yes.svg" not in html and "icon-no.svg" not in html
    assert {"start_guard", "priority"} <= page_fields(html)  # not the default: shown


# --------------------------------------------------------------------------------------------------
# The wake page's buttons
# --------------------------------------------------------------------------------------------------


def test_only_the_buttons_that_apply_are_shown(admin_client: Any) -> None:
    pending = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    dead = WakeFactory(kind=KIND, state=State.DEAD)
    watcher = django_wakes.watch(workspace_id="w", kind=KIND, event_key="k", expires_in="1h")
    shown = {
        name: {
            op for op in ("fire_now", "reschedule", "extend_expiry", "retry", "cancel") if operate_url(w, op) in html
        }
        for name, w in (("pending", pending), ("dead", dead), ("watcher", watcher))
        for html in [wake_page(admin_client, w)]
    }
    assert shown == {
        "pending": {"fire_now", "reschedule", "cancel"},
        "dead": {"retry"},
        "watcher": {"extend_expiry", "cancel"},
    }


def test_a_button_asks_first_then_runs_the_transition_and_says_so(admin_client: Any) -> None:
    wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    confirm = page(admin_client, "admin:django_wakes_wake_operate", wake.pk, "cancel").content.decode()
    assert "Cancel this wake" in confirm and 'name="confirm"' in confirm
    assert Wake.objects.get(pk=wake.pk).state == State.PENDING  # a GET changes nothing
    response = admin_client.post(operate_url(wake, "cancel"), follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:django_wakes_wake_change", args=[wake.pk])
    assert messages_of(response) == [f"Wake {wake.pk} was cancelled."]
    assert Wake.objects.get(pk=wake.pk).state == State.CANCELLED
    assert LogEntry.objects.filter(object_id=str(wake.pk), change_message__contains="was cancelled").exists()


def test_a_refused_button_says_why_and_changes_nothing(admin_client: Any) -> None:
    wake = firing()
    response = admin_client.post(operate_url(wake, "reschedule"), {"at": "2030-01-02T09:00:00"}, follow=True)
    assert messages_of(response) == [f"Not done: wake {wake.pk} is firing: it cannot be rescheduled until it settles."]
    assert Wake.objects.get(pk=wake.pk).fire_at == wake.fire_at


def test_reschedule_reads_the_time_in_the_operators_zone(admin_client: Any, settings: Any) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
        response = admin_client.post(operate_url(wake, "reschedule"), {"at": "2030-01-02T09:00:05"}, follow=True)
    moved = datetime(2030, 1, 2, 8, 0, 5, tzinfo=UTC)
    assert messages_of(response) == [f"Wake {wake.pk} is now due at {moved.isoformat()}."]
    assert Wake.objects.get(pk=wake.pk).fire_at == moved


def test_a_bad_time_is_a_form_error_not_a_change(admin_client: Any) -> None:
    watcher = django_wakes.watch(workspace_id="w", kind=KIND, event_key="k", expires_in="1h")
    response = admin_client.post(operate_url(watcher, "extend_expiry"), {"at": "not a time"})
    assert response.status_code == 200
    assert "Enter a valid date/time." in response.content.decode()
    assert Wake.objects.get(pk=watcher.pk).expires_at == watcher.expires_at


def test_fire_now_and_retry_from_the_page(admin_client: Any, calls: Any) -> None:
    with fake_clock(START):
        wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="3d")
        response = admin_client.post(operate_url(wake, "fire_now"), follow=True)
        assert messages_of(response) == [f"Wake {wake.pk} is due now; the next runner pass fires it."]
        assert django_wakes.run_due().fired == 1
        dead = WakeFactory(kind=KIND, state=State.DEAD, attempts=5)
        response = admin_client.post(operate_url(dead, "retry"), follow=True)
        assert messages_of(response) == [f"Wake {dead.pk} was requeued with fresh attempts; it is due now."]
        assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk, dead.pk]


def test_unknown_operations_and_wakes_are_404(admin_client: Any) -> None:
    wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    assert admin_client.post(operate_url(wake, "delete")).status_code == 404
    assert admin_client.get(reverse("admin:django_wakes_wake_operate", args=[10**9, "cancel"])).status_code == 404


@pytest.mark.parametrize("codenames", [("view_wake",), ("view_wake", "change_wake")])
def test_without_the_operate_permission_no_buttons_and_403(
    client: Any, django_user_model: Any, codenames: tuple[str, ...]
) -> None:
    client.force_login(staff(django_user_model, "viewer", *codenames))
    wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    html = wake_page(client, wake)
    assert "/operate/" not in html
    for operation in ("cancel", "fire_now", "reschedule", "retry", "extend_expiry"):
        assert client.get(operate_url(wake, operation)).status_code == 403
        assert client.post(operate_url(wake, operation), {"at": "2031-01-01T00:00:00"}).status_code == 403
    row = Wake.objects.get(pk=wake.pk)
    assert (row.state, row.due_at, row.fire_at) == (State.PENDING, wake.due_at, wake.fire_at)
    lanes = reverse(LANES)
    assert client.post(lanes, {"lane": "acct:1", "do": "pause"}).status_code == 403
    assert not PausedLane.objects.exists()
    assert "Pause this lane" not in client.get(lanes, {"lane": "acct:1"}).content.decode()


def test_the_operate_permission_is_enough(client: Any, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model, "operator", "view_wake", "operate_wake"))
    wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    assert operate_url(wake, "cancel") in wake_page(client, wake)
    client.post(operate_url(wake, "cancel"))
    assert Wake.objects.get(pk=wake.pk).state == State.CANCELLED


# --------------------------------------------------------------------------------------------------
# Lanes
# --------------------------------------------------------------------------------------------------


def test_the_lanes_page_shows_holders_queues_and_pauses(admin_client: Any) -> None:
    with fake_clock(START):
        holder = firing(serial_key="acct/1", claimed_at=START - timedelta(seconds=12))
        queued = [
            django_wakes.schedule(workspace_id="w", kind=KIND, serial_key="acct/1", at=START + timedelta(seconds=i))
            for i in (1, 2, 3, 4)
        ]
        stuck = WakeFactory(kind=KIND, serial_key="acct/2", due_at=START - timedelta(minutes=1))
        PausedLane.objects.create(serial_key="acct/2", paused_at=START, paused_by="alice", reason="refunds frozen")
        html = page(admin_client, LANES).content.decode()
        detail = page(admin_client, LANES, lane="acct/1").content.decode()
    busy = html[html.index('id="busy-lanes"') : html.index('id="waiting-lanes"')]
    assert f">{holder.pk}</a> {KIND}" in busy and "?lane=acct%2F1" in busy
    assert ">4<" in busy  # waiting behind it
    assert all(f">{w.pk}</a>" in busy for w in queued[:3]) and f">{queued[3].pk}</a>" not in busy  # the next three
    waiting = html[html.index('id="waiting-lanes"') : html.index('id="paused-lanes"')]
    assert f">{stuck.pk}</a>" in waiting and 'class="paused"' in waiting
    assert "refunds frozen" in html
    assert f"wake {holder.pk} ({KIND})" in detail and 'id="lane-waiting">4<' in detail
    assert [detail.index(f">{w.pk}</a>") for w in queued] == sorted(detail.index(f">{w.pk}</a>") for w in queued)


def test_a_wake_held_back_by_a_paused_lane_says_so(admin_client: Any) -> None:
    with fake_clock(START):
        wake = WakeFactory(kind=KIND, serial_key="acct/5", due_at=START - timedelta(minutes=2))
        PausedLane.objects.create(serial_key="acct/5", paused_at=START, paused_by="ops")
        assert "lane acct/5 is paused: it fires once the lane is resumed" in wake_page(admin_client, wake)


def why_of(response: Any, wake: Wake) -> str:
    """The "why" cell of one wake's row in the list."""
    html = response.content.decode()
    row = html[html.index(f'<th class="field-id"><a href="/admin/django_wakes/wake/{wake.pk}/change/"') :]
    row = row[: row.index("</tr>")]
    return row[row.index('class="field-why"') :]


def test_a_wake_held_by_its_lane_names_the_wake_ahead_and_its_state(admin_client: Any, settings: Any) -> None:
    """Queued behind a hung holder, a lapsed one, a running one, or a pending head no runner fires."""
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    with fake_clock(START):
        live_runner(kinds=[KIND])
        hung = firing(
            serial_key="acct/1", claimed_at=START - timedelta(seconds=75), lease_until=START + timedelta(seconds=9)
        )
        behind_hung = WakeFactory(kind=KIND, serial_key="acct/1", due_at=START - timedelta(seconds=75))
        gone = firing(
            serial_key="acct/2", claimed_at=START - timedelta(seconds=60), lease_until=START - timedelta(seconds=40)
        )
        behind_gone = WakeFactory(kind=KIND, serial_key="acct/2", due_at=START - timedelta(seconds=30))
        running = firing(serial_key="acct/3", claimed_at=START - timedelta(seconds=3))
        behind_running = WakeFactory(kind=KIND, serial_key="acct/3", due_at=START - timedelta(seconds=2))
        head = WakeFactory(kind="nobody.fires.this", serial_key="acct/4", due_at=START - timedelta(minutes=5))
        behind_head = WakeFactory(kind=KIND, serial_key="acct/4", due_at=START - timedelta(minutes=1))
        not_due = WakeFactory(kind=KIND, serial_key="acct/1", due_at=START + timedelta(minutes=1))
        response = page(admin_client)
        link = '<a href="/admin/django_wakes/wake/{}/change/" title="{}">{}</a>'
        why = why_of(response, behind_hung)
        assert 'class="wake-lane-held"' in why and link.format(hung.pk, KIND, hung.pk) in why
        held = f"lane held by wake {link.format(hung.pk, KIND, hung.pk)}, "
        assert held + "hung: firing for 1m15s, longer than its lease (15s)" in why
        why = why_of(response, behind_gone)
        assert 'class="wake-lane-held"' in why and link.format(gone.pk, KIND, gone.pk) in why
        assert "lease lapsed 40s ago" in why
        why = why_of(response, behind_running)
        assert 'class="wake-lane-waits"' in why and link.format(running.pk, KIND, running.pk) in why
        assert "firing since <time" in why and "2029-12-31 23:59:57" in why
        why = why_of(response, behind_head)
        assert 'class="wake-lane-held"' in why and link.format(head.pk, "nobody.fires.this", head.pk) in why
        assert (
            "waits in its lane behind wake" in why and "unwakeable: no live runner fires kind nobody.fires.this" in why
        )
        assert "behind wake" not in why_of(response, not_due)  # not due yet: nothing holds it back
        assert "behind wake" not in why_of(response, head)  # the head itself is unwakeable, not held
        assert "hung: firing for 1m15s" in wake_page(admin_client, behind_hung)  # the wake page says it too
        lanes = page(admin_client, LANES).content.decode()
        busy = lanes[lanes.index('id="busy-lanes"') : lanes.index('id="waiting-lanes"')]
        assert '<strong class="wake-lane-held">hung: firing for 1m15s, longer than its lease (15s)</strong>' in busy
        assert "lease lapsed 40s ago" in busy and "firing since <time" in busy
        detail = page(admin_client, LANES, lane="acct/1").content.decode()
        assert "hung: firing for 1m15s" in detail[detail.index('id="lane-holder-state"') :]


def test_the_lanes_of_a_list_page_are_read_in_a_bounded_number_of_queries(
    admin_client: Any, django_assert_max_num_queries: Any
) -> None:
    with fake_clock(START):
        live_runner(kinds=[KIND])
        for lane in range(20):
            firing(serial_key=f"acct/{lane}", claimed_at=START - timedelta(seconds=3), claimed_by="host-a:1:aaa")
            WakeFactory(kind=KIND, serial_key=f"acct/{lane}", due_at=START - timedelta(seconds=1))
        with django_assert_max_num_queries(20):  # one query for the 20 holders, not one per row
            html = page(admin_client).content.decode()
        assert html.count('class="wake-lane-waits"') == 20


def test_a_dead_letters_why_is_red(admin_client: Any) -> None:
    with fake_clock(START):
        dead = WakeFactory(
            kind=KIND, state=State.DEAD, attempts=5, settled_at=START, last_error="Traceback\nKeyError: 'x'"
        )
        silent = WakeFactory(kind=KIND, state=State.DEAD, attempts=5, settled_at=START, last_error="")
        response = page(admin_client)
    assert '<strong class="wake-dead" title="KeyError: &#x27;x&#x27;">dead: KeyError: &#x27;x&#x27;</strong>' in why_of(
        response, dead
    )
    assert "dead: failed every attempt" in why_of(response, silent)


def test_pause_and_resume_a_lane_from_its_page(admin_client: Any, calls: Any) -> None:
    with fake_clock(START) as fake:
        wake = django_wakes.schedule(workspace_id="w", kind=KIND, serial_key="team/a:b", delay="1s")
        response = admin_client.post(
            reverse(LANES), {"lane": "team/a:b", "do": "pause", "reason": "bad deploy"}, follow=True
        )
        assert response.redirect_chain[-1][0] == reverse(LANES) + "?lane=team%2Fa%3Ab"
        assert messages_of(response) == ["Lane team/a:b paused: no further wake of it is claimed until resumed."]
        paused = PausedLane.objects.get(serial_key="team/a:b")
        assert (paused.paused_by, paused.reason) == ("admin", "bad deploy")
        fake.advance("5s")
        assert django_wakes.run_due().fired == 0
        assert "Resume this lane" in response.content.decode()
        response = admin_client.post(reverse(LANES), {"lane": "team/a:b", "do": "resume"}, follow=True)
        assert messages_of(response) == ["Lane team/a:b resumed: its next wake is claimable now."]
        assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]


def test_pausing_a_paused_lane_says_so_and_a_bad_lane_is_refused(admin_client: Any) -> None:
    admin_client.post(reverse(LANES), {"lane": "l1", "do": "pause"}, follow=True)
    response = admin_client.post(reverse(LANES), {"lane": "l1", "do": "pause"}, follow=True)
    assert messages_of(response) == ["Lane l1 was already paused."]
    response = admin_client.post(reverse(LANES), {"lane": "x" * 300, "do": "pause"}, follow=True)
    assert messages_of(response)[0].startswith("Not done:")
    assert list(PausedLane.objects.values_list("serial_key", flat=True)) == ["l1"]


def test_the_lanes_page_stays_bounded(admin_client: Any, django_assert_max_num_queries: Any) -> None:
    """However long a lane's queue, the page reads a bounded number of rows and queries."""
    with fake_clock(START):
        firing(serial_key="big")
        Wake.objects.bulk_create(
            Wake(
                workspace_id="w",
                trigger_type=TriggerType.AT,
                kind=KIND,
                serial_key="big",
                fire_at=START,
                due_at=START,
                created_at=START,
                updated_at=START,
            )
            for _ in range(1100)
        )
        with django_assert_max_num_queries(20):
            html = page(admin_client, LANES).content.decode()
    assert ">1000+<" in html


def test_every_console_post_needs_the_csrf_token(django_user_model: Any) -> None:
    """The wake buttons, the lanes page and the chain page change rows: a forged POST is refused, nothing changes."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    wake = django_wakes.schedule(workspace_id="w", kind=KIND, delay="1h")
    chain = django_wakes.schedule(workspace_id="w", kind=KIND, cron="0 * * * *", tz="UTC")
    forged = [
        (operate_url(wake, "cancel"), {}),
        (operate_url(wake, "fire_now"), {}),
        (reverse(LANES), {"lane": "acct:1", "do": "pause"}),
        (reverse("admin:django_wakes_chain", args=[chain.chain_id]), {"action": "pause", "confirmed": "yes"}),
    ]
    for url, data in forged:
        assert client.post(url, data).status_code == 403, url
    assert Wake.objects.get(pk=wake.pk).state == State.PENDING
    assert Wake.objects.get(pk=chain.pk).paused_at is None
    assert not PausedLane.objects.exists()
