"""The signed event webhook (its own "wakes" scheme) through real HTTP requests: Django's test client, and curl.

Every response code and the order of refusals, rotation, redeliveries (also between clients,
processes' worth of threads and after a failed delivery), the tolerance's edges, the body limit, MAP,
WORKSPACE, what is logged, the system check (E008, W004) and forgetting old delivery ids. The other
senders' schemes (Standard Webhooks, GitHub, Stripe) are in tests/test_webhook_schemes.py.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIRequest
from django.db import OperationalError
from django.test import AsyncClient, Client

import django_wakes
from django_wakes import clock as wakes_clock
from django_wakes.checks import check_wakes_settings
from django_wakes.engine import forget_deliveries
from django_wakes.exceptions import InvalidDuration
from django_wakes.models import Wake, WebhookDelivery
from django_wakes.testing import fake_clock
from django_wakes.web import webhooks
from django_wakes.web.webhooks import sign

pytestmark = pytest.mark.django_db

KIND = "test.webhooks"
WS = "ws-hooks"
NEW, OLD = "s3cr3t-new-7Hq2", "s3cr3t-old-9Zk4"
MAPPED_SECRET = "mapped-s3cr3t-Lx8"
MAX_BYTES = 4096
URL = "/wakes/events/ci/"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "events.md"


def from_provider(delivery: webhooks.Delivery) -> dict[str, Any] | None:
    """A MAP for a provider's own shape: {"kind", "project", "status", "sha", "build"}."""
    body = delivery.body
    if body.get("kind") == "ping":
        return None
    return {
        "workspace_id": body["project"],
        "event_key": f"ci:{body['status']}:{body['sha']}",
        "payload": {"build": body["build"], "via": delivery.headers.get("X-Provider", ""), "id": delivery.id},
    }


@pytest.fixture(autouse=True)
def webhook_settings(settings: Any) -> None:
    settings.WAKES = {
        **settings.WAKES,
        "WEBHOOKS": {
            "ci": {"SECRETS": [NEW, OLD], "MAX_BYTES": MAX_BYTES},
            "provider": {"SECRETS": [MAPPED_SECRET], "MAP": "tests.test_webhooks.from_provider"},
            "pinned": {"SECRETS": [NEW], "WORKSPACE": WS},
            "unsigned": {"SECRETS": []},
        },
    }


@pytest.fixture
def calls(sinks: Any) -> Any:
    return sinks(KIND)


def event(**overrides: Any) -> dict[str, Any]:
    return {"workspace_id": WS, "event_key": "ci:pass:abc", "payload": {"build": 42}, **overrides}


def encode(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def headers(
    body: bytes,
    *,
    secret: str = NEW,
    timestamp: int | str | None = None,
    delivery: str = "d-1",
    signed_delivery: str | None = None,
) -> dict[str, str]:
    """The three headers of a request signed with ``secret`` (at the clock's now unless ``timestamp``)."""
    ts = str(int(wakes_clock.now().timestamp()) if timestamp is None else timestamp)
    return {
        "HTTP_X_WAKES_TIMESTAMP": ts,
        "HTTP_X_WAKES_DELIVERY": delivery,
        "HTTP_X_WAKES_SIGNATURE": sign(secret, ts, signed_delivery or delivery, body),
    }


def post(client: Client, payload: Any = None, *, url: str = URL, extra: dict[str, str] | None = None, **kw: Any):
    body = encode(event() if payload is None else payload)
    return client.post(url, data=body, content_type="application/json", **{**headers(body, **kw), **(extra or {})})


def error(response: Any) -> str:
    assert response["Content-Type"] == "application/json"
    return str(response.json()["error"])


# -- 200 -----------------------------------------------------------------------------------------


def test_a_signed_event_reaches_the_watchers_sink(client, clock, calls):
    wake = django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    response = post(client)
    assert response.status_code == 200
    assert response.json() == {"accepted": 1}
    assert "no-cache" in response["Cache-Control"]
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]
    assert calls.results == [{"trigger": "on_event", "event_key": "ci:pass:abc", "payload": {"build": 42}}]
    assert list(WebhookDelivery.objects.values_list("source", "delivery_id")) == [("ci", "d-1")]


def test_no_watcher_is_a_success_with_zero(client, clock):
    response = post(client, delivery="d-nobody")
    assert (response.status_code, response.json()) == (200, {"accepted": 0})


def test_payload_is_optional(client, clock, calls):
    django_wakes.watch(workspace_id=WS, event_key="ping", kind=KIND)
    assert post(client, {"workspace_id": WS, "event_key": "ping"}).json() == {"accepted": 1}
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "event_key": "ping", "payload": None}]


def test_the_webhook_is_csrf_exempt(clock):
    """Authenticated by its signature: a client that enforces CSRF checks is not refused."""
    assert post(Client(enforce_csrf_checks=True)).status_code == 200


