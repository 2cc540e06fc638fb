"""Every real sender's scheme, signed by the sender's own library or documented algorithm, against a live server.

Standard Webhooks requests are signed with the ``standardwebhooks`` package (and checked by its own
``verify``), Stripe's with the ``stripe`` package's ``WebhookSignature`` (and its ``verify_header``),
GitHub's with the algorithm GitHub documents, checked against GitHub's published test vector. Each
scheme's documented MAP (docs/events.md, run as written) fires a watcher exactly once across
redeliveries posted to the live server; each refusal of each scheme (401 missing, wrong or stale
signature, 400 bad body or delivery id, 403 another workspace) has its test.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks
import stripe
from django.test import Client

import django_wakes
from django_wakes.models import Wake, WebhookDelivery
from django_wakes.web.webhook_schemes import SCHEMES, Unauthorized
from django_wakes.web.webhook_schemes import github as github_scheme

pytestmark = pytest.mark.django_db(transaction=True)

KIND = "test.webhook_schemes"
WS = "acme"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "events.md"

# Standard Webhooks secrets are "whsec_" + base64 of the key; the one below is the specification's example.
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_OLD = "whsec_" + base64.b64encode(b"an older key of 24 bytes!").decode()
GH_SECRET = "gh-s3cr3t-Vq81"
STRIPE_SECRET = "whsec_test_secret_5aRk"
STRIPE_OLD = "whsec_test_secret_old_Jp2"

# GitHub's published test vector ("Validating webhook deliveries", "Testing the webhook payload validation").
GH_VECTOR_SECRET = "It's a Secret to Everybody"
GH_VECTOR_BODY = b"Hello, World!"
GH_VECTOR_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


# -- the documented MAPs, run as written ---------------------------------------------------------------


def documented_blocks(heading: str, language: str) -> list[str]:
    """The ``language`` code blocks of the docs/events.md section under ``heading`` (to the next heading)."""
    text = DOCS.read_text()
    start = text.index(heading)
    end = text.find("\n### ", start + len(heading))
    section = text[start : end if end > 0 else None]
    return [str(block) for block in re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)]


def documented_map(heading: str, name: str) -> Any:
    """The ``MAP`` function ``name`` as docs/events.md defines it under ``heading``."""
    namespace: dict[str, Any] = {}
    block = next(b for b in documented_blocks(heading, "python") if f"def {name}(" in b)
    exec(block, namespace)
    return namespace[name]


def documented_sources(heading: str) -> dict[str, Any]:
    """The ``WAKES["WEBHOOKS"]`` of the documented settings block under ``heading`` (os.environ as the test set it)."""
    namespace: dict[str, Any] = {"os": os}
    block = next(b for b in documented_blocks(heading, "python") if "WAKES = {" in b)
    exec(block, namespace)
    return dict(namespace["WAKES"]["WEBHOOKS"])


SW_HEADING = "### Standard Webhooks"
GH_HEADING = "### GitHub"
STRIPE_HEADING = "### Stripe"


@pytest.fixture(autouse=True)
def sources(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three documented sources, their MAPs the documented functions, secrets from the environment."""
    monkeypatch.setenv("PLATFORM_WEBHOOK_SECRET", SW_SECRET)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", GH_SECRET)
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", STRIPE_SECRET)
    configured: dict[str, Any] = {}
    for heading, function in (
        (SW_HEADING, "from_platform"),
        (GH_HEADING, "from_github"),
        (STRIPE_HEADING, "from_stripe"),
    ):
        for name, config in documented_sources(heading).items():
            assert config["MAP"] == f"myapp.hooks.{function}"
            configured[name] = {**config, "MAP": documented_map(heading, function)}
    configured["platform"]["SECRETS"].append(SW_OLD)  # rotating
    configured["stripe"]["SECRETS"].append(STRIPE_OLD)
    configured["github-vector"] = {"SCHEME": "github", "SECRETS": [GH_VECTOR_SECRET], "WORKSPACE": WS, "MAP": dict}
    settings.WAKES = {**settings.WAKES, "WEBHOOKS": configured}


@pytest.fixture
def calls(sinks: Any) -> Any:
    return sinks(KIND)


# -- senders ---------------------------------------------------------------------------------------


