"""The Prometheus endpoint: who may read it, what it says (checked against what the engine did), its format.

The exposition is parsed here with a strict reader of the text format 0.0.4 (HELP and TYPE before a
family's samples, label values escaped, histogram buckets cumulative and ending at ``+Inf``), so a
malformed line fails a test rather than a scrape in production.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.checks import run_checks
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes.console import metrics, workspaces
from django_wakes.engine import runners as runner_rows
from django_wakes.models import State, TriggerType, Wake
from django_wakes.testing import FakeClock

pytestmark = pytest.mark.django_db

KIND = "test.metrics"
WS = "ws-metrics"
TOKEN = "m" * 20 + "-scraper-token-0123456789"
OLD_TOKEN = "o" * 40
URL = "/wakes/metrics/"

SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})? (\S+)$'
)
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse(text: str) -> dict[str, Any]:
    """Read an exposition strictly; return ``{family: {"type": ..., "samples": [(name, labels, value)]}}``."""
    assert text.endswith("\n")
    families: dict[str, Any] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in families, f"family {name} twice"
            families[name] = {"help": line.split(" ", 3)[3], "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == current and kind in ("gauge", "counter", "histogram")
            families[name]["type"] = kind
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, labels, value = match.groups()
            assert current is not None and name.startswith(current), f"{name} outside its family"
            suffix = name[len(current) :]
            assert suffix in (("_bucket", "_sum", "_count") if families[current]["type"] == "histogram" else ("",))
            parsed = {
                k: v.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
                for k, v in LABEL.findall(labels or "")
            }
            families[current]["samples"].append((name, parsed, float(value)))
    for name, family in families.items():
        if family["type"] == "histogram":
            buckets = [(s[1]["le"], s[2]) for s in family["samples"] if s[0].endswith("_bucket")]
            counts = [count for _, count in buckets]
            assert counts == sorted(counts), f"{name} buckets not cumulative"
            assert buckets[-1][0] == "+Inf"
            (total,) = [s[2] for s in family["samples"] if s[0].endswith("_count")]
            assert buckets[-1][1] == total
    return families


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """The one sample named ``sample`` (a family, or a histogram's ``_bucket``/``_sum``/``_count``) with ``labels``."""
    family = re.sub(r"_(bucket|sum|count)$", "", sample) if sample not in families else sample
    found = [v for name, lab, v in families[family]["samples"] if name == sample and lab == labels]
    assert len(found) == 1, (sample, labels, families[family]["samples"])
    return float(found[0])


def scrape(clock: FakeClock) -> dict[str, Any]:
    return parse(metrics.exposition(clock.now()))


@pytest.fixture
def tokens(settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "METRICS_TOKENS": [OLD_TOKEN, TOKEN]}


# --------------------------------------------------------------------------------------------------
# Access
# --------------------------------------------------------------------------------------------------


def test_the_url_is_in_the_apps_urlconf() -> None:
    assert reverse("django_wakes:metrics") == URL


def test_no_credentials_get_401_with_a_bearer_challenge(client: Client, tokens: None) -> None:
    response = client.get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="django-wakes metrics"'


def test_a_wrong_token_gets_401_and_is_never_logged(client: Client, tokens: None, caplog: Any) -> None:
    wrong = "w" * 40
    with caplog.at_level(logging.DEBUG):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {wrong}")
        assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN[:-1]}").status_code == 401
    assert response.status_code == 401
    assert wrong not in caplog.text and TOKEN[:-1] not in caplog.text
    assert wrong.encode() not in response.content


