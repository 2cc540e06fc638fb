"""Operator actions need the ``operate_wake`` permission; "change" does not grant them."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

import django_wakes
from django_wakes.models import State, Wake

pytestmark = pytest.mark.django_db

KIND = "test.admin.perms"
CHANGELIST = "admin:django_wakes_wake_changelist"


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
