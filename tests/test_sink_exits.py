"""A sink or task that calls ``sys.exit()`` or raises ``KeyboardInterrupt`` fails its attempt, nothing more.

Code lifted from a script exits; before, that exception went past the engine: ``run_due()`` let it
escape with the wake left firing, ``runwakes`` died (and after the lease the next runner re-ran the
wake and died too), and with ``--concurrency`` the fire threads died silently while the process
kept renewing the leases of the claims no thread was working on. Now anything user code raises is
a failed attempt with its class and traceback, and the pass goes on; only an exception a *signal
handler* raised (a real Ctrl-C) stops a pass (``django_wakes/engine/interrupts.py``).

The runner cases run real ``runwakes`` processes (``tests/processes.py``): plain, ``--once`` and
``--concurrency``, with sync and ``async def`` sinks, and with the Django Tasks API.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

import django_wakes
from django_wakes.engine import interrupts
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.sinks import registry
from django_wakes.tasks import framework_available
from tests.processes import Procs, wait_for

WS = "ws-sink-exits"
EXITS = ["SystemExit", "KeyboardInterrupt"]


def ctrl_c(wake: Any = None, result: Any = None) -> None:
    """A real Ctrl-C reaches this process while the sink runs (Python's handler raises KeyboardInterrupt)."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # the handler's KeyboardInterrupt ends the sleep at once
    raise AssertionError("SIGINT did not interrupt the sink")


def exits(how: str) -> Any:
    def sink(wake: Any, result: Any) -> None:
        if how == "KeyboardInterrupt":
            raise KeyboardInterrupt
        raise SystemExit(3)

    return sink


def attempts_of(wake: Wake) -> list[WakeAttempt]:
    return list(WakeAttempt.objects.filter(wake_id=wake.pk).order_by("number", "id"))


# --------------------------------------------------------------------------------------------------
# In one process: run_due()
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("how", EXITS)
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_run_due_records_a_sinks_exit_as_a_failed_attempt_and_goes_on(clock, sinks, how, flavour):
    raising = exits(how)
    if flavour == "async":

        async def async_exits(wake: Any, result: Any) -> None:
            raising(wake, result)

        registry.register("t.exits", async_exits, replace=True)
    else:
        registry.register("t.exits", raising, replace=True)
    calls = sinks("t.ok")
    bad = django_wakes.schedule(workspace_id=WS, kind="t.exits", delay="0s", max_attempts=1, priority=1)
    good = [django_wakes.schedule(workspace_id=WS, kind="t.ok", delay="0s") for _ in range(3)]

    report = django_wakes.run_due()

    assert (report.fired, report.failed, report.dead) == (3, 1, 1)
    assert sorted(calls.ids) == sorted(w.pk for w in good)
    dead = Wake.objects.get(pk=bad.pk)
    assert dead.state == State.DEAD and dead.lease_until is None and dead.claim_token is None
    (attempt,) = attempts_of(bad)
    assert attempt.outcome == Outcome.FAILED
    assert attempt.error_type == f"builtins.{how}"
    assert how in attempt.error and "Traceback" in attempt.error


@pytest.mark.django_db
def test_a_real_ctrl_c_still_stops_run_due_and_the_wake_is_left_to_its_lease(clock, sinks):
    registry.register("t.ctrl_c", ctrl_c, replace=True)
    first = django_wakes.schedule(workspace_id=WS, kind="t.ctrl_c", delay="0s", priority=1)
    calls = sinks("t.ok")
    later = django_wakes.schedule(workspace_id=WS, kind="t.ok", delay="0s")
    handler = signal.getsignal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        django_wakes.run_due()

    assert signal.getsignal(signal.SIGINT) is handler, "the pass puts the process's own handler back"
    assert Wake.objects.get(pk=first.pk).state == State.FIRING, "interrupted: no attempt is recorded"
    assert attempts_of(first) == []
    assert calls == [] and Wake.objects.get(pk=later.pk).state == State.FIRING


@pytest.mark.django_db
def test_a_session_busy_hook_that_exits_is_a_failed_attempt(clock, settings, spawned):
    def busy(session_id: str) -> bool:
        raise SystemExit("the hook exits")

    settings.WAKES = {**settings.WAKES, "SESSION_BUSY": busy}
    wake = django_wakes.schedule(workspace_id=WS, session_id="s1", delay="0s", max_attempts=2)
    assert django_wakes.run_due().failed == 1
    (attempt,) = attempts_of(wake)
    assert attempt.error_type == "builtins.SystemExit" and Wake.objects.get(pk=wake.pk).state == State.PENDING
    assert spawned == []


def test_noting_signals_only_notes_what_a_handler_raised():
    own = KeyboardInterrupt()
    with interrupts.noting_signals():
        try:
            ctrl_c()
        except KeyboardInterrupt as exc:
            assert interrupts.by_signal(exc)
        assert not interrupts.by_signal(own)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --------------------------------------------------------------------------------------------------
# Tasks: the result shows SystemExit
# --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["exit", "KeyboardInterrupt"])
def test_a_task_that_exits_is_failed_with_the_exception_class(how):
    if not framework_available():
        pytest.skip("no Tasks framework installed")
    from django_wakes.tasks.compat import TaskResultStatus
    from testproject import tasks

    failing = tasks.script_exit.enqueue(how)
    added = tasks.add.enqueue(1, 2)
    report = django_wakes.run_due()
    assert (report.fired, report.failed) == (1, 1)
    failing.refresh()
    added.refresh()
    assert failing.status == TaskResultStatus.FAILED
    expected = "builtins.SystemExit" if how == "exit" else "builtins.KeyboardInterrupt"
    assert [e.exception_class_path for e in failing.errors] == [expected]
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 3


# --------------------------------------------------------------------------------------------------
# Real runwakes processes
# --------------------------------------------------------------------------------------------------


def probe(kind: str = "probe.intent", **intent: Any) -> Wake:
    return django_wakes.schedule(workspace_id=WS, kind=kind, delay="0s", intent=intent, max_attempts=1)


def settled(*wakes: Wake) -> bool:
    return not Wake.objects.filter(pk__in=[w.pk for w in wakes], state__in=[State.PENDING, State.FIRING]).exists()


def assert_failed_with(wake: Wake, error_type: str) -> None:
    row = Wake.objects.get(pk=wake.pk)
    assert row.state == State.DEAD, (row.state, row.last_error)
    (attempt,) = attempts_of(wake)
    assert (attempt.outcome, attempt.error_type) == (Outcome.FAILED, error_type), attempt.error


@pytest.mark.multiprocess
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", EXITS)
@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("probe.intent", ()),
        ("probe.intent", ("--concurrency", "2")),
        ("probe.async_intent", ()),
        ("probe.async_intent", ("--concurrency", "2")),
    ],
    ids=["plain", "concurrency", "async-plain", "async-concurrency"],
)
def test_a_runner_survives_sinks_that_exit(procs: Procs, how: str, kind: str, args: tuple[str, ...]):
    bad = [probe(kind, exit=how) for _ in range(2)]
    good = [probe(kind) for _ in range(4)]
    runner = procs.runner("r", "--interval", "0.2", *args)
    wait_for(lambda: settled(*bad, *good) or procs.alive(runner), timeout=60, what="every wake to settle")
    for wake in bad:
        assert_failed_with(wake, f"builtins.{how}")
    assert Wake.objects.filter(pk__in=[w.pk for w in good], state=State.FIRED).count() == 4
    assert procs.alive(runner) is False  # still running
    assert procs.stop(runner) == 0, procs.log(runner)


