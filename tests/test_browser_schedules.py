"""A recurring chain's page in a real Chromium on a 1500 px screen: what an operator does with a schedule.

A nightly backup chain in Paris has fired, failed once, and lost two nights to an outage (``skip``).
The operator opens its page from the wake, reads its history and its next fire times across the
October change (marked), fires it once by hand, backfills the lost nights, pauses and resumes it —
each button asks first and says what it did. A user without ``operate_wake`` sees no buttons.
Screenshots (``chain-*.png``) are the ones ``docs/operations.md`` shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes.models import State, Wake
from django_wakes.sinks import Retry, registry
from django_wakes.testing import FakeClock, fake_clock
from tests.browser import Browser, _loaded, _stale, browser_fixture, chromium_fixture  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KIND = "backups.nightly"
WIDTH = 1500
START = datetime(2026, 10, 18, 12, tzinfo=UTC)  # a Sunday; Paris falls back on Sunday 25 October
ADMIN_BUTTON = "rgba(65, 118, 144, 1)"  # the admin's --button-bg (#417690; a browser's own button is grey)


@pytest.fixture
def night_clock() -> Iterator[FakeClock]:
    with fake_clock(START) as clock:
        yield clock


def log_in(browser: Browser, user: Any) -> None:
    client = Client()
    client.force_login(user)
    browser.visit(resolve_url(django_settings.LOGIN_URL))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    browser.driver.add_cookie({"name": cookie.key, "value": cookie.value})


@pytest.fixture
def wide(browser: Browser) -> Iterator[Browser]:
    width, height = browser.driver.get_window_size().values()
    browser.driver.set_window_size(WIDTH, 1000)
    try:
        yield browser
    finally:
        browser.driver.set_window_size(width, height)


def press(browser: Browser, css: str) -> None:
    """Click a button and wait for the page it leads to."""
    from selenium.webdriver.support.ui import WebDriverWait

    old = browser.find("html")
    browser.click(css)
    WebDriverWait(browser.driver, 10).until(lambda _: _stale(old))
    WebDriverWait(browser.driver, 10).until(lambda driver: _loaded(driver))


def screenshot(browser: Browser, name: str) -> None:
    """The whole page (the admin's body ends at the window, so measure the document), 1500 px wide."""
    height = browser.driver.execute_script("return document.documentElement.scrollHeight")
    browser.driver.set_window_size(WIDTH, height + 140)  # the window's own frame above the page
    try:
        browser.screenshot(name)
    finally:
        browser.driver.set_window_size(WIDTH, 1000)


def a_week_of_backups(clock: FakeClock) -> Wake:
    """Three nights fired (the second after one failed attempt), then two lost to an outage."""
    failed_once: set[int] = set()

    def backup(wake: Wake, result: dict[str, Any]) -> Any:
        if result["slot"].startswith("2026-10-20") and wake.pk not in failed_once:
            failed_once.add(wake.pk)
            return Retry(reason="pg_dump: connection to primary lost")
        return None

    registry.register(KIND, backup, replace=True)
    first = django_wakes.schedule(
        workspace_id="acme-prod",
        kind=KIND,
        cron="30 2 * * *",
        tz="Europe/Paris",
        catch_up="skip",
        serial_key="db/primary",
        intent={"database": "primary", "to": "s3://acme-backups/nightly"},
    )
    for _ in range(3):
        (due,) = Wake.objects.filter(chain_id=first.chain_id, state=State.PENDING)
        clock.set(due.due_at)
        while Wake.objects.filter(pk=due.pk, state=State.PENDING).exists():
            django_wakes.run_due()
            clock.advance("2m")
    clock.set(datetime(2026, 10, 23, 9, 15, tzinfo=UTC))  # the runners were down from the 21st to now
    django_wakes.run_due()  # skip: the 22nd and 23rd are dropped, the 24th booked
    return first


def test_the_chain_page_shows_history_next_times_and_runs_its_buttons(
    wide: Browser, admin_user: Any, night_clock: FakeClock, django_user_model: Any
) -> None:
    browser = wide
    first = a_week_of_backups(night_clock)
    chain = first.chain_id
    log_in(browser, admin_user)
    browser.visit(reverse("admin:django_wakes_chain", args=[chain]))
    assert not browser.driver.find_elements("css selector", "#nav-sidebar")  # the whole width, as the console's pages

    # Styled like the rest of the console: the admin's buttons, times typed on the 24-hour clock.
    for button in ("#chain-pause", "#chain-trigger", "#chain-backfill"):
        assert browser.find(button).value_of_css_property("background-color") == ADMIN_BUTTON, button
    start = browser.find('[name="start"]')
    assert start.get_attribute("type") == "text" and start.get_attribute("placeholder") == "YYYY-MM-DD HH:MM"
    assert start.get_attribute("value") == "2026-10-22 09:15"  # a day before now (the 23rd, 09:15 UTC), in UTC
    assert "24-hour times in UTC" in browser.text("#chain-backfill-form legend")

    assert browser.text("#chain-schedule") == "cron 30 2 * * * (Europe/Paris)"
    history = browser.text("#chain-history")
    assert "skipped by catch-up (2 missed)" in history
    assert "Tue 2026-10-20 02:30:00 CEST" in history
    upcoming = browser.text("#chain-upcoming")
    assert "Sat 2026-10-24 02:30:00 CEST" in upcoming  # the booked occurrence comes first
    assert "repeated 02:30: the first one (CEST)" in upcoming  # 25 October, before the clocks go back
    assert "clocks go back 03:00 → 02:00 (CEST → CET)" in upcoming
    assert "Mon 2026-10-26 02:30:00 CET" in upcoming and "2026-10-26 01:30:00Z" in upcoming

    # Trigger now: asks, then one extra firing, the schedule untouched.
    press(browser, "#chain-trigger")
    assert "This is one extra firing" in browser.text("#chain-confirm-text")
    press(browser, "#chain-confirm")
    assert "fires now, once; the schedule is unchanged" in browser.text(".messagelist")
    assert Wake.objects.filter(chain_id=chain, result__manual=True, state=State.PENDING).count() == 1

    # Backfill the two lost nights (typed in the operator's zone, UTC; the confirmation gives Paris time too).
    browser.fill("start", "2026-10-22 00:00")
    browser.fill("end", "2026-10-23 12:00")
    press(browser, "#chain-backfill")
    assert "Backfill chain" in browser.text("#chain-confirm-text")
    assert "from 2026-10-22 00:00 UTC (02:00 CEST in Europe/Paris)" in browser.text("#chain-confirm-text")
    assert "until 2026-10-23 12:00 UTC (14:00 CEST in Europe/Paris)" in browser.text("#chain-confirm-text")
    assert browser.find("#chain-confirm").value_of_css_property("background-color") != "rgba(239, 239, 239, 1)"
    assert "The range holds 2 slots of the schedule up to now." in browser.text("#chain-confirm-text")
    screenshot(browser, "chain-confirm-backfill")
    press(browser, "#chain-confirm")
    assert "2 slot(s) booked; 1 of them skipped earlier by catch-up" in browser.text(".messagelist")
    backfilled = Wake.objects.filter(chain_id=chain, result__backfill=True).order_by("fire_at")
    assert [w.fire_at for w in backfilled] == [
        datetime(2026, 10, 22, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 23, 0, 30, tzinfo=UTC),
    ]

    # Pause: the booked occurrence is held; the page says so.
    press(browser, "#chain-pause")
    press(browser, "#chain-confirm")
    assert "is paused: 3 pending occurrence(s) held" in browser.text(".messagelist")
    assert browser.text("#chain-status").startswith("paused")
    held = Wake.objects.get(chain_id=chain, fire_at=datetime(2026, 10, 24, 0, 30, tzinfo=UTC))
    assert held.due_at is None and held.paused_at is not None
    screenshot(browser, "chain-page")

    press(browser, "#chain-resume")
    press(browser, "#chain-confirm")
    assert "is resumed" in browser.text(".messagelist")
    held.refresh_from_db()
    assert held.due_at == held.fire_at

    # Someone who may look but not operate sees the same page without buttons.
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_wake"))
    browser.reset()
    log_in(browser, viewer)
    browser.visit(reverse("admin:django_wakes_chain", args=[chain]))
    assert "Next 10 fire times" in browser.text("#upcoming-heading")
    assert not browser.driver.find_elements("css selector", "#chain-pause, #chain-resume, #chain-trigger")