# -- rotation and the constant-time compare ------------------------------------------------------


def test_the_old_secret_is_accepted_while_listed(client, clock, calls):
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    assert post(client, secret=OLD).json() == {"accepted": 1}


def test_a_secret_no_longer_listed_is_refused(client, clock, settings):
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW]}}}
    response = post(client, secret=OLD)
    assert (response.status_code, error(response)) == (401, "bad_signature")


def test_every_secret_is_compared_with_compare_digest(client, clock, monkeypatch):
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    assert post(client, secret=NEW, delivery="first").status_code == 200
    assert len(compared) == 2  # a match on the first secret still compares the second
    compared.clear()
    assert post(client, secret="wrong", delivery="second").status_code == 401
    assert len(compared) == 2


# -- 401 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["HTTP_X_WAKES_TIMESTAMP", "HTTP_X_WAKES_SIGNATURE"])
def test_a_missing_timestamp_or_signature_is_401(client, clock, missing):
    body = encode(event())
    sent = {k: v for k, v in headers(body).items() if k != missing}
    response = client.post(URL, data=body, content_type="application/json", **sent)
    assert (response.status_code, error(response)) == (401, "unauthorized")
    assert response["WWW-Authenticate"] == 'Signature realm="django-wakes", header="X-Wakes-Signature"'


@pytest.mark.parametrize(
    "signature",
    ["", "sha256=", "sha256=abc", "sha1=" + "0" * 40, "0" * 64, "sha256=" + "g" * 64, "sha256=" + "0" * 64 + " "],
)
def test_a_malformed_or_wrong_signature_is_401(client, clock, signature):
    response = post(client, extra={"HTTP_X_WAKES_SIGNATURE": signature})
    assert response.status_code == 401
    assert error(response) in ("unauthorized", "bad_signature")


def test_an_uppercase_hex_signature_is_accepted(client, clock):
    body = encode(event())
    sent = headers(body)
    sent["HTTP_X_WAKES_SIGNATURE"] = "sha256=" + sent["HTTP_X_WAKES_SIGNATURE"].removeprefix("sha256=").upper()
    assert client.post(URL, data=body, content_type="application/json", **sent).status_code == 200


@pytest.mark.parametrize("timestamp", ["", "soon", "-5", "1.5", "1e9", "１２３"])
def test_a_malformed_timestamp_is_401(client, clock, timestamp):
    response = post(client, timestamp=timestamp)
    assert (response.status_code, error(response)) == (401, "unauthorized")


def test_the_signature_covers_body_timestamp_and_delivery_id(client, clock):
    body = encode(event())
    good = headers(body, delivery="d-1")
    tampered_body = encode(event(payload={"build": 43}))
    assert client.post(URL, data=tampered_body, content_type="application/json", **good).status_code == 401
    later = {**good, "HTTP_X_WAKES_TIMESTAMP": str(int(good["HTTP_X_WAKES_TIMESTAMP"]) + 1)}
    assert client.post(URL, data=body, content_type="application/json", **later).status_code == 401
    # A captured request replayed under a fresh delivery id does not verify.
    fresh_id = {**good, "HTTP_X_WAKES_DELIVERY": "d-2"}
    response = client.post(URL, data=body, content_type="application/json", **fresh_id)
    assert (response.status_code, error(response)) == (401, "bad_signature")
    assert client.post(URL, data=body, content_type="application/json", **good).status_code == 200


@pytest.mark.parametrize(
    ("offset", "status"),
    [(-300, 200), (-301, 401), (300, 200), (301, 401), (-86_400, 401), (86_400, 401)],
)
def test_the_five_minute_tolerance_either_way(client, clock, offset, status):
    now = int(clock.now().timestamp())
    response = post(client, timestamp=now + offset, delivery=f"tolerance{offset}")
    assert response.status_code == status
    if status == 401:
        assert error(response) == "stale_timestamp"


def test_the_tolerance_edge_to_the_microsecond(client):
    """300 s and a microsecond after the timestamp is too late; 300 s exactly is not."""
    with fake_clock(datetime(2031, 6, 1, 12, 0, 0, tzinfo=UTC)) as fake:
        sent_at = int(fake.now().timestamp())
        fake.advance("300s")
        assert post(client, timestamp=sent_at, delivery="edge-1").status_code == 200
        fake.advance(timedelta(microseconds=1))
        assert post(client, timestamp=sent_at, delivery="edge-2").status_code == 401


# -- 404, 405 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/wakes/events/nope/", "/wakes/events/unsigned/", "/wakes/events/CI/"])
def test_an_unknown_source_or_one_without_secrets_is_a_bare_404(client, clock, url):
    response = post(client, url=url)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "Not found."}