def standard_webhooks_headers(body: str, *, message_id: str, secret: str = SW_SECRET, at: datetime | None = None):
    """What a Standard Webhooks sender sends, signed by the reference library."""
    sent_at = at or datetime.now(tz=UTC)
    signature = standardwebhooks.Webhook(secret).sign(message_id, sent_at, body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signature,
    }


def github_headers(body: bytes, *, delivery: str, event: str = "check_suite", secret: str = GH_SECRET):
    """What GitHub sends: the documented HMAC-SHA256 of the body, the event's name and the delivery's GUID."""
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": github_scheme.sign(secret, body),
    }


def stripe_headers(body: str, *, secret: str = STRIPE_SECRET, at: int | None = None) -> dict[str, str]:
    """What Stripe sends, signed by the ``stripe`` package's own helper."""
    header = stripe.WebhookSignature.generate_signature_header(body, secret, int(time.time()) if at is None else at)
    return {"Stripe-Signature": header}


def http_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
    """POST over a real socket; return the status, the JSON answer and the response headers."""
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status), json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read()), dict(exc.headers)


def check_suite(sha: str, conclusion: str = "success", action: str = "completed") -> dict[str, Any]:
    return {
        "action": action,
        "check_suite": {
            "id": 5,
            "head_sha": sha,
            "head_branch": "main",
            "conclusion": conclusion,
            "url": "https://api.github.com/repos/octo/app/check-suites/5",
        },
        "repository": {"full_name": "octo/app"},
    }


def stripe_event(event_id: str, intent_id: str, kind: str = "payment_intent.succeeded") -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": 1767225600,
        "type": kind,
        "data": {"object": {"id": intent_id, "object": "payment_intent", "amount_received": 2000, "currency": "eur"}},
    }


DUPLICATE = {"accepted": 0, "duplicate": True}


# -- against the live server: each sender fires its watcher exactly once across redeliveries --------------


def test_standard_webhooks_fires_once_across_redeliveries(live_server, calls):
    wake = django_wakes.watch(workspace_id=WS, event_key="invoice.paid:inv_7", kind=KIND)
    body = json.dumps(
        {"type": "invoice.paid", "timestamp": "2026-12-01T12:00:00Z", "data": {"id": "inv_7", "cents": 5}}
    )
    url = live_server.url + "/wakes/events/platform/"
    message_id = f"msg_{uuid.uuid4().hex}"
    first = standard_webhooks_headers(body, message_id=message_id)
    # What we accept is what the reference library's own receiver accepts.
    assert standardwebhooks.Webhook(SW_SECRET).verify(body.encode(), first)["data"]["id"] == "inv_7"
    answers = [http_post(url, body.encode(), first)[:2]]
    # A resend keeps the message id and is signed afresh; one signed with the old secret during rotation too.
    answers.append(http_post(url, body.encode(), standard_webhooks_headers(body, message_id=message_id))[:2])
    answers.append(
        http_post(url, body.encode(), standard_webhooks_headers(body, message_id=message_id, secret=SW_OLD))[:2]
    )
    assert answers == [(200, {"accepted": 1}), (200, DUPLICATE), (200, DUPLICATE)]
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]
    assert calls.results == [
        {"trigger": "on_event", "event_key": "invoice.paid:inv_7", "payload": {"id": "inv_7", "cents": 5}}
    ]
    assert list(WebhookDelivery.objects.values_list("source", "delivery_id")) == [("platform", message_id)]


def test_github_check_suite_fires_the_commits_watcher_once_across_redeliveries(live_server, calls):
    sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    wake = django_wakes.watch(
        workspace_id=WS, event_key=f"github:check_suite:{sha}", match={"payload.conclusion": "success"}, kind=KIND
    )
    other = django_wakes.watch(workspace_id=WS, event_key="github:check_suite:0000000", kind=KIND)
    url = live_server.url + "/wakes/events/github/"
    guid = str(uuid.uuid4())
    body = json.dumps(check_suite(sha)).encode()
    ping = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()
    answers = [
        http_post(url, ping, github_headers(ping, delivery=str(uuid.uuid4()), event="ping"))[:2],
        http_post(url, body, github_headers(body, delivery=guid))[:2],
        http_post(url, body, github_headers(body, delivery=guid))[:2],  # "Redeliver": the same GUID
    ]
    assert answers == [(200, {"accepted": 0}), (200, {"accepted": 1}), (200, DUPLICATE)]
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]
    assert calls.results[0]["payload"] == {
        "conclusion": "success",
        "branch": "main",
        "url": "https://api.github.com/repos/octo/app/check-suites/5",
    }
    assert Wake.objects.get(pk=other.pk).fire_at is None