def test_without_configured_tokens_every_bearer_is_refused(client: Client) -> None:
    assert client.get(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 401


@pytest.mark.parametrize("token", [TOKEN, OLD_TOKEN])
def test_each_configured_token_is_accepted(client: Client, tokens: None, token: str, caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG):
        response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    parse(response.content.decode())
    assert token not in caplog.text


def test_staff_who_may_view_wakes_can_read_it_and_others_cannot(django_user_model: Any) -> None:
    viewer = django_user_model.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_wake"))
    nosy = django_user_model.objects.create_user("nosy", is_staff=True)
    outsider = django_user_model.objects.create_user("outsider")
    outsider.user_permissions.add(Permission.objects.get(codename="view_wake"))
    for user, status in ((viewer, 200), (nosy, 403), (outsider, 403)):
        client = Client()
        client.force_login(user)
        assert client.get(URL).status_code == status, user


def test_only_get(client: Client, tokens: None) -> None:
    assert client.post(URL, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405


def test_token_comparison() -> None:
    assert metrics.token_accepted(TOKEN, [OLD_TOKEN, TOKEN])
    assert not metrics.token_accepted(TOKEN + "x", [OLD_TOKEN, TOKEN])
    assert not metrics.token_accepted(TOKEN, [])


# --------------------------------------------------------------------------------------------------
# Settings check
# --------------------------------------------------------------------------------------------------


def e010(settings: Any, tokens: Any) -> list[str]:
    settings.WAKES = {**settings.WAKES, "METRICS_TOKENS": tokens}
    return [m.msg for m in run_checks() if m.id == "django_wakes.E010"]


def test_check_accepts_long_tokens_and_none(settings: Any) -> None:
    assert e010(settings, [TOKEN, OLD_TOKEN]) == []
    assert e010(settings, []) == []


@pytest.mark.parametrize(
    ("tokens", "problem"),
    [
        ("a-single-token-string-not-a-list-000000", "must be a list"),
        (["short-secret"], "[0] must be a string of at least 32"),
        ([TOKEN, "has a space " * 4], "[1] must be a string"),
        ([12345678901234567890123456789012345], "[0] must be a string"),
    ],
)
def test_check_refuses_bad_tokens_without_echoing_them(settings: Any, tokens: Any, problem: str) -> None:
    messages = e010(settings, tokens)
    assert len(messages) == 1 and problem in messages[0]
    assert "short-secret" not in messages[0] and "has a space" not in messages[0]


# --------------------------------------------------------------------------------------------------
# What it says
# --------------------------------------------------------------------------------------------------


def test_counters_and_lateness_follow_the_attempts_the_engine_recorded(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    sinks("test.metrics.broken", then=RuntimeError("broken"))
    clock.set(clock.now().replace(hour=12, minute=5))
    for late in (0.3, 20):
        django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
        clock.advance(timedelta(seconds=late))
        django_wakes.run_due()
    django_wakes.schedule(workspace_id=WS, kind="test.metrics.broken", at=clock.now())
    django_wakes.run_due()

    families = scrape(clock)
    assert families["django_wakes_attempts_total"]["type"] == "counter"
    assert value(families, "django_wakes_attempts_total", outcome="fired") == 2
    assert value(families, "django_wakes_attempts_total", outcome="failed") == 1
    assert value(families, "django_wakes_attempts_total", outcome="retry") == 0
    assert value(families, "django_wakes_lateness_seconds_count") == 2
    assert value(families, "django_wakes_lateness_seconds_sum") == pytest.approx(20.3)
    assert value(families, "django_wakes_lateness_seconds_bucket", le="0.25") == 0
    assert value(families, "django_wakes_lateness_seconds_bucket", le="0.5") == 1
    assert value(families, "django_wakes_lateness_seconds_bucket", le="30") == 2
    assert value(families, "django_wakes_lateness_seconds_bucket", le="+Inf") == 2
    assert (
        value(families, "django_wakes_counters_since_timestamp_seconds")
        == clock.now().replace(minute=0, second=0, microsecond=0).timestamp()
    )
    # the failed wake waits for its retry: pending, due later
    assert value(families, "django_wakes_live_wakes", state="pending", kind="test.metrics.broken") == 1


def test_counters_only_grow_within_the_hour_and_start_again_with_the_next(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    clock.set(clock.now().replace(hour=12, minute=58))
    seen = []
    for _ in range(3):
        django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
        django_wakes.run_due()
        seen.append(value(scrape(clock), "django_wakes_attempts_total", outcome="fired"))
        clock.advance(timedelta(seconds=40))
    assert seen == [1, 2, 3]  # 12:58:00, 12:58:40, 12:59:20
    clock.set(clock.now().replace(hour=13, minute=0, second=5))
    assert value(scrape(clock), "django_wakes_attempts_total", outcome="fired") == 0


def test_backlog_gauges_by_kind_with_escaped_labels(clock: FakeClock) -> None:
    now = clock.now()
    odd = 'we"ird\\kind\nname'
    common = {"workspace_id": WS, "trigger_type": TriggerType.AT, "created_at": now, "updated_at": now}
    Wake.objects.create(kind=odd, state=State.PENDING, due_at=now - timedelta(minutes=10), **common)
    Wake.objects.create(kind=odd, state=State.PENDING, due_at=now + timedelta(minutes=10), **common)
    Wake.objects.create(
        kind=KIND, state=State.FIRING, lease_until=now - timedelta(seconds=1), claimed_by="gone", **common
    )
    Wake.objects.create(kind=KIND, state=State.DEAD, **common)

    text = metrics.exposition(now)
    assert 'kind="we\\"ird\\\\kind\\nname"' in text
    families = parse(text)
    assert value(families, "django_wakes_live_wakes", state="pending", kind=odd) == 2
    assert value(families, "django_wakes_overdue_wakes", kind=odd) == 1
    assert value(families, "django_wakes_due_next_hour_wakes", kind=odd) == 1
    assert value(families, "django_wakes_lapsed_wakes", kind=KIND) == 1
    assert value(families, "django_wakes_oldest_overdue_seconds") == 600
    assert value(families, "django_wakes_settled_total", state="dead") == 1
    assert value(families, "django_wakes_orphaned_wakes") == 1
    assert value(families, "django_wakes_runners", status="live") == 0


def test_unwakeable_and_hung_gauges(clock: FakeClock, settings: Any) -> None:
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    runner_rows.register("runner-of-kind", kinds=[KIND])
    now = clock.now()
    common = {"workspace_id": WS, "trigger_type": TriggerType.AT, "created_at": now, "updated_at": now}
    Wake.objects.create(kind="nobody.fires.this", state=State.PENDING, due_at=now, **common)
    Wake.objects.create(kind=KIND, state=State.PENDING, due_at=now + timedelta(hours=2), **common)
    Wake.objects.create(
        kind=KIND,
        state=State.FIRING,
        claimed_by="runner-of-kind",
        claimed_at=now - timedelta(seconds=16),
        lease_until=now + timedelta(seconds=10),
        **common,
    )
    families = scrape(clock)
    assert value(families, "django_wakes_unwakeable_wakes") == 1
    assert value(families, "django_wakes_hung_wakes") == 1


def test_missed_occurrences_are_counted_once_when_the_occurrence_settles(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    clock.set(clock.now().replace(hour=3, minute=0))
    django_wakes.schedule(workspace_id=WS, kind=KIND, every="10m", catch_up="skip")
    clock.advance(timedelta(minutes=35, seconds=1))  # slots 03:10, :20, :30 came and went unfired
    django_wakes.run_due()
    families = scrape(clock)
    assert families["django_wakes_occurrences_missed_total"]["type"] == "counter"
    assert value(families, "django_wakes_occurrences_missed_total", policy="skip") == 3
    assert value(families, "django_wakes_occurrences_missed_total", policy="latest") == 0


def test_per_workspace_gauges_keep_a_bounded_label_set(clock: FakeClock, sinks: Any) -> None:
    """Issue 28: the top WORKSPACE_ROWS workspaces by due wakes as labels, the rest as one, however many there are."""
    sinks(KIND)
    now = clock.now()
    late = django_wakes.schedule(workspace_id="ws-fired", kind=KIND, at=now)
    clock.advance(timedelta(seconds=2))
    django_wakes.run_due()
    assert Wake.objects.get(pk=late.pk).state == State.FIRED
    now = clock.now()
    for n in range(1, workspaces.WORKSPACE_ROWS + 11):  # 30 workspaces, ws-30 with the most due wakes
        django_wakes.schedule_many(
            [{"at": now - timedelta(seconds=10 * n)} for _ in range(n)], workspace_id=f"ws-{n:02d}", kind=KIND
        )

    families = parse(metrics.exposition(now))
    due = families["django_wakes_workspace_due_wakes"]["samples"]
    labels = [labels["workspace"] for _, labels, _ in due]
    assert len(labels) == workspaces.WORKSPACE_ROWS + 1 and labels[-1] == workspaces.OTHER_WORKSPACES
    assert labels[0] == "ws-30"
    assert value(families, "django_wakes_workspace_due_wakes", workspace="ws-30") == 30
    assert value(families, "django_wakes_workspace_due_wakes", workspace=workspaces.OTHER_WORKSPACES) == sum(
        range(1, 11)
    )
    assert value(families, "django_wakes_workspace_oldest_due_seconds", workspace="ws-30") == 300
    assert value(families, "django_wakes_workspace_oldest_due_seconds", workspace=workspaces.OTHER_WORKSPACES) == 100
    assert value(families, "django_wakes_workspace_fired_last_hour_wakes", workspace=workspaces.OTHER_WORKSPACES) == 1
    assert (
        value(families, "django_wakes_workspace_lateness_last_hour_mean_seconds", workspace=workspaces.OTHER_WORKSPACES)
        == 2
    )
