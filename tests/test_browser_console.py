"""The operator console in a real Chromium on a 1440 px screen: what an operator on call does, where they do it.

The list must fit without horizontal scrolling with the "why" and the attempts in view, its times and a
task's call each on one line; a wake held by its lane names the wake ahead; a filter is a
click; a wake page button asks first, then changes the row and says what it did; the lanes page
pauses and resumes a lane. Screenshots (``console-*.png``) are the ones ``docs/operations.md`` shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes import clock
from django_wakes.models import Outcome, PausedLane, Runner, State, Wake, WakeAttempt
from tests.browser import Browser, browser_fixture, chromium_fixture  # noqa: F401  (the fixtures)
from tests.factories import WakeFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KIND = "billing.charge_card"
RED = "rgba(186, 33, 33, 1)"  # the admin's --error-fg, as the hung and unwakeable notes
WIDTH = 1440


@pytest.fixture(autouse=True)
def calls(sinks: Any) -> Any:
    return sinks(KIND)


@pytest.fixture
def console(browser: Browser, admin_user: Any, settings: Any) -> Iterator[Browser]:
    """The browser, 1440 px wide, logged in as a superuser (who has ``operate_wake``); runners lease for 15 s."""
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    client = Client()
    client.force_login(admin_user)
    browser.visit(resolve_url(django_settings.LOGIN_URL))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    browser.driver.add_cookie({"name": cookie.key, "value": cookie.value})
    width, height = browser.driver.get_window_size().values()
    browser.driver.set_window_size(WIDTH, 1000)
    try:
        yield browser
    finally:
        browser.driver.set_window_size(width, height)


def a_night_on_call() -> dict[str, Wake]:
    """Wakes an operator meets: a hung sink, a stranded kind, a dead letter, chains, a watch, a task."""
    now = clock.now()
    Runner.objects.create(
        id="web-1:4242:a1b2c3",
        host="web-1",
        pid=4242,
        started_at=now,
        heartbeat_at=now,
        kinds=[KIND, "django_wakes.task"],
    )
    wakes = {
        "cron": django_wakes.schedule(
            workspace_id="acme-prod", kind=KIND, cron="0 9 * * MON-FRI", tz="Europe/Paris", serial_key="acct/1042"
        ),
        "every": django_wakes.schedule(workspace_id="acme-prod", kind=KIND, every="5m"),
        "later": django_wakes.schedule(workspace_id="acme-prod", kind=KIND, delay="2h", serial_key="acct/1042"),
        "watch": django_wakes.watch(
            workspace_id="acme-prod", kind=KIND, event_key="ci:pass:4f9e2c1d8b7a6", expires_in="1d"
        ),
        "approval": django_wakes.request_approval(
            workspace_id="acme-prod", kind=KIND, prompt="Refund order 9912?", expires_in="4h"
        ).wake,
    }
    wakes["hung"] = WakeFactory(
        workspace_id="acme-prod",
        kind=KIND,
        serial_key="acct/7781",
        lane_lock="acct/7781",
        state=State.FIRING,
        claim_token="t" * 32,
        claimed_by="web-1:4242:a1b2c3",
        claimed_at=now - timedelta(seconds=75),
        lease_until=now + timedelta(seconds=10),  # its live runner keeps renewing the lease
        attempts=1,
    )
    wakes["queued"] = WakeFactory(  # behind the hung one in its lane
        workspace_id="acme-prod", kind=KIND, serial_key="acct/7781", due_at=now - timedelta(seconds=70)
    )
    wakes["stranded"] = WakeFactory(
        workspace_id="acme-prod", kind="reports.nightly_export", due_at=now - timedelta(minutes=7)
    )
    wakes["dead"] = WakeFactory(
        workspace_id="acme-prod",
        kind=KIND,
        state=State.DEAD,
        attempts=5,
        settled_at=now - timedelta(minutes=3),
        last_error="Traceback (most recent call last):\n  ...\nstripe.error.CardError: Your card was declined "
        "(decline_code=insufficient_funds, request_id=req_8f3a9c1e7b2d4f6a)",
    )
    WakeAttempt.objects.create(
        wake=wakes["dead"],
        number=5,
        runner_id="web-1:4242:a1b2c3",
        started_at=now - timedelta(minutes=3, seconds=2),
        finished_at=now - timedelta(minutes=3),
        outcome=Outcome.FAILED,
        error="stripe.error.CardError: Your card was declined",
        error_type="stripe.error.CardError",
    )
    wakes["task"] = WakeFactory(
        workspace_id="acme-prod",
        kind="django_wakes.task",
        intent={"task": "shop.tasks.send_receipt", "args": [9912], "kwargs": {"lang": "fr"}},
        output={"message_id": "msg_2231"},
        queue_name="mail",
        priority=5,
        settled=True,
        claimed_at=now - timedelta(seconds=30),
        due_at=now - timedelta(seconds=31),
    )
    return wakes


def _wait_for_next_page(browser: Browser, old: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser.driver, 10).until(lambda driver: _gone(old))
    WebDriverWait(browser.driver, 10).until(
        lambda driver: driver.execute_script("return document.readyState") == "complete"
    )


def click_link(browser: Browser, text: str) -> None:
    """Follow the link whose text contains ``text`` (as written: the admin's CSS upper-cases some)."""
    from selenium.webdriver.common.by import By

    old = browser.find("html")
    browser.driver.find_element(By.XPATH, f"//a[contains(normalize-space(.), '{text}')]").click()
    _wait_for_next_page(browser, old)


def press(browser: Browser, css: str = '#content-main button[type="submit"]') -> None:
    """Press a button of the page's content (the header's first submit button is "Log out")."""
    old = browser.find("html")
    browser.click(css)
    _wait_for_next_page(browser, old)


def search(browser: Browser, term: str) -> None:
    """Type into the list's search box and press Enter."""
    from selenium.webdriver.common.keys import Keys

    old = browser.find("html")
    browser.fill("q", term)
    browser.find('input[name="q"]').send_keys(Keys.RETURN)
    _wait_for_next_page(browser, old)


def _gone(element: Any) -> bool:
    from selenium.common.exceptions import WebDriverException

    try:
        element.tag_name  # noqa: B018
    except WebDriverException:
        return True
    return False


def shot(browser: Browser, name: str, *, tall: bool = False) -> None:
    """Screenshot at 1440 px wide; ``tall`` grows the window to the page's height first (the admin scrolls inside)."""
    if tall:
        height = browser.driver.execute_script("return document.documentElement.scrollHeight")
        browser.driver.set_window_size(WIDTH, min(height + 120, 3200))
    try:
        browser.screenshot(name)
    finally:
        browser.driver.set_window_size(WIDTH, 1000)


def shown_ids(browser: Browser) -> set[int]:
    cells = browser.driver.find_elements("css selector", "#result_list tbody th.field-id a")
    return {int(cell.text) for cell in cells}


def messages(browser: Browser) -> list[str]:
    return [m.text for m in browser.driver.find_elements("css selector", "ul.messagelist li")]


#: The distinct line tops of an element's content (a range over it): one per line it takes.
LINES = """
const range = document.createRange();
range.selectNodeContents(arguments[0]);
return new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top))).size;
"""


#: The height of one line of text: a range over a one-word cell's content.
ONE_LINE = """
const range = document.createRange();
range.selectNodeContents(arguments[0]);
return range.getBoundingClientRect().height;
"""


def lines_of(browser: Browser, css: str) -> list[int]:
    return [browser.driver.execute_script(LINES, cell) for cell in browser.driver.find_elements("css selector", css)]


def test_the_wake_list_fits_1440px_with_the_why_in_view(console: Browser) -> None:
    wakes = a_night_on_call()
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    assert console.driver.execute_script("return document.documentElement.scrollWidth") <= WIDTH
    results = "document.querySelector('#changelist .results')"  # the admin scrolls a wide table inside it
    assert console.driver.execute_script(f"return {results}.scrollWidth <= {results}.clientWidth")
    visible = console.driver.execute_script(f"return {results}.getBoundingClientRect().right")
    for column in ("why", "attempts_of_max", "when"):
        right = console.driver.execute_script(
            f"return document.querySelector('#result_list th.column-{column}').getBoundingClientRect().right"
        )
        assert right <= visible <= WIDTH, column
    text = console.text("#result_list")
    assert 'cron "0 9 * * MON-FRI" (Europe/Paris)' in text
    assert "every 5m" in text and "event ci:pass:4f9e2c1d8b7a6" in text and "approval" in text
    assert "hung: firing for 1m15s, longer than its lease" in text
    assert "unwakeable: no live runner fires kind reports.nightly_export" in text
    assert "CardError: Your card was declined" in text and "5/5" in text
    assert 'shop.tasks.send_receipt(9912, lang="fr")' in text and '→ {"message_id": "msg_2231"}' in text
    utc = console.find(f"#result_list tr:has(a[href*='/{wakes['later'].pk}/change/']) td.field-when time")
    assert utc.get_attribute("title").endswith(" UTC")
    assert re.fullmatch(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d", utc.text)  # to the second; today's without the date
    assert set(lines_of(console, "#result_list td.field-when time:not(:has(.wake-date))")) == {1}, "a time wraps"
    assert set(lines_of(console, "#result_list td.field-trigger .wake-nowrap")) == {1}, "'at <time>' wraps"
    assert set(lines_of(console, "#result_list td.field-state, #result_list td.field-lane")) == {1}
    call = console.find("#result_list code.wake-call")
    assert call.get_attribute("title") == 'shop.tasks.send_receipt(9912, lang="fr")'  # whole on hover
    assert lines_of(console, "#result_list code.wake-call") == [1, 1], "a task's call or output breaks"
    plain = console.find(f"#result_list tr:has(a[href*='/{wakes['later'].pk}/change/'])")
    line = console.driver.execute_script(ONE_LINE, plain.find_element("css selector", "td.field-state"))
    assert plain.size["height"] < 2 * line + 16, "a row with a short why takes one line (and its padding)"
    queued = console.text(f"#result_list tr:has(th a[href*='/{wakes['queued'].pk}/change/']) td.field-why")
    assert f"lane held by wake {wakes['hung'].pk}, hung: firing for" in queued
    dead = console.find(f"#result_list tr:has(th a[href*='/{wakes['dead'].pk}/change/']) td.field-why strong")
    assert dead.get_attribute("class") == "wake-dead" and dead.value_of_css_property("color") == RED


def test_the_hung_and_unwakeable_filters_are_a_click_away(console: Browser) -> None:
    wakes = a_night_on_call()
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    click_link(console, "hung (firing longer")
    assert shown_ids(console) == {wakes["hung"].pk}
    console.screenshot("console-filter-hung")
    click_link(console, "unwakeable (due")
    assert shown_ids(console) == {wakes["stranded"].pk}
    click_link(console, "overdue")
    assert wakes["stranded"].pk in shown_ids(console) and wakes["hung"].pk not in shown_ids(console)


def test_search_by_prefix(console: Browser) -> None:
    wakes = a_night_on_call()
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    search(console, "acct/10")
    assert shown_ids(console) == {wakes["cron"].pk, wakes["later"].pk}
    search(console, "reports.")
    assert shown_ids(console) == {wakes["stranded"].pk}


def test_reschedule_from_the_wake_page_confirm_message_and_row(console: Browser) -> None:
    wakes = a_night_on_call()
    later = wakes["later"]
    console.visit(reverse("admin:django_wakes_wake_change", args=[later.pk]))
    console.screenshot("console-wake-page")
    click_link(console, "Reschedule")
    assert "Move when this wake is next due." in console.text()
    console.driver.execute_script("document.querySelector('input[name=at]').value = '2031-03-04T05:06:07'")
    console.screenshot("console-confirm-reschedule")
    press(console)
    assert console.path == reverse("admin:django_wakes_wake_change", args=[later.pk])
    assert messages(console) == [f"Wake {later.pk} is now due at 2031-03-04T05:06:07+00:00."]
    later.refresh_from_db()
    assert later.fire_at.isoformat() == later.due_at.isoformat() == "2031-03-04T05:06:07+00:00"


def test_cancel_and_a_refusal_from_the_wake_page(console: Browser) -> None:
    wakes = a_night_on_call()
    watch = wakes["watch"]
    console.visit(reverse("admin:django_wakes_wake_change", args=[watch.pk]))
    click_link(console, "Cancel")
    assert Wake.objects.get(pk=watch.pk).state == State.PENDING  # asking changes nothing
    press(console)
    assert messages(console) == [f"Wake {watch.pk} was cancelled."]
    assert Wake.objects.get(pk=watch.pk).state == State.CANCELLED
    assert "Cancel" not in console.text("ul.object-tools")  # no button for what no longer applies

    later = wakes["later"]
    console.visit(reverse("admin:django_wakes_wake_operate", args=[later.pk, "fire_now"]))
    Wake.objects.filter(pk=later.pk).update(state=State.CANCELLED)  # someone else got there first
    press(console)
    assert messages(console) == [f"Not done: wake {later.pk} is cancelled: it cannot be fired now."]


def test_a_hung_wakes_page_shows_its_attempt_in_flight_and_runner(console: Browser) -> None:
    wakes = a_night_on_call()
    console.visit(reverse("admin:django_wakes_wake_change", args=[wakes["hung"].pk]))
    flight = console.text("div.field-in_flight")
    assert "attempt 1" in flight and "claimed by web-1:4242:a1b2c3" in flight
    assert "hung: firing for" in console.text("div.field-why_now")
    click_link(console, "web-1:4242:a1b2c3")
    assert "web-1" in console.text() and "live" in console.text()
    assert str(wakes["hung"].pk) in console.text("div.field-in_hand")


def test_the_dead_letter_is_retried_from_its_page(console: Browser) -> None:
    dead = a_night_on_call()["dead"]
    console.visit(reverse("admin:django_wakes_wake_change", args=[dead.pk]))
    assert "stripe.error.CardError" in console.text("#attempt_log-group")
    attempts = console.find("#attempt_log-group").rect
    assert attempts["y"] + attempts["height"] < 900, "the attempt history is in the first screen (1440x900)"
    labels = [label.text for label in console.driver.find_elements("css selector", "fieldset .form-row label")]
    assert "Start recorded:" not in labels and "Event key:" not in labels and "Approval prompt:" not in labels
    why = console.find("div.field-why_now strong.wake-dead")
    assert why.text.startswith("dead: stripe.error.CardError") and why.value_of_css_property("color") == RED
    height = console.driver.execute_script("return document.documentElement.scrollHeight")
    assert height < 1800, f"the page is {height} px tall (it was ~2,900 with every empty field)"
    shot(console, "console-wake-dead", tall=True)
    click_link(console, "Retry")
    press(console)
    assert messages(console) == [f"Wake {dead.pk} was requeued with fresh attempts; it is due now."]
    dead.refresh_from_db()
    assert (dead.state, dead.attempts) == (State.PENDING, 0)


def test_lanes_page_pause_and_resume(console: Browser) -> None:
    wakes = a_night_on_call()
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    click_link(console, "Lanes")
    busy = console.text("#busy-lanes")
    assert "acct/7781" in busy and str(wakes["hung"].pk) in busy
    console.screenshot("console-lanes")
    console.visit(reverse("admin:django_wakes_lanes") + "?lane=acct%2F1042")
    assert console.text("#lane-waiting") == "2"
    console.fill("reason", "card processor incident")
    press(console)
    assert messages(console) == ["Lane acct/1042 paused: no further wake of it is claimed until resumed."]
    assert PausedLane.objects.get(serial_key="acct/1042").reason == "card processor incident"
    console.screenshot("console-lane-paused")
    press(console)  # "Resume this lane"
    assert messages(console) == ["Lane acct/1042 resumed: its next wake is claimable now."]
    assert not PausedLane.objects.exists()