def test_stripe_payment_intent_succeeded_fires_once_across_retries(live_server, calls):
    wake = django_wakes.watch(workspace_id=WS, event_key="stripe:payment_intent:pi_3Q1", kind=KIND)
    url = live_server.url + "/wakes/events/stripe/"
    body = json.dumps(stripe_event("evt_1Q1", "pi_3Q1"))
    headers = stripe_headers(body)
    # What we accept is what Stripe's own library accepts.
    assert stripe.WebhookSignature.verify_header(body, headers["Stripe-Signature"], STRIPE_SECRET, 300)
    # While a secret is rolled, Stripe signs with each active one in the same header.
    rolled = stripe_headers(body, secret=STRIPE_OLD)["Stripe-Signature"] + ",v1=" + "0" * 64
    answers = [
        http_post(url, body.encode(), headers)[:2],
        http_post(url, body.encode(), stripe_headers(body))[:2],  # a retry: the same event, signed afresh
        http_post(url, body.encode(), {"Stripe-Signature": rolled})[:2],
    ]
    assert answers == [(200, {"accepted": 1}), (200, DUPLICATE), (200, DUPLICATE)]
    other = json.dumps(stripe_event("evt_1Q2", "pi_3Q1", kind="payment_intent.created"))
    assert http_post(url, other.encode(), stripe_headers(other))[:2] == (200, {"accepted": 0})
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [wake.pk]
    assert calls.results[0]["payload"] == {"amount": 2000, "currency": "eur"}


def test_racing_redeliveries_of_each_scheme_deliver_once(live_server, calls):
    """Six threads post one delivery of each scheme to the live server at once: one delivers, five are duplicates
    (GitHub's under six different delivery ids: the body's unique digest decides between the racers)."""
    sha = "b" * 40
    for key in ("invoice.paid:inv_race", f"github:check_suite:{sha}", "stripe:payment_intent:pi_race"):
        django_wakes.watch(workspace_id=WS, event_key=key, kind=KIND)
    sw_body = json.dumps({"type": "invoice.paid", "timestamp": "2026-12-01T12:00:00Z", "data": {"id": "inv_race"}})
    gh_body = json.dumps(check_suite(sha)).encode()
    st_body = json.dumps(stripe_event("evt_race", "pi_race"))
    requests = {
        "platform": (sw_body.encode(), standard_webhooks_headers(sw_body, message_id="msg_race")),
        "github": (gh_body, github_headers(gh_body, delivery=str(uuid.uuid4()))),
        "stripe": (st_body.encode(), stripe_headers(st_body)),
    }
    for source, (body, headers) in requests.items():
        answers: list[Any] = []
        barrier = threading.Barrier(6)

        def send(
            source: str = source,
            body: bytes = body,
            headers: dict[str, str] = headers,
            barrier: threading.Barrier = barrier,
            answers: list[Any] = answers,
        ) -> None:
            if source == "github":  # GitHub's id is not signed: each racer sends the body under an id of its own
                headers = {**headers, "X-GitHub-Delivery": str(uuid.uuid4())}
            barrier.wait()
            answers.append(http_post(f"{live_server.url}/wakes/events/{source}/", body, headers)[:2])

        threads = [threading.Thread(target=send) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(json.dumps(a) for a in answers) == sorted(
            [json.dumps((200, {"accepted": 1}))] + [json.dumps((200, DUPLICATE))] * 5
        ), source
    assert django_wakes.run_due().fired == 3
    assert len(calls) == 3


# -- GitHub's published test vector ----------------------------------------------------------------


def test_githubs_published_test_vector_verifies():
    headers = {"X-Hub-Signature-256": GH_VECTOR_SIGNATURE}
    SCHEMES["github"].verify([GH_VECTOR_SECRET], headers, GH_VECTOR_BODY, 0.0)
    assert github_scheme.sign(GH_VECTOR_SECRET, GH_VECTOR_BODY) == GH_VECTOR_SIGNATURE
    with pytest.raises(Unauthorized):
        SCHEMES["github"].verify([GH_VECTOR_SECRET], headers, b"Hello, World?", 0.0)
    with pytest.raises(Unauthorized):
        SCHEMES["github"].verify(["It's a secret to everybody"], headers, GH_VECTOR_BODY, 0.0)


def test_githubs_test_vector_posted_to_the_live_server_passes_the_signature(live_server):
    """The vector's body is not JSON: accepted as signed (then 400), refused unsigned if a byte changes (401)."""
    url = live_server.url + "/wakes/events/github-vector/"
    headers = {"X-Hub-Signature-256": GH_VECTOR_SIGNATURE, "X-GitHub-Delivery": str(uuid.uuid4())}
    status, answer, _ = http_post(url, GH_VECTOR_BODY, headers)
    assert (status, answer["error"]) == (400, "bad_json")
    status, answer, response_headers = http_post(url, b"Hello, World?", headers)
    assert (status, answer["error"]) == (401, "bad_signature")
    assert response_headers["WWW-Authenticate"] == 'Signature realm="django-wakes", header="X-Hub-Signature-256"'


# -- the documented senders, run as written against the live server -------------------------------------


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )


def test_the_documented_standard_webhooks_sender_works(live_server, calls):
    wake = django_wakes.watch(workspace_id=WS, event_key="invoice.paid:inv_42", kind=KIND)
    (code,) = [b for b in documented_blocks(SW_HEADING, "python") if "from standardwebhooks import Webhook" in b]
    code = code.replace("http://localhost:8000", live_server.url)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"accepted": 1}
    fixed = code.replace('f"msg_{uuid.uuid4().hex}"', '"msg_fixed"')
    assert fixed != code
    assert [json.loads(run_python(fixed).stdout) for _ in range(2)] == [{"accepted": 0}, DUPLICATE]
    django_wakes.run_due()
    assert calls.ids == [wake.pk]


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl")
def test_the_documented_github_curl_example_works(live_server, calls):
    sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    wake = django_wakes.watch(workspace_id=WS, event_key=f"github:check_suite:{sha}", kind=KIND)
    (script,) = documented_blocks(GH_HEADING, "sh")
    script = script.replace("http://localhost:8000", live_server.url)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"accepted": 1}
    fixed = script.replace("DELIVERY=$(openssl rand -hex 16)", "DELIVERY=72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert fixed != script
    outputs = [
        subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True, timeout=60).stdout
        for code in (script, fixed)
    ]
    # The same signed body again, under a fresh id or another: a duplicate (GitHub signs the body only).
    assert [json.loads(out) for out in outputs] == [DUPLICATE, DUPLICATE]
    django_wakes.run_due()
    assert calls.ids == [wake.pk]


def test_the_documented_stripe_sender_works(live_server, calls):
    wake = django_wakes.watch(workspace_id=WS, event_key="stripe:payment_intent:pi_3QdEmo0001", kind=KIND)
    (code,) = [b for b in documented_blocks(STRIPE_HEADING, "python") if "import stripe" in b]
    code = code.replace("http://localhost:8000", live_server.url)
    outputs = [run_python(code) for _ in range(2)]  # Stripe's retry: the same event id
    assert outputs[0].returncode == 0, outputs[0].stderr
    assert [json.loads(out.stdout) for out in outputs] == [{"accepted": 1}, DUPLICATE]
    django_wakes.run_due()
    assert calls.ids == [wake.pk]


# -- refusals, scheme by scheme (Django's test client: the same view, no socket) ---------------------------


def post(source: str, body: bytes, headers: dict[str, str]) -> Any:
    meta = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
    return Client().post(f"/wakes/events/{source}/", data=body, content_type="application/json", **meta)


def error(response: Any) -> str:
    return str(response.json()["error"])


SW_BODY = json.dumps({"type": "invoice.paid", "timestamp": "2026-12-01T12:00:00Z", "data": {"id": "inv_1"}})


