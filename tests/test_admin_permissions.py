"""Operator actions need the ``operate_wake`` permission; "change" does not grant them, and "operate" alone,
without the view permission every console page asks for, opens nothing either."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.urls import reverse

import django_wakes
from django_wakes import engine
from django_wakes.models import PausedLane, State, Wake
from tests.factories import WakeFactory

pytestmark = pytest.mark.django_db

KIND = "test.admin.perms"
CHANGELIST = "admin:django_wakes_wake_changelist"
OPERATE = "admin:django_wakes_wake_operate"
LANES = "admin:django_wakes_lanes"
CHAIN = "admin:django_wakes_chain"
#: The time the reschedule and extend-expiry forms ask for (the operator's zone: UTC in the test project).
LATER = {"at": "2031-01-01 00:00:00"}


@pytest.fixture(autouse=True)
def kind(sinks: Any) -> str:
    sinks(KIND)
    return KIND


def staff(django_user_model: Any, name: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_wakes", codename__in=codenames)
    )
    return user


def pending_wake() -> Wake:
    return django_wakes.schedule(workspace_id="ws-perms", delay="1h", kind=KIND)


def test_change_permission_alone_runs_no_action(client: Any, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model, "changer", "view_wake", "change_wake"))
    wake = pending_wake()
    html = client.get(reverse(CHANGELIST)).content.decode()
    assert "cancel_pending" not in html and "retry_dead" not in html
    forged = client.post(reverse(CHANGELIST), {"action": "cancel_pending", "_selected_action": [wake.pk]})
    assert forged.status_code in (200, 302)
    wake.refresh_from_db()
    assert wake.state == State.PENDING  # the action did not run


def test_operate_permission_runs_the_actions(client: Any, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model, "operator", "view_wake", "operate_wake"))
    wake = pending_wake()
    html = client.get(reverse(CHANGELIST)).content.decode()
    assert "cancel_pending" in html and "retry_dead" in html
    client.post(reverse(CHANGELIST), {"action": "cancel_pending", "_selected_action": [wake.pk]}, follow=True)
    wake.refresh_from_db()
    assert wake.state == State.CANCELLED


def test_the_change_form_stays_read_only_for_operators(client: Any, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model, "operator2", "view_wake", "operate_wake", "change_wake"))
    wake = pending_wake()
    url = reverse("admin:django_wakes_wake_change", args=[wake.pk])
    page = client.get(url)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(url, {"kind": "other"}).status_code == 403


@pytest.fixture
def targets() -> dict[str, Wake]:
    """For each button of the wake page, a wake it applies to."""
    pending = pending_wake()
    watcher = django_wakes.watch(workspace_id="ws-perms", kind=KIND, event_key="ci:pass", expires_in="1h")
    dead = WakeFactory(kind=KIND, state=State.DEAD, attempts=5)
    return {"fire_now": pending, "reschedule": pending, "extend_expiry": watcher, "retry": dead, "cancel": pending}


def rows() -> list[dict[str, Any]]:
    """Every wake, every column: what a refused request must leave exactly as it was."""
    return list(Wake.objects.order_by("pk").values())


def test_operate_without_view_opens_no_wake_operation(client: Any, django_user_model: Any, targets: Any) -> None:
    """The wake's buttons ask the view permission like the list, the wake page, lanes and chains do."""
    client.force_login(staff(django_user_model, "blind-operator", "operate_wake"))
    before = rows()
    for operation, wake in targets.items():
        url = reverse(OPERATE, args=[wake.pk, operation])
        shown = client.get(url)
        assert shown.status_code == 403, operation
        assert KIND not in shown.content.decode()  # the confirmation page told nothing of the wake
        assert client.post(url, LATER).status_code == 403, operation
        assert client.post(url, LATER, follow=True).status_code == 403, operation
    assert rows() == before
    assert not LogEntry.objects.exists()
    # ... as every other page of the console refuses this user.
    wake = targets["fire_now"]
    for name, args in ((CHANGELIST, []), ("admin:django_wakes_wake_change", [wake.pk]), (LANES, [])):
        assert client.get(reverse(name, args=args)).status_code == 403, name


def test_operate_without_view_runs_no_bulk_action_lane_or_chain_button(client: Any, django_user_model: Any) -> None:
    client.force_login(staff(django_user_model, "blind-operator2", "operate_wake"))
    pending = pending_wake()
    dead = WakeFactory(kind=KIND, state=State.DEAD, attempts=5)
    chain = django_wakes.schedule(workspace_id="ws-perms", kind=KIND, cron="0 * * * *", tz="UTC")
    engine.pause_lane("acct:2", by="ops", reason="kept")
    before = rows()
    for action, wake in (("cancel_pending", pending), ("retry_dead", dead)):
        response = client.post(reverse(CHANGELIST), {"action": action, "_selected_action": [wake.pk]})
        assert response.status_code == 403, action
    assert client.post(reverse(LANES), {"lane": "acct:1", "do": "pause"}).status_code == 403
    assert client.post(reverse(LANES), {"lane": "acct:2", "do": "resume"}).status_code == 403
    backfill = {"start": "2030-01-01 00:00", "end": "2030-01-01 06:00"}
    for action in ("pause", "resume", "trigger", "backfill"):
        for confirmed in ("", "yes"):  # the confirmation page, then the button itself
            data = {"action": action, "confirmed": confirmed, **backfill}
            assert client.post(reverse(CHAIN, args=[chain.chain_id]), data).status_code == 403, action
    assert client.get(reverse(CHAIN, args=[chain.chain_id])).status_code == 403
    assert rows() == before
    assert list(PausedLane.objects.values_list("serial_key", flat=True)) == ["acct:2"]
    assert not LogEntry.objects.exists()


def test_view_and_operate_run_every_wake_operation(client: Any, django_user_model: Any, targets: Any) -> None:
    client.force_login(staff(django_user_model, "operator3", "view_wake", "operate_wake"))
    for operation, wake in targets.items():
        confirm = client.get(reverse(OPERATE, args=[wake.pk, operation]))
        assert confirm.status_code == 200, operation
        assert 'name="confirm"' in confirm.content.decode()
    pending, watcher, dead = targets["fire_now"], targets["extend_expiry"], targets["retry"]
    for operation, wake in targets.items():  # fire now, reschedule, extend expiry, retry, then cancel
        response = client.post(reverse(OPERATE, args=[wake.pk, operation]), LATER)
        assert response.status_code == 302, operation
        assert response["Location"] == reverse("admin:django_wakes_wake_change", args=[wake.pk])
    watcher.refresh_from_db()
    dead.refresh_from_db()
    pending.refresh_from_db()
    assert watcher.expires_at is not None and watcher.expires_at.year == 2031
    assert dead.state == State.PENDING and dead.attempts == 0
    assert pending.state == State.CANCELLED and pending.fire_at is not None and pending.fire_at.year == 2031
    assert LogEntry.objects.count() == len(targets)