def test_no_webhooks_configured_is_404(client, clock, settings):
    settings.WAKES = {k: v for k, v in settings.WAKES.items() if k != "WEBHOOKS"}
    assert post(client).status_code == 404


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete", "head", "options"])
def test_anything_but_post_is_405(client, clock, method):
    response = getattr(client, method)(URL)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    if method != "head":
        assert error(response) == "method_not_allowed"


# -- 400 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"not json", "bad_json"),
        (b"\xff\xfe{}", "bad_json"),
        (b'["a list"]', "bad_json"),
        (b'{"workspace_id": "w", "event_key": "e", "payload": NaN}', "bad_json"),
        (b"[" * 2000 + b"]" * 2000, "bad_json"),
        (b"", "bad_json"),
        (encode({"workspace_id": WS}), "bad_request"),
        (encode({"event_key": "e"}), "bad_request"),
        (encode(event(extra=1)), "bad_request"),
        (encode(event(workspace_id=7)), "bad_request"),
        (encode(event(event_key="")), "bad_request"),
        (encode(event(event_key="x" * 201)), "bad_request"),
        (encode(event(event_key="nul\u0000")), "bad_request"),
        (encode(event(payload={"deep": json.loads("[" * 40 + "]" * 40)})), "bad_request"),
    ],
)
def test_a_bad_body_is_400_and_records_nothing(client, clock, body, code):
    response = post(client, body)
    assert (response.status_code, error(response)) == (400, code)
    assert not WebhookDelivery.objects.exists()


def test_the_package_validation_message_is_returned(client, clock):
    response = post(client, event(event_key="x" * 201))
    assert response.json()["detail"] == "event_key is 201 characters long; the limit is 200"


@pytest.mark.parametrize("delivery", ["", "has.dot", "has space", "é", "x" * 201, "line\nbreak"])
def test_a_missing_or_malformed_delivery_id_is_400_once_signed(client, clock, delivery):
    body = encode(event())
    sent = headers(body, delivery="ok", signed_delivery=delivery or "-")
    sent["HTTP_X_WAKES_DELIVERY"] = delivery
    if delivery:
        sent["HTTP_X_WAKES_SIGNATURE"] = sign(NEW, sent["HTTP_X_WAKES_TIMESTAMP"], delivery, body)
    else:  # no header at all: what was signed is the empty id
        del sent["HTTP_X_WAKES_DELIVERY"]
        sent["HTTP_X_WAKES_SIGNATURE"] = sign(NEW, sent["HTTP_X_WAKES_TIMESTAMP"], "", body)
    response = client.post(URL, data=body, content_type="application/json", **sent)
    assert (response.status_code, error(response)) == (400, "bad_delivery_id")
    assert not WebhookDelivery.objects.exists()


# -- the order of refusals -------------------------------------------------------------------------


def test_an_unsigned_request_is_401_before_its_body_or_delivery_id_is_judged(client, clock):
    """A sender with the wrong scheme is told about its signature, not about the id it did not send."""
    response = client.post(URL, data=b"not json", content_type="application/json")
    assert (response.status_code, error(response)) == (401, "unauthorized")
    response = client.post(URL, data=b"{}", content_type="application/json", HTTP_X_WAKES_DELIVERY="has.dot")
    assert response.status_code == 401


def test_an_unknown_source_is_404_whatever_the_method(client, clock):
    assert client.get("/wakes/events/nope/").status_code == 404
    assert client.get(URL).status_code == 405


def test_too_large_comes_before_the_signature(client, clock):
    response = client.post(URL, data=padded(MAX_BYTES + 1), content_type="application/json")
    assert (response.status_code, error(response)) == (413, "too_large")


def test_a_bad_body_is_400_only_once_signed(client, clock):
    body = b"not json"
    assert client.post(URL, data=body, content_type="application/json").status_code == 401
    assert post(client, body).status_code == 400


def test_a_refused_body_can_be_sent_again_fixed_with_the_same_id(client, clock, calls):
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    assert post(client, event(event_key=""), delivery="retry-me").status_code == 400
    assert post(client, event(), delivery="retry-me").json() == {"accepted": 1}


# -- redeliveries: 200, nothing delivered twice ---------------------------------------------------

DUPLICATE = {"accepted": 0, "duplicate": True}


def test_a_redelivery_is_200_duplicate_and_delivers_nothing(client, clock, calls):
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    body = encode(event())
    sent = headers(body, delivery="once-only")
    first = client.post(URL, data=body, content_type="application/json", **sent)
    assert first.json() == {"accepted": 2}
    later = django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    again = Client().post(URL, data=body, content_type="application/json", **sent)  # another client, same bytes
    assert (again.status_code, again.json()) == (200, DUPLICATE)
    django_wakes.run_due()
    assert len(calls) == 2 and later.pk not in calls.ids