@pytest.mark.parametrize(
    ("source", "headers"),
    [
        ("platform", {}),
        ("platform", {"webhook-id": "msg_1", "webhook-timestamp": "1767225600"}),
        ("platform", {"webhook-id": "msg_1", "webhook-signature": "v1,AAAA"}),
        ("platform", {"webhook-id": "msg_1", "webhook-timestamp": "soon", "webhook-signature": "v1,AAAA"}),
        ("platform", {"webhook-id": "msg_1", "webhook-timestamp": "1767225600", "webhook-signature": "v1a,AAAA"}),
        ("github", {"X-GitHub-Delivery": "g-1"}),
        ("github", {"X-GitHub-Delivery": "g-1", "X-Hub-Signature": "sha1=" + "0" * 40}),  # the legacy SHA-1 only
        ("github", {"X-GitHub-Delivery": "g-1", "X-Hub-Signature-256": "sha256=abc"}),
        ("stripe", {}),
        ("stripe", {"Stripe-Signature": "v1=" + "0" * 64}),
        ("stripe", {"Stripe-Signature": "t=1767225600"}),
        ("stripe", {"Stripe-Signature": "t=1767225600,v0=" + "0" * 64}),
    ],
)
def test_a_missing_or_malformed_signature_is_401_with_a_challenge(source, headers):
    response = post(source, SW_BODY.encode(), headers)
    assert (response.status_code, error(response)) == (401, "unauthorized")
    assert response["WWW-Authenticate"].startswith('Signature realm="django-wakes", header=')
    assert not WebhookDelivery.objects.exists()


def test_a_wrong_signature_is_401_for_every_scheme():
    body = json.dumps(stripe_event("evt_1", "pi_1"))
    wrong_sw = standard_webhooks_headers(body, message_id="m1", secret="whsec_" + base64.b64encode(b"x" * 24).decode())
    responses = [
        post("platform", body.encode(), wrong_sw),
        post("github", body.encode(), github_headers(body.encode(), delivery="g1", secret="not-it")),
        post("stripe", body.encode(), stripe_headers(body, secret="whsec_not_it")),
        # signed for another body
        post("platform", body.encode() + b" ", standard_webhooks_headers(body, message_id="m1")),
        post("github", body.encode() + b" ", github_headers(body.encode(), delivery="g1")),
        post("stripe", body.encode() + b" ", stripe_headers(body)),
        # a Standard Webhooks signature whose message id was changed: the id is signed
        post("platform", body.encode(), {**standard_webhooks_headers(body, message_id="m1"), "webhook-id": "m2"}),
    ]
    assert [(r.status_code, error(r)) for r in responses] == [(401, "bad_signature")] * 7


def test_several_standard_webhooks_signatures_in_one_header_any_v1_may_match(calls):
    """A sender rotating its secret signs with each; other versions (v1a, asymmetric) are skipped."""
    django_wakes.watch(workspace_id=WS, event_key="invoice.paid:inv_1", kind=KIND)
    other_key = "whsec_" + base64.b64encode(b"a key this source never had").decode()
    signed = standard_webhooks_headers(SW_BODY, message_id="msg_multi")
    wrong = standard_webhooks_headers(SW_BODY, message_id="msg_multi", secret=other_key)["webhook-signature"]
    several = f"{wrong} v1a,{base64.b64encode(b'x' * 64).decode()} {signed['webhook-signature']}"
    assert standardwebhooks.Webhook(SW_SECRET).verify(SW_BODY.encode(), {**signed, "webhook-signature": several})
    assert post("platform", SW_BODY.encode(), {**signed, "webhook-signature": several}).json() == {"accepted": 1}
    only_wrong = {**signed, "webhook-id": "msg_multi_2", "webhook-signature": f"{wrong} v1a,AAAA"}
    assert post("platform", SW_BODY.encode(), only_wrong).status_code == 401


def test_svix_header_names_are_read_when_the_webhook_ones_are_absent(calls):
    django_wakes.watch(workspace_id=WS, event_key="invoice.paid:inv_1", kind=KIND)
    signed = standard_webhooks_headers(SW_BODY, message_id="msg_svix")
    svix = {name.replace("webhook-", "svix-"): value for name, value in signed.items()}
    assert post("platform", SW_BODY.encode(), svix).json() == {"accepted": 1}
    assert post("platform", SW_BODY.encode(), signed).json() == DUPLICATE  # the same id under either name
    assert WebhookDelivery.objects.get().delivery_id == "msg_svix"


