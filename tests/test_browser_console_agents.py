"""The console at 1440×900 with an agent host's ordinary data (issue 27 item 5), in a real Chromium.

Session turns in their lanes ``session:acme:mcp-s1``…, a cron turn with its zone, a task call, a GitHub
check-suite watch, a failing turn, a hung one, a dead one, a kind no runner fires; enough rows for the
page's vertical scrollbar. The wake list must show every WHY cell whole without horizontal scrolling.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.admin.utils import quote
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_wakes
from django_wakes import clock
from django_wakes.models import Outcome, Runner, State, Wake, WakeAttempt
from tests.browser import Browser, browser_fixture, chromium_fixture  # noqa: F401  (the fixtures)
from tests.factories import WakeFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH, HEIGHT = 1440, 900
WS = "acme"
RUNNER = "web-1:4242:a1b2c3"
TRACEBACK = "Traceback (most recent call last):\n  ...\n"
GITHUB_KEY = "github:check_suite:4f9e2c1d8b7a63e5d2c1b0a9f8e7d6c5b4a39281"


@pytest.fixture
def console(browser: Browser, admin_user: Any, settings: Any) -> Iterator[Browser]:
    """The browser at 1440×900, logged in as a superuser; runners lease for 15 s."""
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    client = Client()
    client.force_login(admin_user)
    browser.visit(resolve_url(django_settings.LOGIN_URL))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    browser.driver.add_cookie({"name": cookie.key, "value": cookie.value})
    width, height = browser.driver.get_window_size().values()
    browser.driver.set_window_size(WIDTH, HEIGHT)
    try:
        yield browser
    finally:
        browser.driver.set_window_size(width, height)


def live_runner() -> Runner:
    now = clock.now()
    return Runner.objects.create(
        id=RUNNER, host="web-1", pid=4242, started_at=now, heartbeat_at=now, kinds=["session_turn", "django_wakes.task"]
    )


def an_agent_host(sinks: Any) -> dict[str, Wake]:
    """What an agent host's wake table holds on an ordinary morning."""
    sinks("django_wakes.task")
    now = clock.now()
    wakes: dict[str, Wake] = {}
    for number in range(30):  # yesterday's turns: a page long enough for the window's scrollbar
        WakeFactory(
            workspace_id=WS,
            session_id=f"mcp-s{number % 8 + 1}",
            kind="session_turn",
            serial_key=f"session:acme:mcp-s{number % 8 + 1}",
            settled=True,
        )
    for number in range(1, 9):
        wakes[f"turn{number}"] = django_wakes.schedule(
            workspace_id=WS,
            session_id=f"mcp-s{number}",
            delay=f"{number * 7}m",
            intent={"note": "check whether the deploy of shop-api to production finished"},
        )
    wakes["cron"] = django_wakes.schedule(
        workspace_id=WS, session_id="mcp-s2", cron="*/15 8-18 * * MON-FRI", tz="America/Los_Angeles"
    )
    wakes["github"] = django_wakes.watch(
        workspace_id=WS,
        session_id="mcp-s3",
        event_key=GITHUB_KEY,
        expires_in="2h",
        match={"payload.conclusion": "success"},
    )
    wakes["task"] = WakeFactory(
        workspace_id=WS,
        kind="django_wakes.task",
        intent={"task": "shop.tasks.send_receipt", "args": [9912], "kwargs": {"lang": "fr"}},
        output={"message_id": "msg_2231"},
        settled=True,
        claimed_at=now - timedelta(seconds=30),
    )
    wakes["failing"] = WakeFactory(
        workspace_id=WS,
        session_id="mcp-s4",
        kind="session_turn",
        serial_key="session:acme:mcp-s4",
        attempts=2,
        max_attempts=5,
        fire_at=now - timedelta(minutes=1),
        due_at=now + timedelta(seconds=40),
        last_error=TRACEBACK + "httpx.ConnectTimeout: timed out connecting to api.example.com",
    )
    wakes["hung"] = WakeFactory(
        workspace_id=WS,
        session_id="mcp-s5",
        kind="session_turn",
        serial_key="session:acme:mcp-s5",
        lane_lock="session:acme:mcp-s5",
        state=State.FIRING,
        claim_token="t" * 32,
        claimed_by=RUNNER,
        claimed_at=now - timedelta(seconds=75),
        lease_until=now + timedelta(seconds=10),
        attempts=1,
    )
    wakes["queued"] = WakeFactory(
        workspace_id=WS,
        session_id="mcp-s5",
        kind="session_turn",
        serial_key="session:acme:mcp-s5",
        due_at=now - timedelta(seconds=70),
    )
    wakes["stranded"] = WakeFactory(workspace_id=WS, kind="github.pr_review", due_at=now - timedelta(minutes=7))
    wakes["dead"] = WakeFactory(
        workspace_id=WS,
        session_id="mcp-s6",
        kind="session_turn",
        serial_key="session:acme:mcp-s6",
        state=State.DEAD,
        attempts=3,
        max_attempts=3,
        settled_at=now - timedelta(minutes=3),
        last_error=TRACEBACK + "anthropic.RateLimitError: Error code: 429 - rate_limit_error",
    )
    for number in (1, 2, 3):
        WakeAttempt.objects.create(
            wake=wakes["dead"],
            number=number,
            runner_id=RUNNER,
            started_at=now - timedelta(minutes=5 - number),
            finished_at=now - timedelta(minutes=5 - number, seconds=-1),
            outcome=Outcome.FAILED if number == 3 else Outcome.RETRY,
            error="anthropic.RateLimitError: Error code: 429 - rate_limit_error",
            error_type="anthropic.RateLimitError",
        )
    return wakes


