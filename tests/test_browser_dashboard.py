"""The dashboard in a real Chromium on a 1500 px screen, as an operator on call opens it.

A day of history is made by the real engine under a fake clock (wakes fired late, a sink that fails
and buries its wakes, a recurring chain that skipped slots while its runners were down), then live
rows under the real clock: a backlog, overdue wakes of a kind no runner serves, event watchers, and
two runners holding wakes. The page must show those numbers, its charts must be labelled images whose
bars say what they stand for on hover, and it must fit the screen. The screenshot goes to
``docs/screenshots/dashboard.png`` when ``WAKES_SCREENSHOTS=docs/screenshots``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_wakes
from django_wakes import engine
from django_wakes.engine import runners as runner_rows
from django_wakes.models import State, Wake
from django_wakes.sinks import registry
from django_wakes.testing import fake_clock
from tests.browser import CHROMIUM_ARGS, Browser, browser_fixture, chromium_fixture  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WS = "acme"
WIDTH = 1500


@pytest.fixture
def wide(browser: Browser) -> Iterator[Browser]:
    """The browser at 1500 px wide for this test, back to its usual size afterwards."""
    width, height = (
        int(n) for n in next(a for a in CHROMIUM_ARGS if a.startswith("--window-size=")).split("=")[1].split(",")
    )
    browser.driver.set_window_size(WIDTH, 1000)
    try:
        yield browser
    finally:
        browser.driver.set_window_size(width, height)


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    """A staff user who may view wakes and runners (and do nothing else)."""
    user = django_user_model.objects.create_user("oncall", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_wake", "view_runner"]))
    return user


def log_in(browser: Browser, user: Any) -> None:
    client = Client()
    client.force_login(user)
    browser.visit(resolve_url(django_settings.LOGIN_URL))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    browser.driver.add_cookie({"name": cookie.key, "value": cookie.value})


def make_a_day(sinks: Any) -> dict[str, int]:
    """A day of history through the engine, then live rows; return what the page must show."""
    sinks("billing.invoice")
    sinks("reminder.email")
    sinks("report.nightly")
    sinks("sync.crm", then=RuntimeError("CRM API returned 503"))
    now = timezone.now()
    fired = 0
    with fake_clock(now - timedelta(hours=23, minutes=50)) as clock:
        chain = django_wakes.schedule(workspace_id=WS, kind="report.nightly", every="30m", catch_up="skip")
        step = 0
        while clock.now() < now - timedelta(minutes=2):
            # busier in the last hour; now and then a slow pass makes the wakes start late
            burst = 3 + step % 4 if clock.now() > now - timedelta(hours=1) else 1 + step % 3
            for index in range(burst):
                kind = ("billing.invoice", "reminder.email")[index % 2]
                django_wakes.schedule(workspace_id=WS, kind=kind, at=clock.now())
            if step % 9 == 0:
                django_wakes.schedule(workspace_id=WS, kind="sync.crm", at=clock.now(), max_attempts=1)
            clock.advance(timedelta(seconds=(0.05, 0.2, 0.4, 1.5, 6.0)[step % 5]))
            if clock.now() < now - timedelta(hours=6) or clock.now() > now - timedelta(hours=4):
                fired += django_wakes.run_due().fired  # the runners were down from 6 to 4 hours ago
            clock.advance(timedelta(minutes=2) if clock.now() > now - timedelta(hours=1) else timedelta(minutes=20))
            step += 1
    assert Wake.objects.filter(chain_id=chain.chain_id, result__has_key="missed").exists()
    # live rows, under the real clock
    for minutes in range(1, 40):
        django_wakes.schedule(workspace_id=WS, kind="reminder.email", delay=f"{minutes * 3 + 1}m")
    sinks("legacy.export")
    for _ in range(4):  # a kind whose sink was then removed: due, and no runner fires it
        django_wakes.schedule(workspace_id=WS, kind="legacy.export", at=now - timedelta(minutes=12))
    registry.unregister("legacy.export")
    for index in range(3):
        django_wakes.watch(workspace_id=WS, event_key=f"payment.received.{index}", kind="billing.invoice")
    runner_rows.register("web-1:4242:runner")
    runner_rows.register("web-2:4343:runner")
    for _ in range(3):
        django_wakes.schedule(workspace_id=WS, kind="billing.invoice", at=now)
    held = engine.claim_batch(runner_id="web-1:4242:runner", limit=2)
    held += engine.claim_batch(runner_id="web-2:4343:runner", limit=1)
    # a sink that has hung for 8 minutes under a live runner that keeps renewing its lease
    stuck = django_wakes.schedule(workspace_id=WS, kind="reminder.email", at=now - timedelta(minutes=8))
    Wake.objects.filter(pk=stuck.pk).update(
        state=State.FIRING,
        claimed_by="web-2:4343:runner",
        claimed_at=now - timedelta(minutes=8),
        lease_until=timezone.now() + timedelta(minutes=1),
        claim_token="h" * 32,
        attempts=1,
    )
    return {"fired": fired, "held": len(held) + 1}


def card(browser: Browser, label: str) -> int:
    return int(browser.find(f'[data-card="{label}"] .value').text)


def test_the_dashboard_at_a_glance(wide: Browser, operator: Any, sinks: Any, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "LEASE": "5m"}  # the hung wake has run 8 minutes: past the lease
    browser = wide
    made = make_a_day(sinks)
    log_in(browser, operator)
    browser.visit(reverse("admin:app_list", args=["django_wakes"]))
    browser.click(".wakes-dashboard-link a")
    assert browser.path == reverse("admin:django_wakes_dashboard")
    assert browser.driver.title.startswith("Wakes dashboard")

    assert card(browser, "overdue") == 4  # legacy.export: no sink, due 12 minutes ago
    assert card(browser, "unwakeable") == 4  # ... and told apart: no runner fires legacy.export
    assert card(browser, "hung") == 1  # firing for 8 minutes, longer than the 5-minute lease
    assert card(browser, "waiting") == 3
    assert card(browser, "firing") == made["held"] == 4
    assert card(browser, "live runners") == 2
    assert card(browser, "dead letters today") == Wake.objects.filter(state=State.DEAD).count() > 0
    assert card(browser, "due in the next hour") == 20  # reminders due in 4, 7, ... 58 minutes; the chain's next
    assert "alarm" in browser.find('[data-card="overdue"]').get_attribute("class")

    kinds = browser.text("#kinds")
    assert "legacy.export no live runner fires it" in kinds and "reminder.email" in kinds
    runners = browser.text("#runners")
    assert "web-1:4242:runner" in runners and "web-2:4343:runner" in runners
    assert browser.driver.find_elements("css selector", "#runners ul.held a")  # links to the held wakes

    lateness = browser.text("#lateness")
    assert "last hour" in lateness and "last 24 hours" in lateness
    assert "skip" in browser.text("#missed")

    charts = browser.driver.find_elements("css selector", "svg.wakes-chart[role=img]")
    assert len(charts) == 4
    for chart in charts:
        title_id, desc_id = chart.get_attribute("aria-labelledby").split()
        assert browser.find(f"#{title_id}").get_attribute("textContent")
        assert browser.find(f"#{desc_id}").get_attribute("textContent")
    hovers = [
        el.get_attribute("textContent")
        for el in browser.driver.find_elements("css selector", "#fires-hour-title ~ g.bar > title")
    ]
    assert len(hovers) == 60 and all("fires" in text and "failures" in text for text in hovers)
    assert sum(int(text.split("fires ")[1].split(",")[0]) for text in hovers) > 0

    overflow = browser.driver.execute_script("return document.documentElement.scrollWidth")
    assert overflow <= WIDTH, f"the page is {overflow} px wide on a {WIDTH} px screen"
    # the admin's body is as tall as the window: make the window as tall as the page for the picture
    height = browser.driver.execute_script("return document.documentElement.scrollHeight")
    browser.driver.set_window_size(WIDTH, height + 140)
    browser.screenshot("dashboard")

    browser.click('[data-card="overdue"] a')
    assert "attention=overdue" in browser.url


def test_anonymous_visitors_land_on_the_admin_login(wide: Browser) -> None:
    wide.visit(reverse("admin:django_wakes_dashboard"))
    assert wide.path.startswith(reverse("admin:login"))
    assert wide.driver.find_elements("css selector", "form#login-form")


def test_staff_without_the_view_permission_are_refused(wide: Browser, django_user_model: Any) -> None:
    log_in(wide, django_user_model.objects.create_user("intern", is_staff=True))
    wide.visit(reverse("admin:django_wakes_dashboard"))
    status = wide.driver.execute_script("return performance.getEntriesByType('navigation')[0].responseStatus")
    assert status == 403
    assert not wide.driver.find_elements("css selector", "svg.wakes-chart")