def test_stripes_secret_is_used_as_text_and_standard_webhooks_as_base64():
    """Each scheme's secret encoding: a sender of one scheme signing as the other is refused."""
    body = SW_BODY
    as_text = standardwebhooks.Webhook(SW_SECRET.encode()).sign("m-enc", datetime.now(tz=UTC), body)  # key = the text
    headers = {**standard_webhooks_headers(body, message_id="m-enc"), "webhook-signature": as_text}
    assert post("platform", body.encode(), headers).status_code == 401
    assert post("platform", body.encode(), standard_webhooks_headers(body, message_id="m-enc")).status_code == 200


@pytest.mark.parametrize("offset", [-301, -86_400])
def test_a_stale_timestamp_is_401_where_the_scheme_has_one(offset):
    at = int(time.time()) + offset
    body = json.dumps(stripe_event(f"evt_stale{offset}", "pi_1"))
    sw = post(
        "platform",
        SW_BODY.encode(),
        standard_webhooks_headers(SW_BODY, message_id="m", at=datetime.fromtimestamp(at, UTC)),
    )
    st = post("stripe", body.encode(), stripe_headers(body, at=at))
    assert [(r.status_code, error(r)) for r in (sw, st)] == [(401, "stale_timestamp")] * 2
    with pytest.raises(stripe.SignatureVerificationError):  # what Stripe's own library says of it too
        stripe.WebhookSignature.verify_header(body, stripe_headers(body, at=at)["Stripe-Signature"], STRIPE_SECRET, 300)


@pytest.mark.parametrize("offset", [330, 400, 86_400])
def test_a_stripe_timestamp_ahead_of_the_clock_is_accepted_as_stripes_library_accepts_it(offset, calls):
    """Stripe's ``construct_event`` checks the past side only: a receiver whose clock lags is not refused."""
    django_wakes.watch(workspace_id=WS, event_key="stripe:payment_intent:pi_ahead", kind=KIND)
    at = int(time.time()) + offset
    body = json.dumps(stripe_event(f"evt_ahead{offset}", "pi_ahead"))
    header = stripe_headers(body, at=at)["Stripe-Signature"]
    assert stripe.Webhook.construct_event(body, header, STRIPE_SECRET).id == f"evt_ahead{offset}"
    assert post("stripe", body.encode(), {"Stripe-Signature": header}).json() == {"accepted": 1}
    # Standard Webhooks (its library checks both sides) still refuses a timestamp that far ahead.
    sw = standard_webhooks_headers(SW_BODY, message_id=f"m{offset}", at=datetime.fromtimestamp(at, UTC))
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SW_SECRET).verify(SW_BODY.encode(), sw)
    assert error(post("platform", SW_BODY.encode(), sw)) == "stale_timestamp"


def test_github_has_no_timestamp_so_an_old_body_is_refused_while_it_is_remembered(settings):
    """The documented limit: a captured GitHub request verifies whenever it is sent; its remembered body stops it."""
    body = json.dumps(check_suite("c" * 40)).encode()
    headers = github_headers(body, delivery="g-captured")
    assert post("github", body, headers).json() == {"accepted": 0}
    assert post("github", body, headers).json() == DUPLICATE  # days later: its id and its body refuse it
    assert post("github", body, {**headers, "X-GitHub-Delivery": "g-fresh"}).json() == DUPLICATE
    WebhookDelivery.objects.all().delete()  # gc forgot it (30 days by default)
    assert post("github", body, headers).json() == {"accepted": 0}  # verifies again: what the docs warn about


def test_300_replays_of_one_github_ping_under_fresh_delivery_ids_store_one_row(calls):
    """Issue 26, finding 2: GitHub signs the body only, so a fresh X-GitHub-Delivery made a new delivery each time."""
    ping = json.dumps({"zen": "Design for failure.", "hook_id": 4242, "hook": {"type": "Repository"}}).encode()
    answers = [post("github", ping, github_headers(ping, delivery=str(uuid.uuid4()), event="ping")).json()]
    for _ in range(299):
        answers.append(post("github", ping, github_headers(ping, delivery=str(uuid.uuid4()), event="ping")).json())
    assert answers[0] == {"accepted": 0}
    assert answers.count(DUPLICATE) == 299, [a for a in answers[1:] if a != DUPLICATE][:3]
    # Under another (unsigned) event name the body is refused for what it is, and still nothing is stored.
    for event in ("push", "check_suite"):
        response = post("github", ping, github_headers(ping, delivery=str(uuid.uuid4()), event=event))
        assert (response.status_code, error(response)) == (400, "event_mismatch")
    assert WebhookDelivery.objects.filter(source="github").count() == 1