#: Where each WHY cell ends, the results box and the window's content (the vertical scrollbar left out).
GEOMETRY = """
const box = document.querySelector('#changelist .results');
const page = document.documentElement;
return {
  page: page.clientWidth, pageScroll: page.scrollWidth, pageTall: page.scrollHeight > page.clientHeight,
  box: box.getBoundingClientRect().right, boxWidth: box.clientWidth, boxScroll: box.scrollWidth,
  table: document.querySelector('#result_list').getBoundingClientRect().width,
  why: Array.from(document.querySelectorAll('#result_list td.field-why'), (cell) => ({
    right: cell.getBoundingClientRect().right, cut: cell.scrollWidth > cell.clientWidth, text: cell.innerText})),
};
"""

#: The distinct line tops of an element's content: one per line it takes.
LINES = """
const range = document.createRange();
range.selectNodeContents(arguments[0]);
return new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top))).size;
"""


def _gone(element: Any) -> bool:
    from selenium.common.exceptions import WebDriverException

    try:
        element.tag_name  # noqa: B018  # raises once its page is gone
    except WebDriverException:
        return True
    return False


def row(browser: Browser, wake: Wake, column: str) -> Any:
    return browser.find(f"#result_list tr:has(th a[href*='/{wake.pk}/change/']) td.field-{column}")


def hms(when: Any) -> str:
    return when.astimezone(timezone.get_current_timezone()).strftime("%H:%M:%S")


def test_the_why_column_fits_1440x900_with_agent_data(console: Browser, sinks: Any) -> None:
    live_runner()
    wakes = an_agent_host(sinks)
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    seen = console.driver.execute_script(GEOMETRY)
    assert seen["pageTall"], "the page is long enough for its vertical scrollbar"
    assert seen["pageScroll"] <= seen["page"], f"the page scrolls sideways: {seen['pageScroll']} > {seen['page']}"
    assert seen["boxScroll"] <= seen["boxWidth"], f"the table is {seen['table']:.0f} px in a {seen['boxWidth']} px box"
    assert len(seen["why"]) == Wake.objects.count()
    for cell in seen["why"]:
        assert cell["right"] <= seen["box"] <= seen["page"], f"WHY cut off: {cell['text']!r}"
        assert not cell["cut"], f"WHY overflows its cell: {cell['text']!r}"
    assert row(console, wakes["hung"], "why").text.startswith("hung: firing for 1m1")
    assert "unwakeable: no live runner fires kind github.pr_review" in row(console, wakes["stranded"], "why").text
    assert row(console, wakes["dead"], "why").text.startswith("dead: anthropic.RateLimitError")
    lane = row(console, wakes["failing"], "lane")
    assert lane.text == "session:acme:mcp-s4" and console.driver.execute_script(LINES, lane) == 1
    assert not console.driver.find_elements("css selector", "#runner-status")  # a runner is running
    console.screenshot("console-wake-list")


