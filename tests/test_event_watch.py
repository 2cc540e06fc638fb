"""Watches that outlive the race with their event: retention and ``since``, match filters, any-of keys,
and an approval's default answer on expiry.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_wakes
from django_wakes import InvalidDuration, InvalidIntent, InvalidWake
from django_wakes.models import EventKeyLock, RetainedEvent, State, Wake, WatchedKey

pytestmark = pytest.mark.django_db

WS = "ws-events"
KIND = "t.events"


@pytest.fixture
def calls(sinks):
    return sinks(KIND)


def watch(**kwargs):
    kwargs.setdefault("event_key", "ci:pass")
    return django_wakes.watch(workspace_id=WS, kind=KIND, **kwargs)


# -- retention and since --------------------------------------------------------------------------


def test_an_event_delivered_before_the_watch_fires_it_when_retained(clock, calls):
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"sha": "abc"}, retain="10m") == 0
    delivered = clock.now()
    clock.advance("2m")
    wake = watch(since="5m")
    assert wake.fire_at == delivered and wake.due_at == clock.now()
    assert django_wakes.run_due().fired == 1
    (result,) = calls.results
    assert result["event_key"] == "ci:pass" and result["payload"] == {"sha": "abc"}
    assert result["retained_at"] == delivered.isoformat()


def test_without_retain_an_early_event_is_not_kept(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload=1)
    wake = watch(since="5m")
    assert wake.fire_at is None and not RetainedEvent.objects.exists()


def test_since_bounds_which_retained_events_count(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload="old", retain="1h")
    clock.advance("10m")
    assert watch(since="5m").fire_at is None  # delivered 10 minutes ago: before since
    assert watch(since=clock.now() - timedelta(minutes=11)).fire_at is not None


def test_a_retained_event_expires(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload="x", retain="1m")
    clock.advance("61s")
    assert watch(since="1h").fire_at is None


def test_the_earliest_matching_retained_event_wins(clock, calls):
    for n in range(3):
        django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"n": n}, retain="1h")
        clock.advance("1s")
    watch(since="1h")
    django_wakes.run_due()
    assert calls.results[0]["payload"] == {"n": 0}


def test_a_watch_without_since_ignores_retained_events(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload="x", retain="1h")
    assert watch().fire_at is None


def test_retained_events_are_capped_per_workspace(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "RETAIN_MAX": 3}
    for n in range(5):
        django_wakes.deliver_event(workspace_id=WS, event_key=f"k{n}", payload=n, retain="1h")
        clock.advance("1s")
    django_wakes.deliver_event(workspace_id="other", event_key="k", payload=0, retain="1h")
    kept = list(
        RetainedEvent.objects.filter(workspace_id=WS).order_by("delivered_at").values_list("payload", flat=True)
    )
    assert kept == [2, 3, 4]
    assert RetainedEvent.objects.filter(workspace_id="other").count() == 1


def test_gc_removes_expired_retained_events_and_idle_locks(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="a", payload=1, retain="1m")
    django_wakes.deliver_event(workspace_id=WS, event_key="b", payload=2, retain="1h")
    assert EventKeyLock.objects.count() == 2
    clock.advance("2d")
    django_wakes.gc()
    assert not RetainedEvent.objects.exists()
    assert not EventKeyLock.objects.exists()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"retain": "0s"}, InvalidDuration),
        ({"retain": "soon"}, InvalidDuration),
        ({"retain": -1}, InvalidDuration),
    ],
)
def test_bad_retention_is_refused_and_writes_nothing(kwargs, error, calls):
    with pytest.raises(error):
        django_wakes.deliver_event(workspace_id=WS, event_key="k", payload=1, **kwargs)
    assert not RetainedEvent.objects.exists() and not EventKeyLock.objects.exists()


# -- match filters --------------------------------------------------------------------------------


def test_a_delivery_fires_only_the_watchers_it_matches(clock, calls):
    main = watch(match={"payload.branch": "main", "payload.status": "success"})
    feature = watch(match={"payload.branch": "feature"})
    anything = watch()
    accepted = django_wakes.deliver_event(
        workspace_id=WS, event_key="ci:pass", payload={"branch": "main", "status": "success", "sha": "1"}
    )
    assert accepted == 2
    assert Wake.objects.get(pk=main.pk).fire_at is not None
    assert Wake.objects.get(pk=anything.pk).fire_at is not None
    assert Wake.objects.get(pk=feature.pk).fire_at is None
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"branch": "feature"}) == 1


def test_match_paths_walk_nested_dicts_and_list_indices(clock, calls):
    wake = watch(match={"payload.checks.0.state": "ok", "payload.meta.attempt": 2})
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"checks": [{"state": "ok"}]}) == 0
    payload = {"checks": [{"state": "ok"}], "meta": {"attempt": 2}}
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload=payload) == 1
    assert Wake.objects.get(pk=wake.pk).result["payload"] == payload


def test_match_compares_types_too(clock, calls):
    watch(match={"payload.n": 1})
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"n": True}) == 0
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"n": "1"}) == 0
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"n": 1}) == 1


def test_a_retained_event_must_match_too(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"branch": "dev"}, retain="1h")
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass", payload={"branch": "main"}, retain="1h")
    wake = watch(since="1h", match={"payload.branch": "main"})
    assert wake.result["payload"] == {"branch": "main"}


@pytest.mark.parametrize(
    "match",
    [
        {},
        [],
        {"branch": "main"},
        {"payload": "x"} | {"payload..a": 1},
        {"payload.": 1},
        {3: 1},
        {"payload.a": float("nan")},
        {f"payload.k{n}": n for n in range(21)},
    ],
)
def test_bad_match_filters_are_refused_at_create_time(match, calls):
    with pytest.raises((InvalidWake, InvalidIntent)):
        watch(match=match)
    assert not Wake.objects.exists()


# -- any of several keys --------------------------------------------------------------------------


def test_any_of_several_keys_fires_once_on_the_first(clock, calls):
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_keys=["ci:pass:abc", "ci:fail:abc"])
    assert sorted(WatchedKey.objects.values_list("event_key", flat=True)) == ["ci:fail:abc"]
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:fail:abc", payload={"log": "..."}) == 1
    assert django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass:abc", payload={}) == 0
    django_wakes.run_due()
    (result,) = calls.results
    assert result["event_key"] == "ci:fail:abc"
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED


def test_any_of_with_since_finds_a_retained_event_of_any_key(clock, calls):
    django_wakes.deliver_event(workspace_id=WS, event_key="b", payload="B", retain="1h")
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_keys=["a", "b"], since="1h")
    assert wake.result["event_key"] == "b"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"event_keys": []},
        {"event_keys": ["a", "a"]},
        {"event_keys": "a"},
        {"event_keys": ["a"], "event_key": "b"},
        {},
        {"event_keys": [f"k{n}" for n in range(21)]},
    ],
)
def test_bad_key_lists_are_refused(kwargs, calls):
    with pytest.raises(InvalidWake):
        django_wakes.watch(workspace_id=WS, kind=KIND, **kwargs)
    assert not Wake.objects.exists() and not WatchedKey.objects.exists()


def test_an_idempotent_any_of_watch_adds_no_second_set_of_keys(calls):
    one = django_wakes.watch(workspace_id=WS, kind=KIND, event_keys=["a", "b"], idempotency_key="w1")
    two = django_wakes.watch(workspace_id=WS, kind=KIND, event_keys=["a", "b"], idempotency_key="w1")
    assert one.pk == two.pk and WatchedKey.objects.count() == 1


# -- approvals: a default answer on expiry --------------------------------------------------------


def test_an_unanswered_approval_delivers_its_default_answer(clock, calls):
    request = django_wakes.request_approval(
        workspace_id=WS, kind=KIND, prompt="Deploy?", expires_in="1h", on_expiry={"approved": False}
    )
    clock.advance("1h")
    assert django_wakes.run_due().fired == 1
    (result,) = calls.results
    assert result == {"trigger": "on_approval", "answer": {"approved": False}, "defaulted": True}
    assert Wake.objects.get(pk=request.wake.pk).state == State.FIRED


def test_an_answered_approval_ignores_its_default(clock, calls):
    request = django_wakes.request_approval(
        workspace_id=WS, kind=KIND, prompt="Deploy?", expires_in="1h", on_expiry={"approved": False}
    )
    django_wakes.resolve(request.token, {"approved": True}, actor="demo")
    clock.advance("2h")
    django_wakes.run_due()
    assert calls.results[0]["answer"] == {"approved": True} and "defaulted" not in calls.results[0]


def test_without_a_default_an_expired_approval_is_told_it_expired(clock, calls):
    django_wakes.request_approval(workspace_id=WS, kind=KIND, prompt="Deploy?", expires_in="1h")
    clock.advance("1h")
    assert django_wakes.run_due().expired == 1
    assert calls.results == [{"trigger": "on_approval", "expired": True}]


def test_a_bad_default_answer_is_refused(calls):
    with pytest.raises(InvalidIntent):
        django_wakes.request_approval(
            workspace_id=WS, kind=KIND, prompt="Deploy?", expires_in="1h", on_expiry={"x": float("inf")}
        )
    assert not Wake.objects.exists()


def test_the_admin_lists_retained_events_and_shows_a_watch_s_keys(admin_client, clock, calls):
    from django.urls import reverse

    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass:xyz", payload={"ok": 1}, retain="1h")
    page = admin_client.get(reverse("admin:django_wakes_retainedevent_changelist"), {"q": "ci:pass"})
    assert page.status_code == 200 and "ci:pass:xyz" in page.content.decode()
    wake = django_wakes.watch(workspace_id=WS, kind=KIND, event_keys=["a:1", "b:2"], match={"payload.branch": "main"})
    detail = admin_client.get(reverse("admin:django_wakes_wake_change", args=[wake.pk])).content.decode()
    assert "b:2" in detail and "payload.branch" in detail
