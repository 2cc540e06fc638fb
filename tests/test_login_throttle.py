"""The login page django-wakes ships (``django_wakes:login``) throttles failed logins per name and per address.

Issue 26, finding 8: 30 wrong passwords and then the right one logged in. Driven through the real page with
Django's test client (the CSRF-protected form, the cache framework as configured); the settings' checks too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import SESSION_KEY
from django.core.cache import caches
from django.test import Client
from django.urls import reverse

from django_wakes.checks import check_wakes_settings

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
URL = "/wakes/login/"


@pytest.fixture(autouse=True)
def _fresh(settings: Any) -> Iterator[None]:
    """Start with no counts, and leave none behind (a locked "alice" would refuse other modules' logins)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    caches["default"].clear()
    yield
    caches["default"].clear()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password=PASSWORD)


def log_in(browser: Client, username: str, password: str, address: str = "192.0.2.1") -> Any:
    return browser.post(URL, {"username": username, "password": password}, REMOTE_ADDR=address)


def logged_in(browser: Client) -> bool:
    return SESSION_KEY in browser.session


def test_thirty_wrong_passwords_then_the_right_one_does_not_log_in(alice):
    browser = Client()
    statuses = [log_in(browser, "alice", f"guess-{n}").status_code for n in range(30)]
    assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}  # five tries, then refused (PER_USER)
    refused = log_in(browser, "alice", PASSWORD)
    assert refused.status_code == 429 and not logged_in(browser)  # not even the right password, meanwhile
    page = refused.content.decode()
    assert "Too many failed logins. Try again in 15 minutes." in page and refused["Retry-After"] == "900"
    assert 'name="username"' in page and 'value="alice"' in page  # the form is shown again, filled in
    elsewhere = Client()  # the name is locked from any address, and its case does not matter
    assert log_in(elsewhere, "ALICE ", PASSWORD, address="198.51.100.7").status_code == 429


def test_the_right_password_logs_in_below_the_limit_and_clears_the_names_count(alice):
    browser = Client()
    for n in range(4):
        assert log_in(browser, "alice", f"guess-{n}").status_code == 200
    response = log_in(browser, "alice", PASSWORD)
    assert response.status_code == 302 and logged_in(browser)
    browser.logout()
    for n in range(4):  # counted from zero again
        assert log_in(browser, "alice", f"guess-{n}").status_code == 200
    assert log_in(browser, "alice", PASSWORD).status_code == 302


def test_one_address_trying_many_names_is_throttled_and_others_are_not(alice, django_user_model):
    browser = Client()
    for n in range(20):
        assert log_in(browser, f"user-{n}", "nope").status_code == 200
    assert log_in(browser, "alice", PASSWORD).status_code == 429  # PER_ADDRESS: 20 from 192.0.2.1
    assert not logged_in(browser)
    other = Client()
    assert log_in(other, "alice", PASSWORD, address="203.0.113.9").status_code == 302  # another address


def test_a_logged_in_user_guessing_another_name_is_counted_too(alice, django_user_model):
    """A failure is a failed form, not an anonymous request: being logged in as oneself opens no way around it."""
    mallory = Client()
    mallory.force_login(django_user_model.objects.create_user("mallory", password="mallory's own"))
    assert [log_in(mallory, "alice", f"guess-{n}").status_code for n in range(6)] == [200] * 5 + [429]
    assert log_in(Client(), "alice", PASSWORD, address="203.0.113.9").status_code == 429


def test_the_window_ends_and_settings_tune_or_turn_it_off(alice, settings):
    settings.WAKES = {**settings.WAKES, "LOGIN_THROTTLE": {"PER_USER": 2, "PER_ADDRESS": None, "WINDOW": "1s"}}
    browser = Client()
    assert [log_in(browser, "alice", "x").status_code for _ in range(3)] == [200, 200, 429]
    time.sleep(1.2)
    assert log_in(browser, "alice", PASSWORD).status_code == 302
    settings.WAKES = {**settings.WAKES, "LOGIN_THROTTLE": None}
    browser.logout()
    assert {log_in(browser, "alice", "x").status_code for _ in range(30)} == {200}
    assert log_in(browser, "alice", PASSWORD).status_code == 302


def test_a_get_of_the_page_is_never_throttled(alice):
    browser = Client()
    for n in range(6):
        log_in(browser, "alice", f"guess-{n}")
    assert browser.get(URL, REMOTE_ADDR="192.0.2.1").status_code == 200
    assert reverse("django_wakes:login") == URL


@pytest.mark.parametrize(
    "value",
    [
        "on",
        {"PER_USERS": 5},
        {"PER_USER": 0},
        {"PER_ADDRESS": True},
        {"PER_USER": "5"},
        {"WINDOW": "soon"},
        {"WINDOW": "0s"},
        {"CACHE": "nowhere"},
    ],
)
def test_a_bad_login_throttle_is_e019(settings, value):
    settings.WAKES = {**settings.WAKES, "LOGIN_THROTTLE": value}
    assert [m.id for m in check_wakes_settings()] == ["django_wakes.E019"]


@pytest.mark.parametrize("value", [None, {}, {"PER_USER": None, "PER_ADDRESS": 3, "WINDOW": "1h", "CACHE": "default"}])
def test_a_good_login_throttle_passes(settings, value):
    settings.WAKES = {**settings.WAKES, "LOGIN_THROTTLE": value}
    assert check_wakes_settings() == []