def test_a_failing_wake_says_which_retry_and_when(console: Browser, sinks: Any) -> None:
    live_runner()
    failing = an_agent_host(sinks)["failing"]
    retry = f"retry 3 of 5 at {hms(failing.due_at)}"
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    error = "httpx.ConnectTimeout: timed out connecting to api.example.com"
    assert row(console, failing, "why").text == f"{retry} · {error}"
    console.visit(reverse("admin:django_wakes_wake_change", args=[failing.pk]))
    assert console.text("div.field-why_now .readonly").startswith(retry)
    assert "goes dead after 3 more failed attempt(s)" in console.text("div.field-next_step")


def test_a_hung_wakes_page_says_what_to_do(console: Browser, sinks: Any) -> None:
    live_runner()
    hung = an_agent_host(sinks)["hung"]
    console.visit(reverse("admin:django_wakes_wake_change", args=[hung.pk]))
    step = console.text("div.field-next_step .readonly")
    assert f"Runner {RUNNER} (pid 4242 on web-1, heartbeat" in step
    assert "py-spy dump --pid 4242 on web-1" in step and "kill -TERM 4242" in step
    lease = hung.lease_until.astimezone(timezone.get_current_timezone()).strftime("%Y-%m-%d %H:%M:%S")
    assert f"its lease, held until {lease}" in step and "any runner re-drives this wake" in step
    assert "cannot be cancelled or rescheduled from here" in step
    assert (
        console.find("div.field-next_step a")
        .get_attribute("href")
        .endswith(reverse("admin:django_wakes_runner_change", args=[quote(RUNNER)]))
    )
    box = console.find("div.field-next_step").rect
    assert box["y"] + box["height"] < HEIGHT, "the next step is on the first screen"
    console.screenshot("console-wake-hung")


def test_with_no_runner_the_list_and_the_dashboard_say_so(console: Browser, sinks: Any) -> None:
    now = clock.now()
    Runner.objects.create(  # stopped five minutes ago
        id=RUNNER, host="web-1", pid=4242, started_at=now - timedelta(hours=1), heartbeat_at=now - timedelta(minutes=5)
    )
    due = WakeFactory(  # session_turn: SPAWN_TURN is set, a kind this process fires
        workspace_id=WS, kind="session_turn", serial_key="session:acme:mcp-s1", due_at=now - timedelta(seconds=5)
    )
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    assert row(console, due, "why").text.startswith("no runner is running: due for ")
    status = console.text("#runner-status")
    assert status.startswith("No runner is running: due wakes wait, whatever their kind, until one starts")
    assert "python manage.py runwakes" in status and f"The last heartbeat was 5m00s ago, from {RUNNER}" in status
    console.visit(reverse("admin:django_wakes_wake_change", args=[due.pk]))
    assert console.text("div.field-next_step .readonly") == "Start a runner: python manage.py runwakes."
    console.visit(reverse("admin:django_wakes_dashboard"))
    assert console.text("#runner-status").startswith("No runner is running:")


def test_the_kind_filter_lists_an_unwakeable_kind_marked(console: Browser, sinks: Any) -> None:
    live_runner()
    wakes = an_agent_host(sinks)
    console.visit(reverse("admin:django_wakes_wake_changelist"))
    marked = "github.pr_review (unwakeable: no live runner fires it)"
    choice = console.driver.find_element("xpath", f"//*[@id='changelist-filter']//a[normalize-space(.)='{marked}']")
    old = console.find("html")
    choice.click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(console.driver, 10).until(lambda driver: _gone(old))
    WebDriverWait(console.driver, 10).until(
        lambda driver: driver.execute_script("return document.readyState") == "complete"
    )
    assert "kind=github.pr_review" in console.url
    ids = {int(a.text) for a in console.driver.find_elements("css selector", "#result_list tbody th.field-id a")}
    assert ids == {wakes["stranded"].pk}


def test_the_attempt_history_has_one_caption(console: Browser, sinks: Any) -> None:
    live_runner()
    dead = an_agent_host(sinks)["dead"]
    console.visit(reverse("admin:django_wakes_wake_change", args=[dead.pk]))
    history = console.find("#attempt_log-group")
    assert [h.text.lower() for h in history.find_elements("css selector", "h2, p.original, td.original")] == [
        "attempt history"
    ]
    assert "of wake" not in history.text  # no "attempt 2 of wake 16: retry" above each row
    rows = history.find_elements("css selector", "tbody tr")  # every row the page has, none added
    assert [r.find_element("css selector", "td.field-number").text for r in rows] == ["1", "2", "3"]