def test_a_redelivered_id_with_another_body_delivers_nothing(client, clock, calls):
    assert post(client, event(payload=1), delivery="same").json() == {"accepted": 0}
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    response = post(Client(), event(payload=2), delivery="same")
    assert (response.status_code, response.json()) == (200, DUPLICATE)
    assert django_wakes.run_due().fired == 0


def test_delivery_ids_are_per_source_and_case_sensitive(client, clock, settings):
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW]}, "cd": {"SECRETS": [NEW]}}}
    assert post(client, delivery="Same").status_code == 200
    assert post(client, url="/wakes/events/cd/", delivery="Same").status_code == 200
    assert post(client, delivery="same").status_code == 200  # byte for byte, on MySQL/MariaDB too
    assert post(client, delivery="Same").json() == DUPLICATE
    assert WebhookDelivery.objects.count() == 3


def test_a_delivery_that_failed_can_be_retried_with_its_id(clock, calls, monkeypatch):
    """The id is inserted in the delivery's transaction: a failure leaves no row, so a retry delivers."""
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    real = webhooks.deliver_event
    failures = [OperationalError("server closed the connection unexpectedly")]

    def flaky(**kwargs: Any) -> int:
        if failures:
            raise failures.pop()
        return real(**kwargs)

    monkeypatch.setattr(webhooks, "deliver_event", flaky)
    client = Client(raise_request_exception=False)
    body = encode(event())
    sent = headers(body, delivery="flaky-1")
    assert client.post(URL, data=body, content_type="application/json", **sent).status_code == 500
    assert not WebhookDelivery.objects.exists()
    assert client.post(URL, data=body, content_type="application/json", **sent).json() == {"accepted": 1}
    assert client.post(URL, data=body, content_type="application/json", **sent).json() == DUPLICATE


# -- 413 -----------------------------------------------------------------------------------------


def padded(size: int) -> bytes:
    """A valid event body of exactly ``size`` bytes (JSON allows trailing whitespace)."""
    body = encode(event())
    return body + b" " * (size - len(body))


def test_a_body_of_max_bytes_is_accepted_and_one_more_is_413(client, clock):
    assert post(client, padded(MAX_BYTES), delivery="max").status_code == 200
    response = post(client, padded(MAX_BYTES + 1), delivery="max-plus-one")
    assert (response.status_code, error(response)) == (413, "too_large")
    assert WebhookDelivery.objects.count() == 1


def test_a_declared_content_length_over_the_limit_is_413_before_reading(client, clock):
    body = encode(event())
    response = post(client, body, extra={"CONTENT_LENGTH": str(MAX_BYTES + 1)})
    assert (response.status_code, error(response)) == (413, "too_large")


def test_a_body_longer_than_it_declares_is_413(clock):
    """Under ASGI the body is not cut at Content-Length: the body actually read is measured too."""
    body = padded(MAX_BYTES * 4)
    sent = headers(body)
    scope = {
        "type": "http",
        "method": "POST",
        "path": URL,
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", b"10"),
            *[(k.removeprefix("HTTP_").replace("_", "-").lower().encode(), v.encode()) for k, v in sent.items()],
        ],
    }
    request = ASGIRequest(scope, io.BytesIO(body))
    response = webhooks.event_webhook(request, "ci")
    assert response.status_code == 413
    assert json.loads(response.content)["error"] == "too_large"


def test_the_default_limit_is_256_kib(client, clock, settings):
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW]}}}
    assert post(client, padded(256 * 1024), delivery="big").status_code == 200
    assert post(client, padded(256 * 1024 + 1), delivery="bigger").status_code == 413


# -- MAP -----------------------------------------------------------------------------------------


def provider_post(client: Client, body: dict[str, Any], delivery: str) -> Any:
    return post(
        client,
        body,
        url="/wakes/events/provider/",
        secret=MAPPED_SECRET,
        delivery=delivery,
        extra={"HTTP_X_PROVIDER": "acme"},
    )


def test_map_turns_a_providers_body_into_the_event(client, clock, calls):
    django_wakes.watch(workspace_id="proj-1", event_key="ci:green:abc123", kind=KIND)
    body = {"kind": "build", "project": "proj-1", "status": "green", "sha": "abc123", "build": 9}
    assert provider_post(client, body, "p-1").json() == {"accepted": 1}
    django_wakes.run_due()
    assert calls.results == [
        {"trigger": "on_event", "event_key": "ci:green:abc123", "payload": {"build": 9, "via": "acme", "id": "p-1"}}
    ]


def test_map_returning_none_accepts_and_delivers_nothing(client, clock):
    response = provider_post(client, {"kind": "ping"}, "p-ping")
    assert response.json() == {"accepted": 0}
    assert provider_post(client, {"kind": "ping"}, "p-ping").json() == DUPLICATE


