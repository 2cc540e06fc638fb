"""An agent-made recurring wake keeps the session budgets at every occurrence (issue 26, finding 3).

``SESSION_MIN_DELAY`` and ``SESSION_COOLDOWN`` bound the gap between consecutive occurrences (a cron's
smallest gap, irregular ones and daylight-saving nights included), ``SESSION_MAX_HORIZON`` ends the chain;
the first occurrence is the first slot at or after now + the minimum delay. Through ``dispatch``, the MCP
SDK's client and the Python API with ``budget=True``; host code without ``budget`` is not limited.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import mcp
import pytest
from asgiref.sync import async_to_sync

import django_wakes
from django_wakes import BudgetExceeded, engine
from django_wakes.agents import mcp_server, tools
from django_wakes.durations import parse_duration
from django_wakes.models import State, Wake
from django_wakes.schedules import gaps
from django_wakes.schedules.recurrence import CronGrid, DstPolicy, EveryGrid

pytestmark = pytest.mark.django_db

WS, SESSION, KIND = "ws-chain-budget", "s-chain", "t.chain-budget"


@pytest.fixture
def budgets(settings):
    def set_(**limits: Any) -> None:
        settings.WAKES = {**settings.WAKES, "BUDGETS": limits}

    return set_


def agent_chain(**kwargs: Any) -> Wake:
    return django_wakes.schedule(workspace_id=WS, session_id=SESSION, kind=KIND, budget=True, **kwargs)


def followup(**arguments: Any) -> dict[str, Any]:
    return tools.dispatch("schedule_followup", {"note": "n", **arguments}, workspace_id=WS, session_id=SESSION)


# -- the smallest gap of a schedule ---------------------------------------------------------------

START = datetime(2030, 1, 1, 0, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "tz", "below", "closest"),
    [
        ("* * * * *", "UTC", "90s", "60s"),
        ("3-59 * * * *", "UTC", "90s", "60s"),  # the finding: every minute but 0-2 of each hour
        ("0,1 * * * *", "UTC", "90s", "60s"),  # irregular: a minute, then 59
        ("*/2 * * * *", "UTC", "90s", None),
        ("0,59 0,23 * * *", "UTC", "1h", "60s"),  # 23:59, then 00:00 the next day
        ("0,59 0,23 12,13 * *", "UTC", "30m", "60s"),  # only across the 12th to the 13th
        ("0,59 0,23 12,14 * *", "UTC", "30m", None),
        ("1,59 1,3 * * *", "Europe/Paris", "5m", "2m"),  # 01:59 then 03:01 on the spring-forward night
        ("30 * * * *", "Europe/Paris", "45m", "30m"),  # 01:30, then 02:30 moved to 03:00 by the gap
        ("30 * * * *", "UTC", "45m", None),
        ("0 * * * *", "Australia/Lord_Howe", "1h", "30m"),  # a half-hour jump
        ("0 9 * * MON", "Europe/Paris", "1d", None),
    ],
)
def test_the_closest_two_occurrences_of_a_cron(expression, tz, below, closest):
    grid = CronGrid(expression, tz)
    first = grid.next_after(START)
    found = gaps.closest(grid, first, None, parse_duration(below))
    if closest is None:
        assert found is None
    else:
        assert found is not None and found.gap == parse_duration(closest), found


def test_a_repeated_hour_fired_twice_is_a_gap_of_the_jump():
    grid = CronGrid("30 2 * * *", "Europe/Paris", DstPolicy(ambiguous="both"))
    found = gaps.closest(grid, grid.next_after(START), None, timedelta(hours=2))
    assert found is not None and found.gap == timedelta(hours=1) and found.before.date() == found.after.date()
    assert gaps.closest(CronGrid("30 2 * * *", "Europe/Paris"), START, None, timedelta(hours=2)) is None


def test_an_every_chains_gap_is_its_step():
    assert gaps.closest(EveryGrid(timedelta(seconds=60), START), START, None, timedelta(seconds=90)) is not None
    assert gaps.closest(EveryGrid(timedelta(minutes=2), START), START, None, timedelta(seconds=90)) is None


def test_only_the_chains_life_counts():
    spring = CronGrid("1,59 1,3 * * *", "Europe/Paris")
    before_march = datetime(2030, 2, 1, tzinfo=UTC)
    assert gaps.closest(spring, spring.next_after(START), before_march, timedelta(minutes=5)) is None


# -- the Python API with budget=True ------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["* * * * *", "3-59 * * * *", "0,1 * * * *"])
def test_a_cron_whose_occurrences_come_closer_than_the_minimum_delay_is_refused(clock, sinks, budgets, expression):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="90s")
    with pytest.raises(BudgetExceeded) as refused:
        agent_chain(cron=expression)
    assert refused.value.limit == "session_min_delay" and "1 minute" in str(refused.value)
    assert not Wake.objects.exists()
    assert django_wakes.schedule(workspace_id=WS, session_id=SESSION, kind=KIND, cron=expression).pk  # host code
    assert agent_chain(cron="*/2 * * * *").state == State.PENDING


def test_an_every_chain_faster_than_the_minimum_delay_is_refused(clock, sinks, budgets):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="90s")
    with pytest.raises(BudgetExceeded) as refused:
        agent_chain(every="60s")
    assert refused.value.limit == "session_min_delay"
    assert agent_chain(every="2m").fire_at == clock.now() + timedelta(minutes=2)


def test_the_cooldown_spaces_every_occurrence(clock, sinks, budgets):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="10s", SESSION_COOLDOWN="10m")
    with pytest.raises(BudgetExceeded) as refused:
        agent_chain(cron="*/5 * * * *")
    assert refused.value.limit == "session_cooldown"
    assert agent_chain(cron="*/10 * * * *").state == State.PENDING


def test_a_daylight_saving_night_counts(clock, sinks, budgets):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="5m", SESSION_MAX_HORIZON="120d")  # the chain's life reaches 31 March 2030
    with pytest.raises(BudgetExceeded, match="2030-03-31 01:59 and 2030-03-31 03:01"):
        agent_chain(cron="1,59 1,3 * * *", tz="Europe/Paris")
    budgets(SESSION_MIN_DELAY="5m", SESSION_MAX_HORIZON="60d")  # ends before it
    assert agent_chain(cron="1,59 1,3 * * *", tz="Europe/Paris").state == State.PENDING


def test_the_chain_ends_at_the_horizon(clock, sinks, budgets):
    calls = sinks(KIND)
    budgets(SESSION_MAX_HORIZON="1d")
    chain = agent_chain(cron="0 * * * *")
    assert chain.end_at == clock.now() + timedelta(days=1)
    own = agent_chain(cron="0 */2 * * *", end_at=clock.now() + timedelta(hours=5))
    assert own.end_at == clock.now() + timedelta(hours=5)  # an earlier end_at is kept
    for _ in range(40):
        upcoming = Wake.objects.filter(chain_id=chain.chain_id, state=State.PENDING).first()
        if upcoming is None:
            break
        clock.set(upcoming.fire_at)
        engine.run_due()
    fired = Wake.objects.filter(chain_id=chain.chain_id, state=State.FIRED)
    assert fired.count() == 24 and max(fired.values_list("fire_at", flat=True)) == chain.end_at
    assert not Wake.objects.filter(chain_id=chain.chain_id, state=State.PENDING).exists()
    assert len([c for c in calls if c]) >= 24


def test_the_first_occurrence_is_the_first_slot_at_or_after_the_minimum_delay(clock, sinks, budgets):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="10s")
    clock.set(datetime(2030, 1, 1, 9, 0, 55, tzinfo=UTC))
    assert agent_chain(cron="* * * * *").fire_at == datetime(2030, 1, 1, 9, 2, tzinfo=UTC)
    clock.set(datetime(2030, 1, 1, 9, 0, 30, tzinfo=UTC))
    assert agent_chain(cron="* * * * *").fire_at == datetime(2030, 1, 1, 9, 1, tzinfo=UTC)
    clock.set(datetime(2030, 1, 1, 9, 0, 50, tzinfo=UTC))  # exactly 10 s before a slot: that slot
    assert agent_chain(cron="* * * * *").fire_at == datetime(2030, 1, 1, 9, 1, tzinfo=UTC)


def test_schedule_many_budgets_each_chain(clock, sinks, budgets):
    sinks(KIND)
    budgets(SESSION_MIN_DELAY="90s")
    with pytest.raises(BudgetExceeded):
        django_wakes.schedule_many(
            [{"cron": "*/2 * * * *"}, {"cron": "3-59 * * * *"}],
            workspace_id=WS,
            session_id=SESSION,
            kind=KIND,
            budget=True,
        )
    assert not Wake.objects.exists()


# -- dispatch and MCP ----------------------------------------------------------------------------------


def test_dispatch_refuses_a_cron_closer_than_the_minimum_delay(clock, spawned, budgets):
    budgets(SESSION_MIN_DELAY="90s")
    refused = followup(cron="3-59 * * * *")
    assert refused["error"]["code"] == "too_soon" and refused["error"]["field"] == "cron"
    assert "1 minute" in refused["error"]["message"]
    assert "error" not in followup(cron="*/2 * * * *")


def test_dispatch_books_a_cron_whatever_the_second_it_arrives(clock, spawned):
    for second in (30, 55, 59):
        clock.set(datetime(2030, 1, 1, 9, 0, second, tzinfo=UTC))
        made = followup(cron="* * * * *")
        assert "error" not in made, (second, made)
        assert made["fire_at"] == ("2030-01-01T09:01:00+00:00" if second <= 50 else "2030-01-01T09:02:00+00:00")


def test_dispatch_ends_a_cron_at_the_horizon(clock, spawned, budgets):
    budgets(SESSION_MAX_HORIZON="7d")
    made = followup(cron="0 9 * * *")
    assert Wake.objects.get(pk=made["wake_id"]).end_at == clock.now() + timedelta(days=7)


def test_the_mcp_sdk_client_gets_the_same_refusal(clock, spawned, budgets):
    budgets(SESSION_MIN_DELAY="90s", SESSION_MAX_HORIZON="7d")

    async def run() -> tuple[Any, Any]:
        mcp_server._identity.set((WS, SESSION))
        async with mcp.Client(mcp_server.build_server()) as client:
            refused = await client.call_tool("schedule_followup", {"cron": "3-59 * * * *", "note": "spin"})
            made = await client.call_tool("schedule_followup", {"cron": "*/2 * * * *", "note": "ok"})
            return refused, made

    refused, made = async_to_sync(run)()
    assert refused.is_error and refused.structured_content["error"]["code"] == "too_soon"
    assert not made.is_error
    wake = Wake.objects.get(pk=made.structured_content["wake_id"])
    assert wake.end_at == clock.now() + timedelta(days=7) and wake.cron == "*/2 * * * *"


# -- a real runner --------------------------------------------------------------------------------------


@pytest.mark.multiprocess
def test_a_runwakes_process_ends_an_agent_chain_at_the_horizon(procs, sinks, budgets):
    """A chain made with budget=True carries its end: a real runner fires it until the horizon, then stops."""
    sinks("probe.record")
    budgets(SESSION_MIN_DELAY="1s", SESSION_MAX_HORIZON="4s")
    chain = django_wakes.schedule(
        workspace_id=WS, session_id=SESSION, kind="probe.record", every="1s", intent={}, budget=True
    )
    assert chain.end_at is not None and chain.end_at - chain.created_at == timedelta(seconds=4)
    runner = procs.runner("runner", "--interval", "0.2")
    deadline = chain.end_at + timedelta(seconds=3)
    while django_wakes.clock.now() < deadline:
        runner.poll()
        assert runner.returncode is None, runner.log_path.read_text()  # type: ignore[attr-defined]
        time.sleep(0.2)
    rows = Wake.objects.filter(chain_id=chain.chain_id)
    fired = sorted(rows.filter(state=State.FIRED).values_list("fire_at", flat=True))
    # One a second, none past the horizon. A budgeted chain catches up with skip, so a runner slow to start
    # (start-up takes over a second on a loaded machine) skips the slots it missed instead of firing them.
    assert 1 <= len(fired) <= 4 and fired[-1] <= chain.end_at, fired
    assert all(later - earlier >= timedelta(seconds=1) for earlier, later in itertools.pairwise(fired)), fired
    assert not rows.filter(state__in=[State.PENDING, State.FIRING]).exists()


def test_a_budgeted_chain_that_falls_behind_never_fires_turns_back_to_back(clock, sinks, budgets):
    """With no runner for an hour, replay would fire the 12 missed turns one per pass, a minute apart or less."""
    calls = sinks(KIND)
    budgets(SESSION_MIN_DELAY="90s", SESSION_COOLDOWN="2m")
    chain = agent_chain(cron="*/5 * * * *", catch_up="replay")
    assert chain.catch_up == "skip"
    clock.set(chain.fire_at + timedelta(hours=1))
    for _ in range(15):
        engine.run_due()
    assert Wake.objects.filter(chain_id=chain.chain_id, state=State.FIRED).count() == 0
    assert not [c for c in calls if c]
    upcoming = Wake.objects.get(chain_id=chain.chain_id, state=State.PENDING)
    assert upcoming.fire_at > clock.now()
    host = django_wakes.schedule(workspace_id=WS, session_id=SESSION, kind=KIND, cron="*/5 * * * *")
    assert host.catch_up == "replay"  # host code without budget=True keeps its policy
