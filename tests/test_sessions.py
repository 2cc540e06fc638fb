"""The agent surface of the engine: stop/supersede, budgets, idle gating, chain depth, durable scratch."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import django_wakes
from django_wakes import BudgetExceeded, Defer, Done, Retry, SessionStopped, Stop, engine
from django_wakes.models import Outcome, SessionControl, State, Wake, WakeAttempt
from tests.test_sink_exits import ctrl_c

pytestmark = pytest.mark.django_db

WS = "ws-agent"
KIND = "t.agent"


@pytest.fixture
def calls(sinks):
    return sinks(KIND)


def agent_wake(session: str = "s1", **kwargs: Any) -> Wake:
    kwargs.setdefault("delay", "1m")
    return django_wakes.schedule(workspace_id=WS, session_id=session, kind=KIND, budget=True, **kwargs)


# -- stop and supersede ---------------------------------------------------------------------------


def test_stop_session_supersedes_its_pending_wakes_and_refuses_new_ones(clock, calls):
    mine = [django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="1m") for _ in range(3)]
    other = django_wakes.schedule(workspace_id=WS, session_id="s2", kind=KIND, delay="1m")
    assert django_wakes.stop_session("s1", reason="user hit stop", workspace_id=WS) == 3
    for wake in mine:
        row = Wake.objects.get(pk=wake.pk)
        assert row.state == State.SUPERSEDED and "user hit stop" in row.last_error and row.settled_at == clock.now()
    assert Wake.objects.get(pk=other.pk).state == State.PENDING
    with pytest.raises(SessionStopped):
        django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="1m")
    with pytest.raises(SessionStopped):
        django_wakes.watch(workspace_id=WS, session_id="s1", kind=KIND, event_key="e")
    assert Wake.objects.filter(session_id="s1").count() == 3
    assert django_wakes.resume_session("s1", workspace_id=WS) is True
    assert django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="1m").state == State.PENDING
    assert django_wakes.resume_session("s1", workspace_id=WS) is False


def test_a_wake_claimed_before_the_stop_is_superseded_without_its_sink_running(clock, calls):
    wake = django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="0s")
    (claim,) = engine.claim_batch(runner_id="A")
    # the claimed wake is firing, not pending: not touched here
    django_wakes.stop_session("s1", reason="stop", workspace_id=WS)
    assert Wake.objects.get(pk=wake.pk).state == State.FIRING
    outcome = engine.fire(claim)
    assert outcome.outcome == "superseded" and calls == []
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.SUPERSEDED and row.attempts == 0 and row.lane_lock is None


def test_a_stopped_sessions_chain_books_no_successor(clock, calls):
    chain = django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, every="1h")
    clock.set(chain.fire_at)
    (claim,) = engine.claim_batch(runner_id="A")
    ran = engine.run_sink(claim)  # the sink runs; the stop comes while it is firing
    django_wakes.stop_session("s1", workspace_id=WS)
    engine.settle_successes([ran])
    assert list(Wake.objects.filter(chain_id=chain.chain_id).values_list("state", flat=True)) == [State.FIRED]
    assert len(calls) == 1


def test_stopped_sessions_show_in_the_admin(admin_client, calls):
    from django.urls import reverse

    django_wakes.stop_session("s-admin", reason="runaway", workspace_id=WS)
    page = admin_client.get(reverse("admin:django_wakes_sessioncontrol_changelist"))
    assert page.status_code == 200 and "s-admin" in page.content.decode() and "runaway" in page.content.decode()
    superseded = admin_client.get(reverse("admin:django_wakes_wake_changelist"), {"state__exact": "superseded"})
    assert superseded.status_code == 200


# -- budgets --------------------------------------------------------------------------------------


def test_a_session_cannot_hold_more_live_wakes_than_its_budget(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_MAX_LIVE": 2}}
    agent_wake()
    agent_wake()
    with pytest.raises(BudgetExceeded) as refused:
        agent_wake()
    assert refused.value.limit == "session_max_live"
    assert Wake.objects.count() == 2
    django_wakes.schedule(workspace_id=WS, session_id="s1", kind=KIND, delay="1m")  # host code: not limited
    agent_wake(session="s2")  # another session has its own budget


@pytest.mark.parametrize(
    ("budgets", "kwargs", "limit"),
    [
        ({"SESSION_MIN_DELAY": "5m"}, {"delay": "1m"}, "session_min_delay"),
        ({"SESSION_MAX_HORIZON": "7d"}, {"delay": "8d"}, "session_max_horizon"),
        ({"WORKSPACE_MAX_LIVE": 0}, {}, "workspace_max_live"),
    ],
)
def test_each_budget_limit_is_named_when_it_refuses(clock, calls, settings, budgets, kwargs, limit):
    settings.WAKES = {**settings.WAKES, "BUDGETS": budgets}
    with pytest.raises(BudgetExceeded) as refused:
        agent_wake(**kwargs)
    assert refused.value.limit == limit and not Wake.objects.exists()


def test_the_cooldown_spaces_an_agents_wakes(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_COOLDOWN": "30s"}}
    agent_wake()
    with pytest.raises(BudgetExceeded) as refused:
        agent_wake()
    assert refused.value.limit == "session_cooldown"
    clock.advance("30s")
    agent_wake()
    assert SessionControl.objects.get(workspace_id=WS, session_id="s1").last_agent_wake_at == clock.now()


def test_an_idempotent_replay_is_not_refused_by_the_budget(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_MAX_LIVE": 1}}
    first = agent_wake(idempotency_key="tool:1")
    assert agent_wake(idempotency_key="tool:1").pk == first.pk


def test_chain_depth_travels_with_the_rows_and_is_capped(clock, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"CHAIN_MAX_DEPTH": 2}}
    refusals: list[str] = []

    def again(wake: Any, result: dict[str, Any]) -> None:
        try:
            django_wakes.schedule(workspace_id=WS, session_id="s-loop", kind="t.loop", delay="0s", budget=True)
        except BudgetExceeded as exc:
            refusals.append(exc.limit)

    django_wakes.registry.register("t.loop", again, replace=True)
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"CHAIN_MAX_DEPTH": 2, "SESSION_MIN_DELAY": None}}
    django_wakes.schedule(workspace_id=WS, session_id="s-loop", kind="t.loop", delay="0s")
    for _ in range(5):
        django_wakes.run_due()
    assert sorted(Wake.objects.values_list("depth", flat=True)) == [0, 1, 2]
    assert refusals == ["chain_max_depth"]


# -- idle gating ----------------------------------------------------------------------------------


def test_a_busy_sessions_turn_waits_without_an_attempt_and_a_nudge_brings_it_back(clock, settings, spawned):
    busy = {"s1": True}
    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": lambda session_id: busy.get(session_id, False)}
    wake = django_wakes.schedule(workspace_id=WS, session_id="s1", delay="0s")
    assert wake.serial_key == f"session:{WS}:s1"  # a session's turns share a lane
    report = django_wakes.run_due()
    assert report.deferred == 1 and spawned == []
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.PENDING and row.attempts == 0 and row.due_at == clock.now() + timedelta(seconds=2)
    assert WakeAttempt.objects.get(wake=wake).error == "session busy"
    busy["s1"] = False
    assert django_wakes.nudge_session("s1", workspace_id=WS) == 1  # the host's "turn finished"
    assert django_wakes.run_due().fired == 1
    assert [s for s, _ in spawned] == ["s1"]


def test_one_session_never_runs_two_turns_in_one_pass(clock, spawned):
    django_wakes.schedule(workspace_id=WS, session_id="s1", delay="0s")
    django_wakes.schedule(workspace_id=WS, session_id="s1", delay="0s")
    django_wakes.schedule(workspace_id=WS, session_id="s1", delay="0s", serial_key="own-lane")
    claims = engine.claim_batch(runner_id="A")
    assert sorted(c.wake.serial_key for c in claims) == ["own-lane", f"session:{WS}:s1"]


# -- durable scratch ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "returned",
    [
        Retry(reason="again", scratch={"step": 1}),
        Defer(until="1m", scratch={"step": 1}),
        Done(scratch={"step": 1}),
        Stop(scratch={"step": 1}),
    ],
)
def test_a_sink_writes_scratch_with_its_outcome(clock, sinks, returned):
    sinks(KIND, then=lambda wake, result: returned)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    django_wakes.run_due()
    assert Wake.objects.get(pk=wake.pk).scratch == {"step": 1}


def test_a_plain_return_keeps_the_scratch(clock, sinks):
    seen: list[Any] = []

    def sink(wake: Any, result: dict[str, Any]) -> Any:
        seen.append(wake.scratch)
        return Retry(scratch={"n": len(seen)}) if len(seen) < 3 else None

    sinks(KIND, then=sink)
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    for _ in range(3):
        django_wakes.run_due()
        clock.advance("1h")
    assert seen == [None, {"n": 1}, {"n": 2}]
    assert Wake.objects.get(pk=wake.pk).scratch == {"n": 2}


def test_a_fenced_out_finisher_writes_no_scratch(clock, sinks, settings):
    settings.WAKES = {**settings.WAKES, "LEASE": "30s"}
    sinks(KIND, then=lambda wake, result: Done(scratch={"from": "late"}))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s")
    (stale,) = engine.claim_batch(runner_id="A")
    clock.advance("30s")
    (fresh,) = engine.claim_batch(runner_id="B")
    assert engine.fire(stale).outcome == "fenced"
    assert Wake.objects.get(pk=wake.pk).scratch is None
    assert engine.fire(fresh).settled and Wake.objects.get(pk=wake.pk).scratch == {"from": "late"}


def test_an_invalid_scratch_is_a_failed_attempt(clock, sinks):
    sinks(KIND, then=lambda wake, result: Done(scratch={"x": float("nan")}))
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, delay="0s", max_attempts=1)
    django_wakes.run_due()
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.DEAD and "scratch" in row.last_error and row.scratch is None


class ContextOverflow(Exception):
    pass


def test_the_context_overflow_recipe_survives_a_runner_kill(clock, settings):
    """Compact once, one partial delivery, then terminal: the markers live in the wake, not the process."""
    settings.WAKES = {**settings.WAKES, "LEASE": "30s"}
    log: list[str] = []
    kill_during_partial = {"armed": True}

    def deliver(wake: Any, result: dict[str, Any]) -> Any:
        notes = wake.scratch or {}
        if not notes.get("compacted"):
            log.append("full -> overflow, compact")
            return Retry(at=clock.now(), reason="context overflow", scratch={"compacted": True})
        if not notes.get("partial_sent"):
            if kill_during_partial.pop("armed", False):
                log.append("partial -> runner killed")
                ctrl_c()  # a real Ctrl-C stops the pass mid-sink (a sink's own raise would be its failed attempt)
            log.append("partial delivered")
            return Done(scratch={**notes, "partial_sent": True})
        raise AssertionError("a third delivery must never happen")

    django_wakes.registry.register("t.overflow", deliver, replace=True)
    wake = django_wakes.schedule(workspace_id=WS, kind="t.overflow", delay="0s")
    django_wakes.run_due()  # attempt 1: overflow, compact, marker written with the retry
    with pytest.raises(KeyboardInterrupt):
        django_wakes.run_due()  # attempt 2: the runner dies mid-partial
    clock.advance("31s")
    django_wakes.run_due()  # the lease lapsed: re-driven, and the marker is still there
    assert log == ["full -> overflow, compact", "partial -> runner killed", "partial delivered"]
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.FIRED and row.scratch == {"compacted": True, "partial_sent": True}
    assert [a.outcome for a in WakeAttempt.objects.filter(wake=wake).order_by("id")] == [
        Outcome.RETRY,
        Outcome.ABANDONED,
        Outcome.FIRED,
    ]


def test_the_tools_always_spend_the_agents_budget(clock, settings, spawned):
    from django_wakes.agents import tools

    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_MAX_LIVE": 1}}
    first = tools.dispatch("schedule_followup", {"delay": "1h", "note": "one"}, workspace_id=WS, session_id="s-t")
    assert "error" not in first
    second = tools.dispatch("schedule_followup", {"delay": "2h", "note": "two"}, workspace_id=WS, session_id="s-t")
    assert second["error"]["code"] == "budget_exceeded"
    assert Wake.objects.filter(session_id="s-t").count() == 1