def test_a_body_map_cannot_read_is_400(client, clock):
    response = provider_post(client, {"kind": "build", "project": "p"}, "p-bad")  # KeyError in MAP
    assert (response.status_code, error(response)) == (400, "bad_request")
    assert not WebhookDelivery.objects.exists()


def test_what_map_returns_is_validated(client, clock, settings):
    settings.WAKES = {
        **settings.WAKES,
        "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": lambda delivery: {"workspace_id": WS, "event_key": ""}}},
    }
    response = post(client)
    assert (response.status_code, error(response)) == (400, "bad_request")
    assert "event_key" in response.json()["detail"]


def test_map_may_be_a_callable(client, clock, settings, calls):
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": from_provider}}}
    django_wakes.watch(workspace_id="p", event_key="ci:red:1", kind=KIND)
    body = {"kind": "build", "project": "p", "status": "red", "sha": "1", "build": 1}
    assert post(client, body).json() == {"accepted": 1}


def test_map_may_return_several_events_delivered_together(client, clock, settings, calls):
    def fan_out(delivery: webhooks.Delivery) -> list[dict[str, Any]]:
        return [{"workspace_id": WS, "event_key": f"ci:{name}:abc"} for name in ("pass", "done")]

    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": fan_out}}}
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    django_wakes.watch(workspace_id=WS, event_key="ci:done:abc", kind=KIND)
    assert post(client, {"anything": 1}, delivery="fan").json() == {"accepted": 2}
    assert post(client, {"anything": 1}, delivery="fan").json() == DUPLICATE
    assert django_wakes.run_due().fired == 2


def test_one_bad_event_of_several_delivers_none(client, clock, settings, calls):
    def half_bad(delivery: webhooks.Delivery) -> list[dict[str, Any]]:
        return [{"workspace_id": WS, "event_key": "ci:pass:abc"}, {"workspace_id": WS, "event_key": ""}]

    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": half_bad}}}
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    response = post(client, {"anything": 1})
    assert (response.status_code, error(response)) == (400, "bad_request")
    assert not WebhookDelivery.objects.exists()
    assert django_wakes.run_due().fired == 0


def test_map_returning_too_many_events_is_400(client, clock, settings):
    many = [{"workspace_id": WS, "event_key": f"k{i}"} for i in range(webhooks.MAX_EVENTS + 1)]
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": lambda delivery: many}}}
    assert post(client, {"anything": 1}).status_code == 400


class Unreadable(dict):  # type: ignore[type-arg]
    """A Mapping of the host's own that cannot be read."""

    def keys(self) -> Any:
        raise RuntimeError("cannot list my keys")


#: What a MAP may return by mistake: each must be a 400 naming the source, never a 500.
JUNK_MAP_RETURNS: list[Any] = [
    {1: "one"},  # the finding: a key that is not a string (TypeError in sorting the unknown fields)
    {None: 1, "event_key": "k"},
    {("a", "b"): 1},
    {1, 2},  # a set
    "ci:pass:abc",
    42,
    b"bytes",
    object(),
    iter([event()]),
    Unreadable(),
    [event(), 5],
    [[event()]],
    event(event_key=7),
    event(event_key="k\x00"),
    event(workspace_id=["x"]),
    event(payload={1: "int key"}),
    event(payload=float("nan")),
    event(payload=float("inf")),
    event(payload={1, 2}),
    event(payload=object()),
    event(payload="x" * 2_000_000),  # huge: past INTENT_MAX_BYTES
    event(payload=json.loads("[" * 200 + "]" * 200)),  # too deep
    event(retain=object()),
    event(retain="forever"),
    event(retain=float("nan")),
    [event(event_key=f"k{i}") for i in range(webhooks.MAX_EVENTS + 1)],
]


@pytest.mark.parametrize("junk", JUNK_MAP_RETURNS, ids=lambda junk: type(junk).__name__)
def test_every_junk_map_return_is_a_400_naming_the_source_on_wsgi_and_asgi(clock, settings, junk):
    """Issue 26, finding 6: a MAP returning a dict with a non-string key (or any junk) was a 500."""
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "MAP": lambda delivery: junk}}}
    body = encode({"anything": 1})
    answers = [Client().post(URL, data=body, content_type="application/json", **headers(body, delivery="junk"))]
    signed = {name[5:].replace("_", "-"): value for name, value in headers(body, delivery="junk").items()}
    answers.append(async_to_sync(AsyncClient().post)(URL, data=body, content_type="application/json", headers=signed))
    for response in answers:
        assert (response.status_code, error(response)) == (400, "bad_request"), response.content[:300]
        assert "The MAP of source 'ci' returned" in response.json()["detail"]
    assert not WebhookDelivery.objects.exists()


