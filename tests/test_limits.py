"""Limits per key and per workspace (``WAKES["LIMITS"]``, ``WAKES["WORKSPACE_LIMIT"]``), in one process.

The rules are pinned down here on every database through the public calls, the claim a runner makes
(``engine.claim_batch``) and what an operator reads (the console's why, the limits page, ``wakes
status``, the system checks). That the database holds them across racing runner processes is
``tests/test_limits_processes.py``.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from html import unescape
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

import django_wakes
from django_wakes import engine
from django_wakes.checks import check_wakes_settings
from django_wakes.console.attention import Attention
from django_wakes.console.display import why
from django_wakes.exceptions import InvalidWake
from django_wakes.models import LimitSlot, Outcome, Runner, State, Wake, WakeAttempt

pytestmark = pytest.mark.django_db

KIND = "test.limits"
WS = "ws-limits"


@pytest.fixture
def limits(settings: Any) -> Any:
    """``limits(LIMITS=..., WORKSPACE_LIMIT=...)``: set them in ``WAKES`` for the test."""

    def configure(**given: Any) -> None:
        settings.WAKES = {**settings.WAKES, **given}

    return configure


def due(n: int, clock: Any, *, workspace_id: str = WS, **kwargs: Any) -> list[Wake]:
    at = clock.now() - timedelta(seconds=1)
    return [django_wakes.schedule(workspace_id=workspace_id, kind=KIND, at=at, **kwargs) for _ in range(n)]


def claimed_keys(runner: str = "r", limit: int = 100) -> list[str | None]:
    return [claim.wake.limit_key for claim in engine.claim_batch(runner_id=runner, limit=limit)]


# -- the argument ------------------------------------------------------------------------------


def test_limit_key_is_kept_on_every_kind_of_wake_and_a_chains_occurrences(clock, sinks):
    sinks(KIND)
    one = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", limit_key="mailer")
    many = django_wakes.schedule_many(
        [{"delay": "1m"}, {"delay": "2m", "limit_key": "crm:b"}], workspace_id=WS, kind=KIND, limit_key="crm:a"
    )
    watch = django_wakes.watch(workspace_id=WS, kind=KIND, event_key="paid", limit_key="mailer")
    approval = django_wakes.request_approval(
        workspace_id=WS, kind=KIND, prompt="ok?", expires_in="1h", limit_key="mailer"
    )
    chain = django_wakes.schedule(workspace_id=WS, kind=KIND, every="1m", limit_key="digest")
    assert [Wake.objects.get(pk=w.pk).limit_key for w in (one, *many, watch, approval.wake, chain)] == [
        "mailer",
        "crm:a",
        "crm:b",
        "mailer",
        "mailer",
        "digest",
    ]
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m").limit_key is None
    clock.advance("1m")
    assert django_wakes.run_due(lanes=None).fired >= 1
    nxt = Wake.objects.filter(chain_id=chain.chain_id, state=State.PENDING).get()
    assert nxt.limit_key == "digest"  # the next occurrence inherits it


@pytest.mark.parametrize("bad", [7, "", "   ", "k" * 201, "a\x00b", "a\nb", "mail\u202eer", ["mailer"]])
def test_a_bad_limit_key_is_refused_and_nothing_is_written(sinks, bad):
    sinks(KIND)
    with pytest.raises(InvalidWake, match="limit_key"):
        django_wakes.schedule(workspace_id=WS, kind=KIND, delay="1m", limit_key=bad)
    with pytest.raises(InvalidWake, match="limit_key"):
        django_wakes.schedule_many([{"delay": "1m"}, {"delay": "1m", "limit_key": bad}], workspace_id=WS, kind=KIND)
    assert not Wake.objects.exists()


# -- concurrency --------------------------------------------------------------------------------


def test_at_most_n_of_a_key_fire_at_once_and_every_exit_from_firing_frees_a_slot(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 2}})
    due(6, clock, limit_key="mailer")
    first = engine.claim_batch(runner_id="a", limit=10)
    assert len(first) == 2
    assert claimed_keys("b") == []  # full: another runner gets none
    engine.fire(first[0])  # settled fired: its slot is free
    (second,) = engine.claim_batch(runner_id="b", limit=10)
    engine.release(second)  # handed back unstarted: pending again, its slot free
    (third,) = engine.claim_batch(runner_id="c", limit=10)
    assert Wake.objects.filter(limit_key="mailer", state=State.FIRING).count() == 2
    assert claimed_keys("d") == []
    assert sorted(LimitSlot.objects.values_list("number", flat=True)) == [0, 1]
    del third


def test_a_failed_or_deferred_wake_frees_its_slot_for_the_next(clock, sinks, limits):
    sinks(KIND, then=RuntimeError("smtp down"))
    limits(LIMITS={"mailer": {"concurrency": 1}})
    due(2, clock, limit_key="mailer")
    assert django_wakes.run_due().failed == 1  # one at a time: it failed (retried later), the slot is free
    assert django_wakes.run_due().failed == 1
    assert Wake.objects.filter(state=State.PENDING, attempts=1).count() == 2


def test_held_wakes_stay_pending_uncharged_and_never_crowd_out_other_wakes(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 1}})
    held = due(5, clock, limit_key="mailer")
    clock.advance("1s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())  # due after all of them
    assert claimed_keys("a", limit=1) == ["mailer"]  # the key is full now
    # The next pass of one wake is not spent on the held backlog ahead of it in claim order.
    assert [c.wake.pk for c in engine.claim_batch(runner_id="b", limit=1)] == [other.pk]
    waiting = Wake.objects.filter(pk__in=[w.pk for w in held[1:]])
    assert {(w.state, w.attempts, w.due_at) for w in waiting} == {(State.PENDING, 0, held[1].due_at)}
    assert not WakeAttempt.objects.filter(wake__in=waiting).exists()


def test_a_lease_takeover_keeps_the_slot(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 1}})
    due(3, clock, limit_key="mailer")
    (first,) = engine.claim_batch(runner_id="a", limit=10, lease=timedelta(seconds=10))
    clock.advance("11s")  # runner a is gone: its lease lapsed
    (taken,) = engine.claim_batch(runner_id="b", limit=10)
    assert taken.takeover and taken.wake.pk == first.wake.pk
    assert claimed_keys("c") == []  # still the one firing: the slot went with the takeover
    engine.fire(taken)
    assert claimed_keys("c") == ["mailer"]


def test_a_key_with_a_free_slot_does_not_crowd_other_wakes_out_of_a_batch(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 2}})
    backlog = due(6, clock, limit_key="mailer")
    assert claimed_keys("a", limit=1) == ["mailer"]  # one of mailer's 2 slots in use: not full
    clock.advance("1s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())  # due after the backlog
    claims = engine.claim_batch(runner_id="b", limit=3)  # room for 3: mailer's free slot and the other wake
    assert sorted(c.wake.pk for c in claims) == sorted([backlog[1].pk, other.pk])
    assert Wake.objects.filter(limit_key="mailer", state=State.PENDING, attempts=0).count() == 4


def test_a_limited_backlog_lets_an_unlimited_wake_into_the_first_pass(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 1}})
    due(8, clock, limit_key="mailer")
    clock.advance("1s")
    other = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
    claims = engine.claim_batch(runner_id="r", limit=3)  # mailer has its one slot free: 3 candidates of it
    assert sorted(c.wake.limit_key or "-" for c in claims) == ["-", "mailer"]
    assert other.pk in [c.wake.pk for c in claims]


# -- rate ---------------------------------------------------------------------------------------


def test_at_most_n_start_per_period_and_a_claim_handed_back_unstarted_uses_none(clock, sinks, limits):
    calls = sinks(KIND)
    limits(LIMITS={"burst": {"rate": "2/1m"}})
    due(6, clock, limit_key="burst")
    claims = engine.claim_batch(runner_id="a", limit=10)
    assert len(claims) == 2
    engine.release(claims[1])  # never started
    engine.fire(claims[0])  # started: one slot rests for a minute
    assert django_wakes.run_due().fired == 1  # the handed-back claim's slot was not used
    assert django_wakes.run_due().fired == 0
    clock.advance("60s")  # a slot rests for its period and a margin of 250 ms
    assert django_wakes.run_due().fired == 0
    clock.advance("250ms")
    assert django_wakes.run_due().fired == 2
    assert len(calls) == 4
    assert set(Wake.objects.filter(state=State.FIRED).values_list("attempts", flat=True)) == {1}


def test_a_wake_re_driven_after_its_sink_started_waits_for_a_free_rate_slot(clock, sinks, limits):
    calls = sinks(KIND)
    limits(LIMITS={"burst": {"rate": "1/1h"}})
    (wake,) = due(1, clock, limit_key="burst")
    (first,) = engine.claim_batch(runner_id="a", limit=10, lease=timedelta(seconds=10))
    sink = engine.prepare_sink(first)  # the start is recorded: the one rate slot rests for the hour
    assert callable(sink)
    sink(first.wake, first.wake.result)  # start 1 ... and runner a dies before settling
    clock.advance("11s")
    assert engine.claim_batch(runner_id="b", limit=10) == []  # no rate slot free: not re-driven now
    wake.refresh_from_db()
    assert (wake.state, wake.attempts, wake.claim_token, wake.lane_lock) == (State.PENDING, 0, None, None)
    (attempt,) = WakeAttempt.objects.filter(wake=wake)
    assert (attempt.outcome, attempt.runner_id) == (Outcome.ABANDONED, "a")
    assert LimitSlot.objects.get(kind="rate").holder is None
    clock.advance("1h")  # the slot is free again: claimed as any due wake, its start counted
    (again,) = engine.claim_batch(runner_id="b", limit=10)
    assert not again.takeover and again.wake.attempts == 1
    engine.fire(again)
    assert len(calls) == 2
    wake.refresh_from_db()
    assert wake.state == State.FIRED


def test_a_guarded_wake_whose_sink_started_is_charged_its_interrupted_attempt_while_it_waits(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"burst": {"rate": "1/1h"}})
    (wake,) = due(1, clock, limit_key="burst")
    engine.claim_batch(runner_id="a", limit=10, lease=timedelta(seconds=10))  # runner a dies unstarted
    clock.advance("11s")
    (taken,) = engine.claim_batch(runner_id="b", limit=10, lease=timedelta(seconds=10))  # guarded from now on
    sink = engine.prepare_sink(taken)  # the start is recorded on the wake and rests the rate slot
    assert callable(sink)
    sink(taken.wake, taken.wake.result)  # ... and runner b dies too
    clock.advance("11s")
    assert engine.claim_batch(runner_id="c", limit=10) == []
    wake.refresh_from_db()
    assert (wake.state, wake.attempts) == (State.PENDING, 1)  # the interrupted start counts, the wait does not
    outcomes = list(WakeAttempt.objects.filter(wake=wake).order_by("id").values_list("outcome", flat=True))
    assert outcomes == [Outcome.ABANDONED, Outcome.INTERRUPTED]
    clock.advance("1h")
    (again,) = engine.claim_batch(runner_id="c", limit=10)
    assert again.wake.attempts == 2


def test_a_wake_re_driven_after_its_sink_started_takes_a_free_rate_slot(clock, sinks, limits):
    calls = sinks(KIND)
    limits(LIMITS={"burst": {"rate": "2/1h"}})
    (wake,) = due(1, clock, limit_key="burst")
    (first,) = engine.claim_batch(runner_id="a", limit=10, lease=timedelta(seconds=10))
    sink = engine.prepare_sink(first)
    assert callable(sink)
    sink(first.wake, first.wake.result)  # start 1 ... and runner a dies before settling
    clock.advance("11s")
    later = due(1, clock, limit_key="burst")
    (taken,) = engine.claim_batch(runner_id="b", limit=10)  # the takeover takes the second slot ...
    assert taken.takeover and taken.wake.pk == wake.pk
    assert engine.claim_batch(runner_id="c", limit=10) == []  # ... so the later wake waits for the hour
    engine.fire(taken)
    assert len(calls) == 2
    assert Wake.objects.get(pk=later[0].pk).state == State.PENDING
    assert set(LimitSlot.objects.filter(kind="rate").values_list("holder", flat=True)) == {None}


def test_keys_match_exactly_else_by_the_longest_prefix_each_key_on_its_own(clock, sinks, limits):
    sinks(KIND)
    limits(
        LIMITS={
            "crm:*": {"concurrency": 1},
            "crm:big:*": {"concurrency": 2},
            "crm:exact": {"concurrency": 3},
        }
    )
    for key in ("crm:a", "crm:b", "crm:big:x", "crm:exact", "other"):
        due(4, clock, limit_key=key)
    got = claimed_keys(limit=100)
    assert {key: got.count(key) for key in set(got)} == {
        "crm:a": 1,
        "crm:b": 1,  # each key its own slots
        "crm:big:x": 2,
        "crm:exact": 3,
        "other": 4,  # no entry: not limited
    }


# -- per workspace ------------------------------------------------------------------------------


def big_workspaces_only(workspace_id: str) -> dict[str, Any] | None:
    """A ``WORKSPACE_LIMIT`` function: two at a time in ``big``, no limit elsewhere."""
    return {"concurrency": 2} if workspace_id == "big" else None


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"concurrency": 1}, {"big": 1, "small": 1}),
        (f"{__name__}.big_workspaces_only", {"big": 2, "small": 4}),
    ],
)
def test_the_workspace_limit_applies_to_each_workspace(clock, sinks, limits, setting, expected):
    sinks(KIND)
    limits(WORKSPACE_LIMIT=setting)
    for workspace in ("big", "small"):
        due(4, clock, workspace_id=workspace)
    got = [c.wake.workspace_id for c in engine.claim_batch(runner_id="r", limit=100)]
    assert {w: got.count(w) for w in set(got)} == expected


# -- what an operator reads ---------------------------------------------------------------------


def test_the_console_and_wakes_status_say_which_limit_holds_a_wake_and_until_when(clock, sinks, limits, admin_client):
    sinks(KIND)
    limits(LIMITS={"burst": {"rate": "1/1m"}, "mailer": {"concurrency": 1}})
    burst = due(3, clock, limit_key="burst")
    mailer = due(2, clock, limit_key="mailer")
    assert django_wakes.run_due(limit=1).fired == 1
    engine.claim_batch(runner_id="holder", limit=10)  # a mailer wake firing, the burst slot resting
    now = clock.now()  # a runner is up (else the console says no runner is running, first)
    Runner.objects.create(id="holder", host="h", pid=1, started_at=now, heartbeat_at=now, kinds=[KIND])
    attention = Attention()
    held = Wake.objects.get(pk=burst[2].pk)
    until = (clock.now() + timedelta(minutes=1)).strftime("%H:%M:%S")
    assert f'held by limit "burst" (rate 1/1m): 1 started in the period, until 2030-01-01 {until} UTC (in 1m00s)' in (
        unescape(why(held, attention))
    )
    waiting_mailer = next(w for w in Wake.objects.filter(pk__in=[m.pk for m in mailer], state=State.PENDING))
    assert 'held by limit "mailer" (concurrency 1): 1 firing, until one of them settles' in unescape(
        why(waiting_mailer, attention)
    )

    page = admin_client.get(reverse("admin:django_wakes_wake_change", args=[held.pk])).content.decode()
    assert "held by limit &quot;burst&quot; (rate 1/1m)" in page
    limits_page = admin_client.get(reverse("admin:django_wakes_limits"))
    assert limits_page.status_code == 200
    html = limits_page.content.decode()
    assert ">burst</a>" in html and "rate 1/1m" in html and "1/1" in html and "full" in html
    assert ">mailer</a>" in html and "concurrency 1" in html

    out = StringIO()
    call_command("wakes", "status", stdout=out)
    text = out.getvalue()
    assert "Limits (2 in play)" in text
    assert "burst" in text and "held until" in text and until in text
    out = StringIO()
    call_command("wakes", "status", "--json", stdout=out)
    rows = {row["key"]: row for row in json.loads(out.getvalue())["limits"]}
    assert rows["burst"]["full"] and rows["burst"]["in_use"] == 1 and rows["burst"]["waiting"] == 2
    assert rows["mailer"]["held"] == "until one of them settles"


def test_the_limits_page_without_limits_says_none_is_configured(admin_client):
    html = admin_client.get(reverse("admin:django_wakes_limits")).content.decode()
    assert "No limit is configured" in html


# -- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "check_id", "named"),
    [
        ("LIMITS", ["mailer"], "E020", "WAKES['LIMITS']"),
        ("LIMITS", {"mailer": 5}, "E020", "WAKES['LIMITS']['mailer']"),
        ("LIMITS", {"mailer": {}}, "E020", "WAKES['LIMITS']['mailer']"),
        ("LIMITS", {"mailer": {"burst": 5}}, "E020", "WAKES['LIMITS']['mailer'] has unknown key"),
        ("LIMITS", {"mailer": {"concurrency": 0}}, "E020", "WAKES['LIMITS']['mailer']['concurrency']"),
        ("LIMITS", {"mailer": {"concurrency": "5"}}, "E020", "WAKES['LIMITS']['mailer']['concurrency']"),
        ("LIMITS", {"mailer": {"concurrency": True}}, "E020", "WAKES['LIMITS']['mailer']['concurrency']"),
        ("LIMITS", {"mailer": {"rate": "100"}}, "E020", "WAKES['LIMITS']['mailer']['rate']"),
        ("LIMITS", {"mailer": {"rate": "0/1m"}}, "E020", "WAKES['LIMITS']['mailer']['rate']"),
        ("LIMITS", {"mailer": {"rate": "5/0s"}}, "E020", "WAKES['LIMITS']['mailer']['rate']"),
        ("LIMITS", {"mailer": {"rate": "5/soon"}}, "E020", "WAKES['LIMITS']['mailer']['rate']"),
        ("LIMITS", {"crm*": {"rate": "5/1s"}}, "E020", "WAKES['LIMITS']['crm*']"),
        ("LIMITS", {"*": {"rate": "5/1s"}}, "E020", "WAKES['LIMITS']['*']"),
        ("LIMITS", {7: {"rate": "5/1s"}}, "E020", "WAKES['LIMITS'][7]"),
        ("WORKSPACE_LIMIT", {"concurrency": -1}, "E021", "WAKES['WORKSPACE_LIMIT']['concurrency']"),
        ("WORKSPACE_LIMIT", "no.such.module.limit", "E021", "WAKES['WORKSPACE_LIMIT']"),
        ("WORKSPACE_LIMIT", 5, "E021", "WAKES['WORKSPACE_LIMIT']"),
    ],
)
def test_a_malformed_limit_is_a_check_error_naming_the_entry(limits, setting, value, check_id, named):
    limits(**{setting: value})
    errors = [m for m in check_wakes_settings() if m.id == f"django_wakes.{check_id}"]
    assert len(errors) == 1, check_wakes_settings()
    assert named in errors[0].msg


def test_good_limits_pass_the_checks(limits):
    limits(
        LIMITS={"mailer": {"concurrency": 5, "rate": "100/1m"}, "crm:*": {"rate": "10/1s"}},
        WORKSPACE_LIMIT=f"{__name__}.big_workspaces_only",
    )
    assert [m for m in check_wakes_settings() if m.id in ("django_wakes.E020", "django_wakes.E021")] == []


def test_a_malformed_entry_is_left_out_at_run_time_never_a_crash(clock, sinks, limits, caplog):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 1}, "broken": {"rate": "soon"}})
    due(2, clock, limit_key="mailer")
    due(2, clock, limit_key="broken")
    with caplog.at_level(logging.ERROR, logger="django_wakes"):
        assert sorted(claimed_keys(), key=str) == ["broken", "broken", "mailer"]
    assert "WAKES['LIMITS']['broken']['rate']" in caplog.text


def test_a_key_no_entry_matches_is_not_limited_and_a_runner_at_v2_says_so(clock, sinks, limits, caplog):
    sinks(KIND)
    limits(LIMITS={"mailer": {"concurrency": 1}})
    due(3, clock, limit_key="newsletter-v2-note")
    with caplog.at_level(logging.DEBUG, logger="django_wakes"):
        call_command("runwakes", "--once", "-v", "2", stdout=StringIO(), stderr=StringIO())
    assert Wake.objects.filter(state=State.FIRED).count() == 3
    assert "limit_key 'newsletter-v2-note' matches no WAKES['LIMITS'] entry" in caplog.text


def test_without_limits_a_limit_key_changes_nothing(clock, sinks):
    sinks(KIND)
    due(3, clock, limit_key="mailer")
    assert django_wakes.run_due().fired == 3
    assert not LimitSlot.objects.exists()
    assert set(WakeAttempt.objects.values_list("outcome", flat=True)) == {Outcome.FIRED}


# -- the Tasks backend --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_task_takes_a_limit_key_on_the_decorator_or_for_one_call(limits):
    from django_wakes.tasks import framework_available

    if not framework_available():
        pytest.skip("no Tasks framework installed")
    from django_wakes.tasks.exceptions import InvalidTaskOptions
    from testproject import tasks

    limits(LIMITS={"crm:*": {"concurrency": 1}})
    first, second = tasks.crm_sync.enqueue("acme"), tasks.crm_sync.enqueue("acme")
    other = tasks.record.using(limit_key="crm:globex").enqueue("x")
    keys = dict(Wake.objects.values_list("id", "limit_key"))
    assert [keys[int(r.id)] for r in (first, second, other)] == ["crm:acme", "crm:acme", "crm:globex"]
    assert tasks.record.get_result(other.id).task.limit_key == "crm:globex"  # the task as enqueued
    assert django_wakes.run_due().fired == 2  # one of acme's (one at a time), and globex's
    assert django_wakes.run_due().fired == 1
    with pytest.raises(InvalidTaskOptions, match="limit_key"):
        tasks.record.using(limit_key="").enqueue("x")


def test_gc_forgets_idle_slots_and_keeps_held_and_resting_ones(clock, sinks, limits):
    sinks(KIND)
    limits(LIMITS={"old": {"concurrency": 2}, "held": {"concurrency": 1}, "burst": {"rate": "1/60d"}})
    due(1, clock, limit_key="old")
    due(1, clock, limit_key="burst")
    assert django_wakes.run_due().fired == 2  # old's slot free again, burst's resting for 60 days
    due(1, clock, limit_key="held")
    (holding,) = engine.claim_batch(runner_id="r", limit=10, lease=timedelta(days=40))  # firing throughout
    clock.advance("31d")
    django_wakes.gc(older_than="30d")
    assert sorted(LimitSlot.objects.values_list("name", flat=True)) == ["burst", "held"]
    due(2, clock, limit_key="old")  # a key that comes back gets its slots again
    assert [c.wake.limit_key for c in engine.claim_batch(runner_id="r", limit=10)] == ["old", "old"]
    assert holding.wake.limit_key == "held"


def limits_from_a_table_not_migrated_yet(workspace_id: str) -> dict[str, Any] | None:
    """A host's WORKSPACE_LIMIT that reads its plans table, which does not exist yet."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT concurrency FROM myapp_plan WHERE workspace = %s", [workspace_id])
        row = cursor.fetchone()
    return {"concurrency": row[0]} if row else None


@pytest.mark.django_db(transaction=True)
def test_a_workspace_limit_function_whose_query_fails_leaves_the_claim_pass_working(clock, sinks, settings):
    """The function runs inside the claim transaction: on PostgreSQL its failed query aborted that
    transaction, and the pass failed for every workspace (InternalError) instead of this one being unlimited."""
    sinks(KIND)
    settings.WAKES = {**settings.WAKES, "WORKSPACE_LIMIT": f"{__name__}.limits_from_a_table_not_migrated_yet"}
    wake = django_wakes.schedule(workspace_id="acme", kind=KIND, at=clock.now() - timedelta(seconds=1))
    claims = engine.claim_batch(runner_id="r", limit=10)
    assert [claim.wake.pk for claim in claims] == [wake.pk]