@pytest.mark.multiprocess
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", EXITS)
def test_runwakes_once_fires_the_whole_batch_and_reports_the_failure(procs: Procs, how: str):
    bad = probe(exit=how)
    good = [probe() for _ in range(3)]
    Wake.objects.filter(pk=bad.pk).update(priority=1)  # claimed first: the rest of the batch comes after it
    done = procs.manage("runwakes", "--once")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 wake(s) failed in this pass" in done.stderr
    assert_failed_with(bad, f"builtins.{how}")
    assert Wake.objects.filter(pk__in=[w.pk for w in good], state=State.FIRED).count() == 3


@pytest.mark.multiprocess
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", ["1", "2"])
def test_tasks_that_exit_fail_with_system_exit_in_a_runner(procs: Procs, concurrency: str):
    if not framework_available():
        pytest.skip("no Tasks framework installed")
    from django_wakes.tasks.compat import TaskResultStatus
    from testproject import tasks

    failing = [
        tasks.script_exit.enqueue("exit"),
        tasks.script_exit.enqueue("KeyboardInterrupt"),
        tasks.async_script_exit.enqueue(),
    ]
    after = [tasks.add.enqueue(n, n) for n in range(3)]
    runner = procs.runner("r", "--interval", "0.2", "--concurrency", concurrency)

    def finished() -> bool:
        for result in (*failing, *after):
            result.refresh()
        return all(result.is_finished for result in (*failing, *after))

    wait_for(lambda: finished() or procs.alive(runner), timeout=60, what="every task to finish")
    assert [r.status for r in failing] == [TaskResultStatus.FAILED] * 3
    assert [r.errors[0].exception_class_path for r in failing] == [
        "builtins.SystemExit",
        "builtins.KeyboardInterrupt",
        "builtins.SystemExit",
    ]
    assert "SystemExit" in failing[0].errors[0].traceback
    assert [r.return_value for r in after] == [0, 2, 4]
    assert procs.stop(runner) == 0, procs.log(runner)


@pytest.mark.multiprocess
@pytest.mark.django_db(transaction=True)
def test_a_fire_thread_that_dies_outside_its_sink_hands_its_claim_back_and_is_replaced(procs: Procs):
    """The host's log handler raises SystemExit in the fire threads (testproject/log_handlers.py).

    A failing sink's error record kills the thread's step; logging the broken step kills the thread.
    Each dead thread's claim is given back at once (a failed attempt: it had started) and the thread
    replaced, so the wakes after it fire and nothing stays firing under a lease the runner renews.
    """
    bad = [probe(fail=True) for _ in range(3)]
    good = [probe() for _ in range(4)]
    runner = procs.runner("r", "--interval", "0.2", "--concurrency", "2", WAKES_TEST_BREAK_FIRE_LOGGING="1")
    wait_for(lambda: settled(*bad, *good) or procs.alive(runner), timeout=60, what="every wake to settle")
    for wake in bad:
        row = Wake.objects.get(pk=wake.pk)
        assert row.state == State.DEAD
        assert "ended while firing it" in row.last_error
    assert Wake.objects.filter(pk__in=[w.pk for w in good], state=State.FIRED).count() == 4
    log = procs.log(runner)
    assert log.count("ended unexpectedly holding wake") == 3, log
    assert procs.stop(runner) == 0, log