def test_a_replayed_github_body_under_a_fresh_id_wakes_no_second_watcher(calls):
    """The captured check_suite of one commit cannot fire the next watcher of that commit under a new id."""
    sha = "d" * 40
    first = django_wakes.watch(workspace_id=WS, event_key=f"github:check_suite:{sha}", kind=KIND)
    body = json.dumps(check_suite(sha)).encode()
    assert post("github", body, github_headers(body, delivery=str(uuid.uuid4()))).json() == {"accepted": 1}
    second = django_wakes.watch(workspace_id=WS, event_key=f"github:check_suite:{sha}", kind=KIND)
    assert post("github", body, github_headers(body, delivery=str(uuid.uuid4()))).json() == DUPLICATE
    assert django_wakes.run_due().fired == 1
    assert calls.ids == [first.pk]
    assert Wake.objects.get(pk=second.pk).fire_at is None


@pytest.mark.parametrize(
    ("event", "body", "seen"),
    [
        ("check_suite", check_suite("e" * 40), "check_suite"),
        ("ping", {"zen": "Keep it logically awesome.", "hook_id": 1}, "ping"),
        ("push", {"ref": "refs/heads/main", "before": "0" * 40, "after": "e" * 40, "commits": []}, "push"),
        ("release", {"action": "published", "release": {"id": 1}}, "release"),  # a key of its own name
        ("star", {"action": "created", "starred_at": None}, None),  # nothing in the body names it
        ("repository", {"action": "renamed", "repository": {}}, None),  # every body has a repository
        ("", {"zen": "x", "hook_id": 1}, None),
    ],
)
def test_the_github_event_name_is_believed_as_the_body_confirms_it(settings, event, body, seen):
    events: list[Any] = []
    settings.WAKES["WEBHOOKS"]["github"]["MAP"] = lambda delivery: events.append(delivery.event_type)
    raw = json.dumps(body).encode()
    assert post("github", raw, github_headers(raw, delivery=str(uuid.uuid4()), event=event)).json() == {"accepted": 0}
    assert events == [seen]


@pytest.mark.parametrize(
    ("event", "body"),
    [
        ("push", check_suite("f" * 40)),  # a signed check_suite body under another name
        ("check_suite", {"zen": "x", "hook_id": 1}),
        ("check_run", {"action": "created", "check_run": {}, "deployment_status": {}}),
        ("pull_request", {"action": "submitted", "pull_request": {}, "review": {}, "number": 1}),
        ("issues", {"action": "created", "issue": {}, "comment": {}}),
        ("create", {"ref": "v1", "ref_type": "tag", "pusher_type": "user"}),  # a delete body
        ("delete", {"ref": "v1", "ref_type": "tag", "master_branch": "main", "pusher_type": "user"}),
    ],
)
def test_a_github_event_name_the_body_contradicts_is_400_and_stores_nothing(calls, event, body):
    raw = json.dumps(body).encode()
    response = post("github", raw, github_headers(raw, delivery=str(uuid.uuid4()), event=event))
    assert (response.status_code, error(response)) == (400, "event_mismatch")
    assert not WebhookDelivery.objects.exists()