# -- 429: a source's deliveries per window ---------------------------------------------------------


def test_a_source_past_its_deliveries_per_window_is_429_with_retry_after(client, clock, settings, calls):
    settings.WAKES["WEBHOOKS"]["ci"].update(MAX_DELIVERIES=3, PER="1h")
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    answers = []
    for number in range(3):
        answers.append(post(client, delivery=f"cap-{number}").json())
        clock.advance("10m")
    assert answers == [{"accepted": 1}, {"accepted": 0}, {"accepted": 0}]
    refused = post(client, delivery="cap-3")
    assert (refused.status_code, error(refused)) == (429, "too_many_deliveries")
    assert refused["Retry-After"] == str(30 * 60)  # when the first of the window leaves it
    assert "'ci'" in refused.json()["detail"]
    assert WebhookDelivery.objects.count() == 3
    assert post(client, delivery="cap-0").status_code == 429  # refused before anything is looked up
    assert post(client, delivery="cap-3", url="/wakes/events/pinned/").json() == {"accepted": 0}  # per source
    clock.advance("30m")
    assert post(client, delivery="cap-3").json() == {"accepted": 0}
    assert WebhookDelivery.objects.filter(source="ci").count() == 4


def test_the_default_rate_is_10000_deliveries_an_hour():
    source = webhooks.get_source("ci")
    assert source is not None and (source.max_deliveries, source.per) == (10_000, timedelta(hours=1))


def test_an_event_may_be_retained_for_a_later_watch(client, clock, calls):
    assert post(client, event(retain="10m"), delivery="early").json() == {"accepted": 0}
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND, since="5m")
    assert django_wakes.run_due().fired == 1


# -- WORKSPACE -----------------------------------------------------------------------------------


def test_a_pinned_source_fills_in_its_workspace(client, clock, calls):
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    body = {"event_key": "ci:pass:abc", "payload": 1}
    assert post(client, body, url="/wakes/events/pinned/", delivery="pin-1").json() == {"accepted": 1}
    assert post(client, event(), url="/wakes/events/pinned/", delivery="pin-2").json() == {"accepted": 0}


def test_a_pinned_source_refuses_another_workspace_with_403(client, clock, calls):
    other = django_wakes.watch(workspace_id="someone-else", event_key="ci:pass:abc", kind=KIND)
    response = post(client, event(workspace_id="someone-else"), url="/wakes/events/pinned/", delivery="pin-x")
    assert (response.status_code, error(response)) == (403, "wrong_workspace")
    assert not WebhookDelivery.objects.exists()
    assert django_wakes.run_due().fired == 0
    assert Wake.objects.get(pk=other.pk).fire_at is None


def test_a_pinned_source_refuses_a_map_naming_another_workspace(client, clock, settings):
    settings.WAKES = {
        **settings.WAKES,
        "WEBHOOKS": {"ci": {"SECRETS": [NEW], "WORKSPACE": WS, "MAP": "tests.test_webhooks.from_provider"}},
    }
    body = {"kind": "build", "project": "not-" + WS, "status": "green", "sha": "1", "build": 1}
    response = post(client, body)
    assert (response.status_code, error(response)) == (403, "wrong_workspace")
    body["project"] = WS
    assert post(client, body).status_code == 200


def test_map_sees_the_pinned_workspace(client, clock, settings):
    seen: list[str | None] = []

    def spy(delivery: webhooks.Delivery) -> None:
        seen.append(delivery.workspace_id)

    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": [NEW], "WORKSPACE": "acme", "MAP": spy}}}
    assert post(client).json() == {"accepted": 0}
    assert seen == ["acme"]


# -- logs ----------------------------------------------------------------------------------------


def test_no_secret_is_ever_logged_or_returned(client, clock, caplog, calls):
    caplog.set_level(logging.DEBUG)
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    responses = [
        post(client, delivery="log-ok"),
        post(client, delivery="log-ok"),  # a redelivery
        post(client, secret=OLD, delivery="log-old"),
        post(client, secret="not-the-secret", delivery="log-bad"),
        post(client, timestamp=0, delivery="log-stale"),
        post(client, event(event_key=""), delivery="log-400"),
        post(client, padded(MAX_BYTES + 1), delivery="log-413"),
        post(client, url="/wakes/events/nope/"),
        provider_post(client, {"kind": "build"}, "log-map"),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 401, 401, 400, 413, 404, 400]
    text = caplog.text + "".join(r.content.decode() for r in responses)
    for secret in (NEW, OLD, MAPPED_SECRET):
        assert secret not in text
    assert '"build": 42' not in caplog.text  # nor a body
    outcomes = [r.getMessage() for r in caplog.records if r.name == "django_wakes" and "webhook" in r.getMessage()]
    assert "webhook source=ci delivery=log-ok outcome=accepted watchers=1" in outcomes
    assert "webhook source=ci delivery=log-ok outcome=duplicate" in outcomes
    assert "webhook source=ci delivery=- outcome=bad_signature" in outcomes


