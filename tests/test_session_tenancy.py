"""A session is ``(workspace_id, session_id)``: two tenants using the same session id never reach each other.

Every test makes tenant A's session ``s`` and tenant B's session ``s`` and shows that stopping,
budgeting, cooling down, nudging, gating, spawning and ``once()`` in one leaves the other untouched.
Each one failed before sessions were keyed by workspace (the session id alone was the key).
"""

from __future__ import annotations

from typing import Any

import pytest

import django_wakes
from django_wakes import BudgetExceeded, SessionStopped, engine, tools
from django_wakes.engine.sessions import is_stopped
from django_wakes.models import SessionControl, State, Wake

pytestmark = pytest.mark.django_db

A, B = "tenant-a", "tenant-b"
SESSION = "s"
KIND = "t.tenant"


@pytest.fixture
def calls(sinks):
    return sinks(KIND)


def agent_wake(workspace: str, **kwargs: Any) -> Wake:
    kwargs.setdefault("delay", "1m")
    return django_wakes.schedule(workspace_id=workspace, session_id=SESSION, kind=KIND, budget=True, **kwargs)


def test_stopping_one_tenants_session_leaves_the_other_tenants_same_session_running(clock, calls):
    mine = django_wakes.schedule(workspace_id=A, session_id=SESSION, kind=KIND, delay="1m")
    theirs = django_wakes.schedule(workspace_id=B, session_id=SESSION, kind=KIND, delay="1m")
    assert django_wakes.stop_session(SESSION, reason="A hit stop", workspace_id=A) == 1
    assert Wake.objects.get(pk=mine.pk).state == State.SUPERSEDED
    assert Wake.objects.get(pk=theirs.pk).state == State.PENDING
    assert is_stopped(SESSION, workspace_id=A) and not is_stopped(SESSION, workspace_id=B)
    with pytest.raises(SessionStopped):
        django_wakes.schedule(workspace_id=A, session_id=SESSION, kind=KIND, delay="1m")
    django_wakes.schedule(workspace_id=B, session_id=SESSION, kind=KIND, delay="1m")  # B is not stopped
    assert django_wakes.resume_session(SESSION, workspace_id=B) is False  # B's was never stopped
    assert is_stopped(SESSION, workspace_id=A)
    assert django_wakes.resume_session(SESSION, workspace_id=A) is True
    assert set(SessionControl.objects.values_list("workspace_id", "session_id")) == {(A, SESSION)}


def test_a_session_stopped_while_its_wake_was_claimed_is_superseded_only_in_its_workspace(clock, calls):
    django_wakes.schedule(workspace_id=A, session_id=SESSION, kind=KIND, delay="0s", serial_key="a")
    django_wakes.schedule(workspace_id=B, session_id=SESSION, kind=KIND, delay="0s", serial_key="b")
    claims = engine.claim_batch(runner_id="R")
    assert len(claims) == 2
    django_wakes.stop_session(SESSION, workspace_id=A)
    outcomes = {claim.wake.workspace_id: engine.fire(claim).outcome for claim in claims}
    assert outcomes == {A: "superseded", B: "fired"}
    assert [wake.workspace_id for wake in calls.wakes] == [B]


def test_a_stopped_session_ends_only_its_own_workspaces_chain(clock, calls):
    chains = {ws: django_wakes.schedule(workspace_id=ws, session_id=SESSION, kind=KIND, every="1h") for ws in (A, B)}
    clock.set(chains[A].fire_at)
    claims = engine.claim_batch(runner_id="R")
    ran = [engine.run_sink(claim) for claim in claims]
    django_wakes.stop_session(SESSION, workspace_id=A)
    engine.settle_successes(ran)
    assert Wake.objects.filter(chain_id=chains[A].chain_id).count() == 1  # A's chain ends
    assert Wake.objects.filter(chain_id=chains[B].chain_id, state=State.PENDING).count() == 1  # B's goes on