@pytest.mark.parametrize("source", ["platform", "github", "stripe"])
def test_every_scheme_is_capped_per_source_with_429_and_retry_after(settings, source, calls):
    settings.WAKES["WEBHOOKS"][source].update(MAX_DELIVERIES=2, PER="1h")

    def signed(number: int) -> tuple[bytes, dict[str, str]]:
        if source == "platform":
            body = json.dumps({"type": "invoice.paid", "timestamp": "2026-12-01T12:00:00Z", "data": {"id": number}})
            return body.encode(), standard_webhooks_headers(body, message_id=f"msg_cap{number}")
        if source == "github":
            raw = json.dumps(check_suite(f"{number:040x}")).encode()
            return raw, github_headers(raw, delivery=str(uuid.uuid4()))
        body = json.dumps(stripe_event(f"evt_cap{number}", f"pi_cap{number}"))
        return body.encode(), stripe_headers(body)

    statuses = [post(source, *signed(number)) for number in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    assert error(statuses[2]) == "too_many_deliveries"
    assert 3590 <= int(statuses[2]["Retry-After"]) <= 3600
    assert WebhookDelivery.objects.filter(source=source).count() == 2


@pytest.mark.parametrize(
    ("source", "body", "headers_of", "code"),
    [
        ("platform", b"not json", lambda b: standard_webhooks_headers(b.decode(), message_id="m"), "bad_json"),
        ("github", b"[1]", lambda b: github_headers(b, delivery="g"), "bad_json"),
        ("stripe", b"", lambda b: stripe_headers(b.decode()), "bad_json"),
        # a signed request without a delivery id
        (
            "platform",
            SW_BODY.encode(),
            lambda b: standard_webhooks_headers(b.decode(), message_id=""),
            "bad_delivery_id",
        ),
        ("github", b"{}", lambda b: github_headers(b, delivery=""), "bad_delivery_id"),
        ("github", b"{}", lambda b: github_headers(b, delivery="has space"), "bad_delivery_id"),
        (
            "stripe",
            json.dumps({"type": "payment_intent.succeeded"}).encode(),
            lambda b: stripe_headers(b.decode()),
            "bad_delivery_id",
        ),
        ("stripe", json.dumps({"id": 7}).encode(), lambda b: stripe_headers(b.decode()), "bad_delivery_id"),
        # a body the documented MAP cannot read
        (
            "platform",
            json.dumps({"type": "x"}).encode(),
            lambda b: standard_webhooks_headers(b.decode(), message_id="m"),
            "bad_request",
        ),
        (
            "github",
            json.dumps({"action": "completed", "check_suite": {"id": 5}}).encode(),
            lambda b: github_headers(b, delivery="g"),
            "bad_request",
        ),
        (
            "github",
            json.dumps({"action": "completed"}).encode(),
            lambda b: github_headers(b, delivery="g"),
            "event_mismatch",
        ),
        (
            "stripe",
            json.dumps({"id": "evt_x", "type": "payment_intent.succeeded", "data": {}}).encode(),
            lambda b: stripe_headers(b.decode()),
            "bad_request",
        ),
    ],
)
def test_a_bad_body_or_delivery_id_is_400_once_signed(source, body, headers_of, code):
    response = post(source, body, headers_of(body))
    assert (response.status_code, error(response)) == (400, code)
    assert not WebhookDelivery.objects.exists()
    unsigned = post(source, body, {})
    assert unsigned.status_code == 401  # the same request unsigned is refused for its signature first


def test_a_pinned_source_refuses_an_event_for_another_workspace(settings, calls):
    def elsewhere(delivery: Any) -> dict[str, Any]:
        return {"workspace_id": "not-acme", "event_key": "invoice.paid:inv_1"}

    settings.WAKES["WEBHOOKS"]["platform"]["MAP"] = elsewhere
    django_wakes.watch(workspace_id="not-acme", event_key="invoice.paid:inv_1", kind=KIND)
    response = post("platform", SW_BODY.encode(), standard_webhooks_headers(SW_BODY, message_id="m-ws"))
    assert (response.status_code, error(response)) == (403, "wrong_workspace")
    assert django_wakes.run_due().fired == 0


@pytest.mark.parametrize("source", ["platform", "github", "stripe"])
def test_404_405_413_come_first_for_every_scheme(settings, source):
    settings.WAKES["WEBHOOKS"][source]["MAX_BYTES"] = 64
    client = Client()
    assert client.post(f"/wakes/events/{source}-nope/", data=b"{}", content_type="application/json").status_code == 404
    assert client.get(f"/wakes/events/{source}/").status_code == 405
    response = client.post(f"/wakes/events/{source}/", data=b" " * 65, content_type="application/json")
    assert (response.status_code, error(response)) == (413, "too_large")


def test_every_secret_and_every_signature_is_compared(monkeypatch):
    """Two secrets, three signatures in the header: six constant-time comparisons, whichever matches."""
    import hmac as hmac_module

    compared: list[int] = []
    real = hmac_module.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac_module, "compare_digest", spy)
    body = json.dumps(stripe_event("evt_cmp", "pi_cmp"))
    header = stripe_headers(body)["Stripe-Signature"] + ",v1=" + "1" * 64 + ",v1=" + "2" * 64
    assert post("stripe", body.encode(), {"Stripe-Signature": header}).status_code == 200
    assert len(compared) == 6