def test_the_source_repr_hides_its_secrets():
    source = webhooks.get_source("ci")
    assert source is not None and NEW not in repr(source) and OLD not in repr(source)


# -- races between processes' worth of requests ---------------------------------------------------


def _post_raw(url: str, body: bytes, sent: dict[str, str]) -> tuple[int, Any]:
    request_headers = {k.removeprefix("HTTP_").replace("_", "-"): v for k, v in sent.items()}
    request = urllib.request.Request(
        url, data=body, method="POST", headers={**request_headers, "Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def test_concurrent_redeliveries_deliver_once(live_server, sinks):
    """Eight threads of the live server race with one delivery id: the unique constraint picks one."""
    calls = sinks(KIND)
    django_wakes.watch(workspace_id=WS, event_key="ci:pass:abc", kind=KIND)
    body = encode(event())
    sent = headers(body, delivery="raced")
    answers: list[tuple[int, Any]] = []
    barrier = threading.Barrier(8)

    def send() -> None:
        barrier.wait()
        answers.append(_post_raw(live_server.url + URL, body, sent))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [200] * 8
    assert sorted(answer["accepted"] for _, answer in answers) == [0] * 7 + [1]
    assert sum(answer.get("duplicate", False) for _, answer in answers) == 7
    assert WebhookDelivery.objects.filter(delivery_id="raced").count() == 1
    django_wakes.run_due()
    assert len(calls) == 1


# -- the documented example, run as documented ------------------------------------------------------


def documented_snippet(heading: str) -> str:
    """The first ``sh`` code block after ``heading`` in docs/events.md."""
    text = DOCS.read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block under {heading!r}"
    return match.group(1)


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
def test_the_documented_openssl_and_curl_example_works(live_server, settings, sinks):
    calls = sinks(KIND)
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {"ci": {"SECRETS": ["s3cr3t-new", "s3cr3t-old"]}}}
    django_wakes.watch(workspace_id="w1", event_key="ci:pass:abc", kind=KIND)
    script = documented_snippet("### Our own scheme: `wakes`")
    assert "http://localhost:8000" in script
    script = script.replace("http://localhost:8000", live_server.url)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"accepted": 1}
    django_wakes.run_due()
    assert calls.results == [{"trigger": "on_event", "event_key": "ci:pass:abc", "payload": {"build": 42}}]
    # The same delivery id twice: the second is a duplicate, acknowledged and not delivered.
    fixed = script.replace("ID=$(openssl rand -hex 16)", "ID=fixed-id")
    outputs = [
        subprocess.run(["bash", "-euo", "pipefail", "-c", fixed], capture_output=True, text=True, timeout=60).stdout
        for _ in range(2)
    ]
    assert [json.loads(out) for out in outputs][0] == {"accepted": 0}
    assert json.loads(outputs[1]) == DUPLICATE


# -- forgetting ----------------------------------------------------------------------------------


def test_forget_deliveries_deletes_old_ids_only(client, clock):
    assert post(client, delivery="old").status_code == 200
    clock.advance("2h")
    assert post(client, delivery="new").status_code == 200
    clock.advance("30m")
    assert forget_deliveries("1h", batch=1) == 1
    assert list(WebhookDelivery.objects.values_list("delivery_id", flat=True)) == ["new"]
    assert forget_deliveries(timedelta(hours=1)) == 0


def test_forget_deliveries_refuses_to_reopen_the_replay_window():
    with pytest.raises(InvalidDuration, match="twice the webhook tolerance"):
        forget_deliveries("9m")
    assert forget_deliveries("10m") == 0


# -- the system check ----------------------------------------------------------------------------


def e008(settings: Any, webhooks_value: Any) -> list[str]:
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": webhooks_value}
    return [m.msg for m in check_wakes_settings() if m.id == "django_wakes.E008"]


def test_valid_webhooks_pass_the_check(settings):
    assert (
        e008(settings, {"ci": {"SECRETS": [NEW, OLD], "MAX_BYTES": 65536, "MAP": "tests.test_webhooks.from_provider"}})
        == []
    )
    assert e008(settings, {"a": {"SECRETS": ("x",), "MAX_BYTES": 1, "MAP": from_provider}}) == []
    limited = {"SECRETS": ["x"], "MAP": from_provider, "MAX_DELIVERIES": 1, "PER": timedelta(days=30)}
    assert e008(settings, {"a": limited, "b": {**limited, "MAX_DELIVERIES": 10**9, "PER": "1s"}}) == []


