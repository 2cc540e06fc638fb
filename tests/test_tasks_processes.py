"""Django Tasks through real ``runwakes`` processes: results read from another process, a runner killed
mid-task, and periodic tasks synced by processes racing each other (runners booting together).

The test process enqueues with the standard API and reads results with ``get_result``; the runners
are other processes (``tests/processes.py``). Nothing asserts on timing: every wait is bounded.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection, transaction

from django_wakes.tasks import framework_available
from tests.tasks_framework import no_tasks_framework

if not framework_available():
    no_tasks_framework()

from django_wakes.models import LIVE_STATES, Outcome, State, Wake, WakeAttempt
from django_wakes.models import Runner as RunnerRow
from django_wakes.tasks import TASK_KIND
from django_wakes.tasks.compat import TaskResultStatus
from testproject import tasks
from tests.fault_servers import TcpProxy
from tests.processes import Procs, race, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.django_db(transaction=True)]

needs_server = pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="processes racing for one row lock need a server database; SQLite serialises every writer",
)


def finished(*results: Any) -> bool:
    for result in results:
        result.refresh()
    return all(result.is_finished for result in results)


def pid_of(worker_id: str) -> int:
    return int(worker_id.split(":")[1])


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_tasks_run_in_a_runner_process_and_their_results_are_read_here(procs: Procs, concurrency: str):
    added = tasks.add.enqueue(2, 3)
    mailed = tasks.send_email.enqueue("ada@example.org", subject="hi")
    failed = tasks.fail.enqueue("boom")
    doubled = tasks.async_double.enqueue(21)
    context = tasks.context_echo.enqueue()
    not_served = tasks.report.enqueue("monthly")  # its queue is not one this runner serves
    runner = procs.runner("r", "--interval", "0.2", "--queues", "default,emails", "--concurrency", concurrency)
    results = (added, mailed, failed, doubled, context)
    wait_for(lambda: finished(*results) or procs.alive(runner), timeout=60, what="the runner to finish the tasks")
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 5
    assert mailed.return_value == {"sent_to": "ada@example.org", "subject": "hi"}
    assert doubled.return_value == 42
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "testproject.tasks.TaskFailure"
    assert "TaskFailure: boom" in failed.errors[0].traceback
    (worker,) = added.worker_ids
    assert pid_of(worker) == runner.pid
    assert context.return_value == {"attempt": 1, "id": context.id, "workers": [worker]}
    for result in results:
        assert result.started_at is not None and result.finished_at is not None
    not_served.refresh()
    assert not_served.status == TaskResultStatus.READY
    procs.stop(runner)
    # what the task functions did, they did in the runner, once each
    ran = {row["task"]: row["pid"] for row in procs.records("task-*")}
    assert ran == {"add": runner.pid, "send_email": runner.pid, "fail": runner.pid, "async_double": runner.pid}


@needs_server  # SQLite: the open transaction would keep the other process from writing at all
def test_a_task_enqueued_in_an_open_transaction_runs_only_after_commit(procs: Procs):
    runner = procs.runner("r", "--interval", "0.2")
    with transaction.atomic():
        held = tasks.record.enqueue("held")
        # another process enqueues (and commits) a canary: once the runner has finished it, it has
        # looked at the table while this transaction held the first task uncommitted
        enqueued = procs.manage(
            "shell", "-c", "from testproject.tasks import record; print(record.enqueue('canary').id)"
        )
        assert enqueued.returncode == 0, enqueued.stderr
        canary = tasks.record.get_result(enqueued.stdout.split()[-1])
        wait_for(lambda: finished(canary) or procs.alive(runner), timeout=60, what="the runner to run the canary")
        assert [r["label"] for r in procs.records("task-record")] == ["canary"]
    wait_for(lambda: finished(held) or procs.alive(runner), timeout=60, what="the runner to run the committed task")
    assert held.status == TaskResultStatus.SUCCESSFUL
    assert sorted(r["label"] for r in procs.records("task-record")) == ["canary", "held"]
    procs.stop(runner)


def test_a_runner_killed_mid_task_leaves_the_task_to_the_next_runner(procs: Procs):
    result = tasks.hang_once.enqueue("k")
    first = procs.runner("first", "--interval", "0.2", "--lease", "2s")
    wait_for(
        lambda: any(r["first"] for r in procs.records("task-hang_once")) or procs.alive(first),
        timeout=60,
        what="the first runner to start the task",
    )
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    (first_worker,) = result.worker_ids
    assert pid_of(first_worker) == first.pid and result.finished_at is None
    procs.kill(first)
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING  # until its lease lapses and a runner takes over
    second = procs.runner("second", "--interval", "0.2", "--lease", "2s")
    wait_for(lambda: finished(result) or procs.alive(second), timeout=90, what="the second runner to take over")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "k"
    assert result.attempts == 2 and len(result.worker_ids) == 2
    assert result.worker_ids[0] == first_worker and pid_of(result.worker_ids[1]) == second.pid
    assert result.errors == []  # the first runner could not tell whether it had started: not charged
    outcomes = list(WakeAttempt.objects.filter(wake_id=int(result.id)).values_list("outcome", flat=True))
    assert outcomes == [Outcome.ABANDONED, Outcome.FIRED]
    assert [r["first"] for r in procs.records("task-hang_once")] == [True, False]
    procs.stop(second)


def periodic_table(*entries: dict[str, Any]) -> str:
    return json.dumps(list(entries))


DAILY = {"task": "testproject.tasks.record", "cron": "0 3 * * *", "tz": "Europe/Paris", "args": ["daily"]}
HOURLY = {"task": "testproject.tasks.add", "every": "1h", "args": [1, 2], "name": "hourly-add"}


def live_periodic() -> dict[str, list[Wake]]:
    found: dict[str, list[Wake]] = {}
    for wake in Wake.objects.filter(kind=TASK_KIND, state__in=LIVE_STATES):
        found.setdefault(wake.intent["periodic"], []).append(wake)
    return found


@needs_server
def test_processes_syncing_at_once_book_change_and_end_each_chain_once(procs: Procs, monkeypatch):
    monkeypatch.setenv("WAKES_TEST_PERIODIC", periodic_table(DAILY, HOURLY))
    with race(procs, "sync_periodic", [{} for _ in range(4)]) as outcomes:
        pass
    reports = [o["results"] for o in outcomes]
    assert sorted(name for r in reports for name in r["booked"]) == ["hourly-add", "testproject.tasks.record"]
    assert all(r["replanned"] == [] and r["ended"] == [] for r in reports)
    chains = live_periodic()
    assert sorted(chains) == ["hourly-add", "testproject.tasks.record"]
    assert all(len(wakes) == 1 for wakes in chains.values())
    daily_before = chains["testproject.tasks.record"][0]

    changed = {**DAILY, "args": ["daily, changed"]}
    weekly = {"task": "testproject.tasks.report", "cron": "0 6 * * MON", "args": ["weekly"]}
    monkeypatch.setenv("WAKES_TEST_PERIODIC", periodic_table(changed, weekly))
    with race(procs, "sync_periodic", [{} for _ in range(4)]) as outcomes:
        pass
    reports = [o["results"] for o in outcomes]
    assert [name for r in reports for name in r["replanned"]] == ["testproject.tasks.record"]
    assert [name for r in reports for name in r["ended"]] == ["hourly-add"]
    assert [name for r in reports for name in r["booked"]] == ["testproject.tasks.report"]
    chains = live_periodic()
    assert sorted(chains) == ["testproject.tasks.record", "testproject.tasks.report"]
    assert all(len(wakes) == 1 for wakes in chains.values())
    assert chains["testproject.tasks.record"][0].intent["args"] == ["daily, changed"]
    assert Wake.objects.get(pk=daily_before.pk).state == State.CANCELLED


@needs_server
def test_runners_booting_together_book_each_periodic_task_once(procs: Procs):
    table = periodic_table(DAILY, HOURLY)
    runners = [procs.runner(f"boot-{n}", "--interval", "0.5", WAKES_TEST_PERIODIC=table) for n in range(3)]
    wait_for(
        lambda: RunnerRow.objects.count() == 3 or procs.alive(*runners),
        timeout=90,
        what="three runners to boot (each syncs periodic tasks before it registers)",
    )
    chains = live_periodic()
    assert sorted(chains) == ["hourly-add", "testproject.tasks.record"]
    assert all(len(wakes) == 1 for wakes in chains.values()), chains
    booked_logs = [procs.log(r) for r in runners if "periodic tasks synced" in procs.log(r)]
    assert len(booked_logs) == 1  # one runner booked; the others found the chains in place
    for runner in runners:
        assert procs.stop(runner) == 0


@needs_server
def test_a_runner_booted_during_an_outage_syncs_periodic_tasks_once_the_database_answers(procs: Procs, monkeypatch):
    """The runner reaches the database through a TCP forwarder that is not listening yet (connections
    refused: the database is down); it boots, fails the sync, waits; once the forwarder listens, the
    sync runs after the first pass that reaches the database, without a restart."""
    monkeypatch.setenv("WAKES_TEST_PERIODIC", periodic_table(DAILY))
    real = urlsplit(procs.db_url)
    default_port = 5432 if real.scheme == "postgres" else 3306
    gate = TcpProxy(real.port or default_port, target_host=real.hostname or "127.0.0.1")
    credentials = real.netloc.rpartition("@")[0]
    down_url = urlunsplit(
        real._replace(netloc=f"{credentials}@127.0.0.1:{gate.port}" if credentials else f"127.0.0.1:{gate.port}")
    )
    runner = procs.runner("booted-in-outage", "--interval", "0.2", DATABASE_URL=down_url)
    wait_for(
        lambda: "periodic tasks were not synced (database unavailable" in procs.log(runner) or procs.alive(runner),
        timeout=120,
        what="the boot sync to fail while the database is down",
    )
    assert live_periodic() == {}
    gate.start()
    try:
        wait_for(lambda: live_periodic() or procs.alive(runner), timeout=120, what="the sync once the database answers")
        assert sorted(live_periodic()) == ["testproject.tasks.record"]
        wait_for(
            lambda: (
                "periodic tasks synced: booked=testproject.tasks.record" in procs.log(runner) or procs.alive(runner)
            ),
            timeout=30,
            what="the sync's log line",
        )
        assert procs.stop(runner) == 0
    finally:
        gate.stop()
    log = procs.log(runner)
    assert log.count("periodic tasks were not synced") == 1, "tried again once the database answered, not every pass"
    assert log.count("periodic tasks synced") == 1