def test_one_tenants_live_wakes_do_not_use_up_the_other_tenants_session_budget(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_MAX_LIVE": 2}}
    agent_wake(A)
    agent_wake(A)
    with pytest.raises(BudgetExceeded) as refused:
        agent_wake(A)
    assert refused.value.limit == "session_max_live" and "2 live wakes" in str(refused.value)
    agent_wake(B)  # B's session s has none of its own yet
    agent_wake(B)
    assert Wake.objects.filter(workspace_id=B).count() == 2


def test_the_cooldown_is_each_tenants_own(clock, calls, settings):
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_COOLDOWN": "30s"}}
    agent_wake(A)
    agent_wake(B)  # not cooled down by A's
    with pytest.raises(BudgetExceeded):
        agent_wake(A)
    rows = SessionControl.objects.order_by("workspace_id")
    assert [(r.workspace_id, r.session_id, r.last_agent_wake_at) for r in rows] == [
        (A, SESSION, clock.now()),
        (B, SESSION, clock.now()),
    ]


def test_a_nudge_brings_back_only_its_own_tenants_turns(clock, settings, spawned):
    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": lambda session_id, *, workspace_id: True}
    for ws in (A, B):
        django_wakes.schedule(workspace_id=ws, session_id=SESSION, delay="0s")
    assert django_wakes.run_due().deferred == 2
    assert django_wakes.nudge_session(SESSION, workspace_id=A) == 1
    due = dict(Wake.objects.values_list("workspace_id", "due_at"))
    assert due[A] == clock.now() and due[B] > clock.now()


def test_the_busy_hook_and_spawn_turn_are_told_the_workspace(clock, settings):
    asked: list[tuple[str, str]] = []
    spawned: list[tuple[str, str, dict[str, Any]]] = []

    def busy(session_id: str, *, workspace_id: str) -> bool:
        asked.append((workspace_id, session_id))
        return workspace_id == A  # A's session s is mid-turn; B's is idle

    def spawn_turn(session_id: str, result: dict[str, Any], *, workspace_id: str) -> None:
        spawned.append((workspace_id, session_id, result))

    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": busy, "SPAWN_TURN": spawn_turn}
    for ws in (A, B):
        django_wakes.schedule(workspace_id=ws, session_id=SESSION, delay="0s")
    report = django_wakes.run_due()
    assert (report.fired, report.deferred) == (1, 1)
    assert sorted(asked) == [(A, SESSION), (B, SESSION)]
    assert spawned == [(B, SESSION, {"trigger": "at"})]


def test_hooks_written_for_one_workspace_are_called_as_before(clock, settings, spawned):
    """A ``SPAWN_TURN(session_id, result)`` / ``SESSION_BUSY(session_id)`` without ``workspace_id`` keeps working."""
    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": lambda session_id: False}
    django_wakes.schedule(workspace_id=A, session_id=SESSION, delay="0s")
    assert django_wakes.run_due().fired == 1
    assert spawned == [(SESSION, {"trigger": "at"})]


def test_two_tenants_same_session_turns_are_not_one_lane(clock, spawned):
    """Lanes are global: the default session lane names the workspace, so B's turn never waits for A's."""
    wakes = [django_wakes.schedule(workspace_id=ws, session_id=SESSION, delay="0s") for ws in (A, B)]
    assert wakes[0].serial_key == f"session:{A}:{SESSION}" and wakes[1].serial_key == f"session:{B}:{SESSION}"
    assert len(engine.claim_batch(runner_id="R")) == 2


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a:b", "c"), ("a", "b:c")), (("w", "x" * 200), ("w", "x" * 199 + "y"))],
    ids=["colon in the workspace", "too long for a key"],
)
def test_default_lanes_of_different_sessions_never_coincide(first, second):
    from django_wakes.engine.create import session_lane

    lanes = [session_lane(session, workspace_id=workspace) for workspace, session in (first, second)]
    assert lanes[0] != lanes[1] and all(len(lane) <= 200 for lane in lanes)


def test_the_firing_turn_is_found_in_the_callers_workspace(clock, settings):
    found: dict[str, Any] = {}

    def spawn_turn(session_id: str, result: dict[str, Any], *, workspace_id: str) -> None:
        found[workspace_id] = tools.firing_turn_wake(session_id, workspace_id=workspace_id)

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": spawn_turn}
    wakes = {ws: django_wakes.schedule(workspace_id=ws, session_id=SESSION, delay="0s") for ws in (A, B)}
    claims = engine.claim_batch(runner_id="R")
    assert len(claims) == 2  # both firing at once: the lookup outside the hook must tell them apart
    assert tools.firing_turn_wake(SESSION, workspace_id=A).pk == wakes[A].pk
    assert tools.firing_turn_wake(SESSION, workspace_id="tenant-c") is None
    for claim in claims:
        engine.fire(claim)
    assert {ws: wake.pk for ws, wake in found.items()} == {ws: wake.pk for ws, wake in wakes.items()}


def test_once_receipts_are_kept_per_workspace(transactional_db):
    ran: list[str] = []
    assert django_wakes.once(SESSION, "charge", lambda: ran.append(A) or "A's", workspace_id=A) == "A's"
    assert django_wakes.once(SESSION, "charge", lambda: ran.append(B) or "B's", workspace_id=B) == "B's"
    assert django_wakes.once(SESSION, "charge", lambda: ran.append("again") or "x", workspace_id=A) == "A's"
    assert ran == [A, B]


@pytest.mark.parametrize("call", ["stop_session", "resume_session", "nudge_session"])
def test_the_session_calls_need_the_workspace(call):
    with pytest.raises(TypeError):
        getattr(django_wakes, call)(SESSION)


def test_a_forwarding_hook_with_kwargs_is_not_handed_the_workspace(clock, settings):
    """``def spawn(*args, **kwargs): queue.put(...)`` forwards to a function written as ``(session_id, result)``."""
    started: list[tuple[str, dict[str, Any]]] = []

    def start_turn(session_id: str, result: dict[str, Any]) -> None:  # what the queue runs later
        started.append((session_id, result))

    def spawn_turn(*args: Any, **kwargs: Any) -> None:  # e.g. task.delay(*args, **kwargs)
        start_turn(*args, **kwargs)

    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": spawn_turn}
    django_wakes.schedule(workspace_id=A, session_id=SESSION, delay="0s")
    assert django_wakes.run_due().fired == 1
    assert started == [(SESSION, {"trigger": "at"})]


def test_a_stopped_sessions_refusal_names_its_workspace(clock, calls):
    django_wakes.stop_session(SESSION, workspace_id=A)
    with pytest.raises(SessionStopped, match="session 's' of workspace 'tenant-a' is stopped"):
        agent_wake(A)