@pytest.mark.parametrize(
    "value",
    [
        ["ci"],
        {"": {"SECRETS": ["x"]}},
        {"a/b": {"SECRETS": ["x"]}},
        {"x" * 101: {"SECRETS": ["x"]}},
        {1: {"SECRETS": ["x"]}},
        {"ci": ["x"]},
        {"ci": {}},
        {"ci": {"SECRETS": []}},
        {"ci": {"SECRETS": "s3cr3t-as-a-string"}},
        {"ci": {"SECRETS": ["ok", ""]}},
        {"ci": {"SECRETS": ["ok", 42]}},
        {"ci": {"SECRETS": ["ok"], "MAX_BYTES": 0}},
        {"ci": {"SECRETS": ["ok"], "MAX_BYTES": "64k"}},
        {"ci": {"SECRETS": ["ok"], "MAX_BYTES": True}},
        {"ci": {"SECRETS": ["ok"], "MAP": "no.such.module"}},
        {"ci": {"SECRETS": ["ok"], "MAP": 3}},
        {"ci": {"SECRET": ["ok"]}},
        {"ci": {"SECRETS": ["ok"], "MAX_DELIVERIES": 0}},
        {"ci": {"SECRETS": ["ok"], "MAX_DELIVERIES": "100"}},
        {"ci": {"SECRETS": ["ok"], "MAX_DELIVERIES": True}},
        {"ci": {"SECRETS": ["ok"], "MAX_DELIVERIES": 1.5}},
        {"ci": {"SECRETS": ["ok"], "PER": "soon"}},
        {"ci": {"SECRETS": ["ok"], "PER": 3600}},
        {"ci": {"SECRETS": ["ok"], "PER": "0s"}},
        {"ci": {"SECRETS": ["ok"], "PER": "31d"}},
    ],
)
def test_bad_webhooks_are_e008(settings, value):
    assert len(e008(settings, value)) >= 1


@pytest.mark.parametrize(
    "value",
    [
        {"ci": {"SECRETS": ["ok"], "SCHEME": "svix"}},
        {"ci": {"SECRETS": ["ok"], "SCHEME": None}},
        {"ci": {"SECRETS": ["whsec_not base64!"], "SCHEME": "standard-webhooks"}},
        {"ci": {"SECRETS": ["whsec_"], "SCHEME": "standard-webhooks"}},
        {"ci": {"SECRETS": ["ok"], "SCHEME": "github"}},
        {"ci": {"SECRETS": ["ok"], "SCHEME": "stripe"}},
        {"ci": {"SECRETS": ["ok"], "WORKSPACE": ""}},
        {"ci": {"SECRETS": ["ok"], "WORKSPACE": 7}},
        {"ci": {"SECRETS": ["ok"], "WORKSPACE": "x" * 201}},
    ],
)
def test_bad_schemes_secrets_and_workspaces_are_e008(settings, value):
    assert len(e008(settings, value)) == 1


def test_schemes_with_their_secrets_pass_the_check(settings):
    mapper = "tests.test_webhooks.from_provider"
    assert (
        e008(
            settings,
            {
                "a": {"SECRETS": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "SCHEME": "standard-webhooks"},
                "b": {"SECRETS": ["It's a Secret to Everybody"], "SCHEME": "github", "MAP": mapper},
                "c": {"SECRETS": ["whsec_test_secret"], "SCHEME": "stripe", "MAP": mapper, "WORKSPACE": "w1"},
                "d": {"SECRETS": ["x"], "SCHEME": "wakes", "WORKSPACE": "w1"},
            },
        )
        == []
    )


def w004(settings: Any, webhooks_value: Any) -> list[str]:
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": webhooks_value}
    return [m.msg for m in check_wakes_settings() if m.id == "django_wakes.W004"]


def test_a_source_whose_body_names_the_workspace_is_w004(settings):
    messages = w004(
        settings, {"open": {"SECRETS": ["x"]}, "sw": {"SECRETS": ["whsec_AAAA"], "SCHEME": "standard-webhooks"}}
    )
    assert len(messages) == 2 and "'open'" in messages[0] and "any workspace" in messages[0]
    assert w004(settings, {"pinned": {"SECRETS": ["x"], "WORKSPACE": "w1"}}) == []
    assert w004(settings, {"mapped": {"SECRETS": ["x"], "MAP": from_provider}}) == []


def test_e008_never_shows_a_secret(settings):
    messages = e008(settings, {"ci": {"SECRETS": "s3cr3t-as-a-string"}, "cd": {"SECRETS": ["s3cr3t-in-a-list", 42]}})
    assert len(messages) == 2
    assert not any("s3cr3t" in message for message in messages)


def test_webhooks_and_api_auth_are_known_settings(settings):
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": {}, "API_AUTH": None}
    assert [m for m in check_wakes_settings() if m.id in ("django_wakes.W003", "django_wakes.E008")] == []
