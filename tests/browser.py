"""A real Chromium for the tests of pages people use: Debian's ``chromium`` + ``chromium-driver``, via Selenium.

Import the fixtures into a test module (``from tests.browser import browser_fixture, chromium_fixture``
declares the fixtures ``browser`` and ``chromium``) and mark it ``pytest.mark.browser``. ``browser``
is a :class:`Browser` on pytest-django's ``live_server``, with no cookies and an empty request log
at the start of each test; the Chromium behind it (``chromium``) is started once per test session.

Where no Chromium can be found the tests are skipped with a message saying how to install one
(``scripts/install-browser``, which ``make test`` runs); under ``CI=true`` they fail instead.

Screenshots go to ``$WAKES_SCREENSHOTS`` when it is set (``WAKES_SCREENSHOTS=docs/screenshots`` refreshes
the README's pictures), else to a temporary folder.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Where Debian (``chromium``, ``chromium-driver``) and most other distributions put them.
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER_PATHS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")

#: Headless, as root, with nothing reaching out to the network behind the test's back.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=900,760",
)


def find_chromium() -> tuple[str, str] | None:
    """Return ``(chromium, chromedriver)`` paths, or None if either is missing."""
    chromium = next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), None) or shutil.which("chromium")
    driver = next((p for p in CHROMEDRIVER_PATHS if os.access(p, os.X_OK)), None) or shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def unavailable(reason: str) -> None:
    """Skip the test for want of a browser, or fail under ``CI=true`` where the browser is required."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (browser tests are required under CI=true; scripts/install-browser installs it)")
    pytest.skip(f"{reason}: run scripts/install-browser (make test does) to run the browser tests")


def launch(user_data_dir: Path) -> Any:
    """Start a headless Chromium with a fresh profile in ``user_data_dir``; it records its network log."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("the selenium package is not installed (pip install -e '.[dev]')")
    found = find_chromium()
    if found is None:
        unavailable("no Chromium and chromedriver found (Debian: apt-get install chromium chromium-driver)")
    chromium, chromedriver = found  # type: ignore[misc]
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (*CHROMIUM_ARGS, f"--user-data-dir={user_data_dir}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # the DevTools network events
    # An explicit driver path: Selenium Manager, which would download a driver, is never consulted.
    return webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))


@dataclass
class Request:
    """One request the browser sent (one hop of a redirect chain is one request)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


class Browser:
    """The test's view of Chromium: visit pages, fill forms, and read back every request it sent."""

    def __init__(self, driver: Any, base_url: str, screenshots: Path) -> None:
        self.driver = driver
        self.base_url = base_url.rstrip("/")
        self.screenshots = screenshots
        self._events: list[dict[str, Any]] = []

    def reset(self) -> None:
        """Forget cookies and the request log: a fresh visitor."""
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        self.driver.get("about:blank")
        self.clear_requests()

    def clear_requests(self) -> None:
        """Forget the requests sent so far: :meth:`requests` starts from the next one."""
        self.driver.get_log("performance")
        self._events.clear()

    def visit(self, path_or_url: str) -> None:
        self.driver.get(path_or_url if "://" in path_or_url else self.base_url + path_or_url)

    @property
    def url(self) -> str:
        return self.driver.current_url

    @property
    def path(self) -> str:
        """The current URL without the live server's origin."""
        url = self.driver.current_url
        return url[len(self.base_url) :] if url.startswith(self.base_url) else url

    def text(self, css: str = "body") -> str:
        return self.find(css).text

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def fill(self, name: str, value: str) -> None:
        element = self.find(f'[name="{name}"]')
        element.clear()
        element.send_keys(value)

    def click(self, css: str) -> None:
        self.find(css).click()

    def submit(self) -> None:
        """Press the page's submit button and wait for the next page."""
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.find("html")
        self.click('button[type="submit"]')
        WebDriverWait(self.driver, 10).until(lambda _: _stale(old))
        WebDriverWait(self.driver, 10).until(lambda driver: _loaded(driver))

    def screenshot(self, name: str) -> Path:
        """Save the page's content (all of it, not only the window, without the blank below) as a PNG."""
        width = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["width"]
        height = self.driver.execute_script("return Math.ceil(document.body.getBoundingClientRect().bottom) + 32")
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        self.screenshots.mkdir(parents=True, exist_ok=True)
        path = self.screenshots / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def _drain(self) -> list[dict[str, Any]]:
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"].startswith("Network.requestWillBeSent"):
                self._events.append(message)
        return self._events

    def requests(self) -> list[Request]:
        """Every request sent since :meth:`reset`, in order, with the headers that went on the wire."""
        requests: list[Request] = []
        hops: dict[str, list[Request]] = {}
        extra: dict[str, list[dict[str, str]]] = {}
        for event in self._drain():
            params = event["params"]
            if event["method"] == "Network.requestWillBeSent":
                request = params["request"]
                hop = Request(method=request["method"], url=request["url"], headers=dict(request["headers"]))
                requests.append(hop)
                hops.setdefault(params["requestId"], []).append(hop)
            else:  # ...ExtraInfo: the headers the network stack really sent (Cookie, Origin, Referer)
                extra.setdefault(params["requestId"], []).append(params["headers"])
        for request_id, headers in extra.items():
            for hop, sent in zip(hops.get(request_id, []), headers, strict=False):
                hop.headers.update(sent)
        return requests

    def header_values(self) -> list[str]:
        """Every header value of every request sent since :meth:`reset` (including redirect hops)."""
        values = []
        for event in self._drain():
            params = event["params"]
            headers = params["request"]["headers"] if "request" in params else params["headers"]
            values.extend(str(value) for value in headers.values())
        return values


def _stale(element: Any) -> bool:
    from selenium.common.exceptions import WebDriverException

    try:
        element.tag_name  # noqa: B018  # raises once the page it belonged to is gone
    except WebDriverException:
        # StaleElementReferenceException, or mid-navigation Chromium's "Node with given id does not
        # belong to the document": either way the old page is gone.
        return True
    return False


def _loaded(driver: Any) -> bool:
    """Whether the page navigated to has finished loading (a new document, not the old one)."""
    from selenium.common.exceptions import WebDriverException

    try:
        return bool(driver.execute_script("return document.readyState") == "complete")
    except WebDriverException:  # the document changed under the script: ask again
        return False


@pytest.fixture(scope="session", name="chromium")
def chromium_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the whole test session, on a fresh profile."""
    driver = launch(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(name="browser")
def browser_fixture(chromium: Any, live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """Chromium pointed at the live server, with no cookies and an empty request log."""
    screenshots = Path(os.environ.get("WAKES_SCREENSHOTS") or tmp_path_factory.getbasetemp() / "screenshots")
    page = Browser(chromium, live_server.url, screenshots)
    page.reset()
    yield page
    page.reset()
