"""``WakesBackend`` against the documented contract of Django's Tasks framework, in one process.

Every test uses the standard API only (``@task``, ``enqueue``, ``using``, ``get_result``, ``refresh``,
``TaskResultStatus``, the signals); a pass of the engine (``run_due``) stands in for ``runwakes``.
``tests/test_tasks_processes.py`` does the same through real runner processes.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from django_wakes.tasks import framework_available
from tests.tasks_framework import no_tasks_framework

if not framework_available():
    no_tasks_framework()

import django_wakes
from django_wakes.exceptions import InvalidIntent, WakeError
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.tasks import TASK_KIND, WakesBackend, compat
from django_wakes.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_wakes.tasks.exceptions import InvalidTaskArguments, InvalidTaskOptions
from testproject import tasks

pytestmark = pytest.mark.django_db(transaction=True)

RUNNER = "worker-1"


def run(**kwargs: Any) -> django_wakes.RunReport:
    """One pass of the engine, as a runner named ``worker-1`` would make it."""
    return django_wakes.run_due(runner_id=RUNNER, **kwargs)


@pytest.fixture
def signals_seen() -> Iterator[list[tuple[str, str, str]]]:
    """``(signal, result id, status)`` for every task signal sent while the test runs."""
    seen: list[tuple[str, str, str]] = []

    def recorder(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, task_result.id, task_result.status))

        return receive

    receivers = {
        task_enqueued: recorder("enqueued"),
        task_started: recorder("started"),
        task_finished: recorder("finished"),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False)
    yield seen
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


# -- the backend and its flags --------------------------------------------------------------------


def test_the_backend_supports_every_feature_the_framework_names():
    backend = task_backends["default"]
    assert isinstance(backend, WakesBackend)
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True


def test_unknown_options_are_refused_when_the_backend_is_built():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="unknown option"):
        WakesBackend("bad", {"OPTIONS": {"RETRIES": 3}})
    with pytest.raises(ImproperlyConfigured, match="MAX_ATTEMPTS"):
        WakesBackend("bad", {"OPTIONS": {"MAX_ATTEMPTS": 0}})


# -- enqueue ---------------------------------------------------------------------------------------


def test_enqueue_writes_one_task_wake_and_returns_a_ready_result():
    result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert result.args == [2] and result.kwargs == {"b": 3}
    assert result.enqueued_at is not None and result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.attempts == 0 and result.errors == []
    assert not result.is_finished
    wake = Wake.objects.get()
    assert str(wake.pk) == result.id
    assert wake.kind == TASK_KIND == "django_wakes.task"
    assert wake.intent == {"task": "testproject.tasks.add", "args": [2], "kwargs": {"b": 3}, "backend": "default"}
    assert wake.state == State.PENDING and wake.max_attempts == 1
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018 - the property raises


def test_arguments_must_be_json_and_nothing_is_written_otherwise():
    for bad in (object(), float("nan"), float("-inf"), {1: "a", "1": "b"}, {float("nan"): 1}, "nul\x00"):
        with pytest.raises(InvalidTaskArguments) as caught:
            tasks.record.enqueue(bad)
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, WakeError)
    assert not Wake.objects.exists()


def _djangos_backend(name: str) -> Any:
    """Django's own ImmediateBackend or DummyBackend (django.tasks on Django 6, the backport on 5.2)."""
    module = "django.tasks.backends" if compat.FRAMEWORK == "django.tasks" else "django_tasks.backends"
    backend_class = getattr(importlib.import_module(f"{module}.{name.lower()}"), f"{name}Backend")
    return backend_class(name.lower(), {})


def test_argument_keys_and_nan_side_by_side_with_djangos_immediate_and_dummy_backends():
    """Issue 26: ``{1: "one"}`` was refused by WakesBackend and accepted by Django's in-memory backends.

    Now all three accept it (the task gets ``{"1": "one"}`` here, as from a database backend, and as a
    returned ``{1: "one"}`` is stored); NaN is the documented difference: the in-memory backends keep the
    Python float, no database's JSON holds it, and WakesBackend refuses it at ``enqueue()``.
    """
    immediate, dummy = _djangos_backend("Immediate"), _djangos_backend("Dummy")
    wakes = task_backends["default"]
    assert isinstance(wakes, WakesBackend)
    keys = {1: "one", 2.5: "half", False: "no", None: "none"}

    ran = immediate.enqueue(tasks.record, (), {"label": keys})
    assert ran.status == TaskResultStatus.SUCCESSFUL and ran.return_value == keys
    assert dummy.enqueue(tasks.record, (), {"label": keys}).kwargs == {"label": keys}
    queued = wakes.enqueue(tasks.record, (), {"label": keys})
    run()
    written = {"1": "one", "2.5": "half", "false": "no", "null": "none"}  # as json.dumps writes the keys
    assert queued.kwargs == {"label": written}
    assert tasks.record.get_result(queued.id).return_value == written

    nan = float("nan")
    assert math.isnan(immediate.enqueue(tasks.record, (), {"label": nan}).return_value)
    assert math.isnan(dummy.enqueue(tasks.record, (), {"label": nan}).kwargs["label"])
    with pytest.raises(InvalidTaskArguments, match=r"arguments\['kwargs'\]\['label'\] is nan"):
        wakes.enqueue(tasks.record, (), {"label": nan})
    assert Wake.objects.count() == 1


def test_the_checked_in_memory_backends_meet_the_difference_where_tests_run():
    """``django_wakes.tasks.checked``: Django's Immediate and Dummy backends with WakesBackend's check."""
    from django_wakes.tasks import checked

    immediate, dummy = checked.ImmediateBackend("immediate", {}), checked.DummyBackend("dummy", {})
    assert immediate.enqueue(tasks.record, (), {"label": {1: "one"}}).return_value == {"1": "one"}
    assert dummy.enqueue(tasks.record, ((1, b"two"),), {}).args == [[1, "two"]]
    for backend in (immediate, dummy):
        with pytest.raises(InvalidTaskArguments, match="is nan"):
            backend.enqueue(tasks.record, (), {"label": float("nan")})
    assert dummy.results == [dummy.results[0]] and not Wake.objects.exists()


def test_tuples_and_bytes_are_normalised_as_django_does():
    result = tasks.record.enqueue(label=(1, b"two"))  # type: ignore[arg-type]
    assert result.kwargs == {"label": [1, "two"]}
    assert Wake.objects.get().intent["kwargs"] == {"label": [1, "two"]}


def test_an_enqueue_is_part_of_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError("roll back")
    assert not Wake.objects.exists()
    with transaction.atomic():
        result = tasks.add.enqueue(1, 1)
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_aenqueue_and_aget_result():
    result = async_to_sync(tasks.add.aenqueue)(20, 22)
    assert run().fired == 1
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 42
    async_to_sync(result.arefresh)()
    assert result.return_value == 42


# -- statuses and results --------------------------------------------------------------------------


def test_a_task_that_returns_is_successful_with_its_return_value(signals_seen):
    result = tasks.send_email.enqueue("ada@example.org", subject="hi")
    assert run(queues=["emails"]).fired == 1
    fetched = tasks.send_email.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.is_finished
    assert fetched.return_value == {"sent_to": "ada@example.org", "subject": "hi"}
    assert fetched.worker_ids == [RUNNER] and fetched.attempts == 1 and fetched.errors == []
    assert fetched.enqueued_at <= fetched.started_at <= fetched.finished_at
    assert fetched.last_attempted_at == fetched.started_at
    assert fetched.task.queue_name == "emails" and fetched.task.priority == 10
    assert signals_seen == [
        ("enqueued", result.id, TaskResultStatus.READY),
        ("started", result.id, TaskResultStatus.RUNNING),
        ("finished", result.id, TaskResultStatus.SUCCESSFUL),
    ]


def test_refresh_brings_an_old_result_up_to_date():
    result = tasks.add.enqueue(1, 2)
    run()
    assert result.status == TaskResultStatus.READY
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert result.worker_ids == [RUNNER] and result.finished_at is not None


def test_a_running_task_reads_running_from_the_store():
    seen: list[Any] = []

    def look(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_backends["default"].get_result(task_result.id))

    task_started.connect(look, weak=False)
    try:
        tasks.add.enqueue(1, 2)
        run()
    finally:
        task_started.disconnect(look)
    (running,) = seen
    assert running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == [RUNNER] and running.attempts == 1
    assert running.started_at is not None and running.finished_at is None


def test_a_task_that_raises_is_failed_with_its_exception_class_and_traceback(signals_seen):
    result = tasks.fail.enqueue("boom")
    report = run()
    assert report.failed == 1 and report.dead == 1
    fetched = tasks.fail.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED and fetched.is_finished
    (error,) = fetched.errors
    assert error.exception_class_path == "testproject.tasks.TaskFailure"
    assert error.exception_class is tasks.TaskFailure
    assert "TaskFailure: boom" in error.traceback and "raise TaskFailure(message)" in error.traceback
    assert fetched.finished_at is not None and fetched.worker_ids == [RUNNER]
    with pytest.raises(ValueError, match="failed"):
        fetched.return_value  # noqa: B018
    assert signals_seen[-1] == ("finished", result.id, TaskResultStatus.FAILED)
    attempt = WakeAttempt.objects.get(wake_id=int(result.id))
    assert attempt.error_type == "testproject.tasks.TaskFailure"


def test_a_return_value_json_cannot_hold_fails_the_task():
    result = tasks.unstorable.enqueue()
    run()
    fetched = tasks.unstorable.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.errors[0].exception_class_path == "builtins.TypeError"


def test_retries_go_back_to_ready_then_succeed_with_the_attempt_in_the_context(clock, signals_seen):
    result = tasks.flaky.enqueue(fail_until=3)
    run()
    fetched = tasks.flaky.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY  # ready to be executed again
    assert fetched.attempts == 1 and len(fetched.errors) == 1
    assert fetched.errors[0].exception_class_path == "testproject.tasks.TaskFailure"
    wake = Wake.objects.get(pk=int(result.id))
    assert wake.due_at == clock.now() + timedelta(seconds=1)  # the task's own backoff="1s"
    assert run().claimed == 0  # not before its backoff
    clock.advance("1s")
    run()
    clock.advance("1s")
    run()
    fetched.refresh()
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"attempt": 3, "result_id": result.id}
    assert fetched.attempts == 3 and fetched.worker_ids == [RUNNER] * 3
    assert [e.exception_class_path for e in fetched.errors] == ["testproject.tasks.TaskFailure"] * 2
    assert [s for s, _, _ in signals_seen] == ["enqueued", "started", "started", "started", "finished"]
    outcomes = list(WakeAttempt.objects.filter(wake_id=wake.pk).values_list("outcome", flat=True))
    assert outcomes == [Outcome.RETRY, Outcome.RETRY, Outcome.FIRED]


def test_the_last_attempt_fails_the_task_for_good(clock):
    result = tasks.flaky.enqueue(fail_until=99)
    for _ in range(3):
        run()
        clock.advance("1s")
    fetched = tasks.flaky.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.attempts == 3 and len(fetched.errors) == 3
    assert Wake.objects.get(pk=int(result.id)).state == State.DEAD


def test_a_failed_task_retried_from_the_dead_letter_keeps_its_history():
    """The admin's Retry (requeue) gives fresh attempts; the result still shows the runs and errors so far."""
    result = tasks.fail.enqueue("boom")
    run()
    assert django_wakes.engine.retry_wake(int(result.id))
    fetched = tasks.fail.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.attempts == 1 and fetched.worker_ids == [RUNNER]
    assert [e.exception_class_path for e in fetched.errors] == ["testproject.tasks.TaskFailure"]
    assert fetched.started_at is not None and fetched.last_attempted_at is not None
    run()
    again = tasks.fail.get_result(result.id)
    assert again.status == TaskResultStatus.FAILED and again.attempts == 2 and len(again.errors) == 2


def test_the_context_carries_the_attempt_and_the_result():
    result = tasks.context_echo.enqueue()
    run()
    assert tasks.context_echo.get_result(result.id).return_value == {
        "attempt": 1,
        "id": result.id,
        "workers": [RUNNER],
    }


def test_an_async_task_is_awaited():
    result = tasks.async_double.enqueue(21)
    assert run().fired == 1
    assert tasks.async_double.get_result(result.id).return_value == 42


def test_a_cancelled_task_is_failed():
    result = tasks.add.enqueue(1, 2)
    assert django_wakes.cancel(int(result.id))
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED and fetched.errors == [] and fetched.is_finished


# -- get_result ------------------------------------------------------------------------------------


def test_get_result_of_an_unknown_id_raises_does_not_exist():
    backend = task_backends["default"]
    other = django_wakes.schedule(workspace_id="w", kind="demo.print", delay="1h")
    for bad in ("999999", "abc", "", "-1", "1e3", "١٢", str(other.pk), "9" * 40):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(bad)


def test_get_result_through_another_task_is_a_mismatch():
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.record.get_result(result.id)


# -- run_after, priority, queues -------------------------------------------------------------------


def test_run_after_defers_the_task(clock):
    later = clock.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    assert result.task.run_after == later
    assert run().claimed == 0
    clock.advance("1h")
    assert run().fired == 1
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.task.run_after == later


def test_a_naive_run_after_is_refused():
    from datetime import datetime

    with pytest.raises(InvalidTask):
        tasks.add.using(run_after=datetime(2030, 1, 1)).enqueue(1, 2)  # noqa: DTZ001
    assert not Wake.objects.exists()


def test_a_higher_priority_is_run_first(clock):
    low = tasks.record.using(priority=-5).enqueue("low")
    high = tasks.record.using(priority=50).enqueue("high")
    run(limit=1)
    assert tasks.record.get_result(high.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.record.get_result(low.id).status == TaskResultStatus.READY
    with pytest.raises(InvalidTask):
        tasks.record.using(priority=101)


def test_a_runner_serves_only_the_queues_it_is_told():
    email = tasks.send_email.enqueue("x@example.org")
    plain = tasks.add.enqueue(1, 1)
    run(queues=["default"])
    assert tasks.send_email.get_result(email.id).status == TaskResultStatus.READY
    assert tasks.add.get_result(plain.id).status == TaskResultStatus.SUCCESSFUL
    run(queues=["emails"])
    assert tasks.send_email.get_result(email.id).status == TaskResultStatus.SUCCESSFUL
    with pytest.raises(InvalidTask, match="not valid"):
        tasks.add.using(queue_name="nowhere")


# -- lanes and per-task options --------------------------------------------------------------------


def test_a_lane_template_is_filled_from_the_arguments():
    first = tasks.lane_step.enqueue("acme", step=1)
    second = tasks.lane_step.enqueue(account="acme", step=2)
    other = tasks.lane_step.enqueue("zenith", 1)
    lanes = dict(Wake.objects.values_list("id", "serial_key"))
    assert lanes[int(first.id)] == lanes[int(second.id)] == "account:acme"
    assert lanes[int(other.id)] == "account:zenith"
    run()  # one per lane: acme's second step waits for its first
    assert tasks.lane_step.get_result(second.id).status == TaskResultStatus.READY
    run()
    assert tasks.lane_step.get_result(second.id).status == TaskResultStatus.SUCCESSFUL


def test_a_lane_template_naming_a_missing_argument_is_refused():
    with pytest.raises(InvalidTaskArguments, match="account"):
        tasks.lane_step.enqueue(step=1)  # type: ignore[call-arg]
    assert not Wake.objects.exists()


def test_using_sets_the_wakes_options_for_one_call():
    result = tasks.record.using(serial_key="user:7", max_attempts=4, backoff={"BASE": "5s", "FACTOR": 3}).enqueue("x")
    wake = Wake.objects.get(pk=int(result.id))
    assert wake.serial_key == "user:7" and wake.max_attempts == 4
    assert wake.intent["backoff"] == {"base": 5.0, "factor": 3.0, "max": 86400.0}


@pytest.mark.parametrize(
    "option",
    [
        {"max_attempts": 0},
        {"max_attempts": True},
        {"backoff": "soon"},
        {"backoff": {"FACTOR": 2}},
        {"backoff": {"BASE": "1s", "FACTOR": 0.5}},
        {"serial_key": ""},
        {"serial_key": "user:{0.__class__}"},
        {"serial_key": "user:{"},
    ],
)
def test_bad_options_are_refused_as_invalid_tasks(option):
    with pytest.raises(InvalidTaskOptions) as caught:
        tasks.record.using(**option)
    assert isinstance(caught.value, InvalidTask) and isinstance(caught.value, WakeError)


def test_an_intent_too_large_is_refused(settings):
    settings.WAKES = {**settings.WAKES, "INTENT_MAX_BYTES": 100}
    with pytest.raises(InvalidIntent):
        tasks.record.enqueue("x" * 200)
    assert not Wake.objects.exists()


# -- runners that die ------------------------------------------------------------------------------


def test_a_task_whose_runner_died_runs_again_and_a_poison_task_ends_failed(clock):
    """A dead runner's task is taken over; one that kills its runner every time ends FAILED, not RUNNING."""
    from django_wakes import engine
    from django_wakes.tasks.exceptions import TaskInterrupted

    ok = tasks.add.enqueue(1, 2)
    (claim,) = engine.claim_batch(runner_id="dead-runner", lease=timedelta(seconds=5))
    assert tasks.add.get_result(ok.id).status == TaskResultStatus.RUNNING
    clock.advance("6s")  # its lease lapses: the runner is gone
    assert run().fired == 1  # taken over; its start was never recorded, so the attempt is not charged
    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 3
    assert ok.worker_ids == ["dead-runner", RUNNER] and ok.errors == []

    poison = tasks.add.enqueue(2, 2)
    engine.claim_batch(runner_id="first", lease=timedelta(seconds=5))
    clock.advance("6s")
    (second,) = engine.claim_batch(runner_id="second", lease=timedelta(seconds=5))  # guarded from now on
    assert not isinstance(engine.prepare_sink(second), engine.FireOutcome)  # its start is recorded ...
    clock.advance("6s")  # ... and then "second" dies inside the task too
    run()
    poison.refresh()
    assert poison.status == TaskResultStatus.FAILED and poison.is_finished
    assert poison.worker_ids == ["first", "second"]
    (error,) = poison.errors
    assert error.exception_class is TaskInterrupted
    assert "lease lapsed" in error.traceback


# -- the README's example, as written --------------------------------------------------------------


def readme_blocks(section: str) -> list[str]:
    """The ```python blocks of one ``## section`` of README.md, in order."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def test_the_readmes_tasks_example_runs_as_written(settings, tmp_path, monkeypatch):
    """The README's settings and task, unedited, on this Django (5.2 with the backport, or 6): enqueued, run, read."""
    settings_block, task_block = readme_blocks("Django Tasks")
    declared: dict[str, Any] = {}
    exec(settings_block, declared)  # noqa: S102 - our own README
    settings.TASKS = declared["TASKS"]
    (tmp_path / "readme_tasks_example.py").write_text(task_block)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "readme_tasks_example", raising=False)
    example = importlib.import_module("readme_tasks_example")  # enqueues, and reads the status back
    wake = Wake.objects.get(pk=int(example.result.id))
    assert (wake.kind, wake.queue_name, wake.serial_key, wake.max_attempts) == (TASK_KIND, "emails", "user:7", 3)
    assert example.send_welcome.get_result(example.result.id).status == TaskResultStatus.READY
    assert run().fired == 1
    done = example.send_welcome.get_result(example.result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value is None


# -- the result stored before task_finished; JSON keys; using() options kept -----------------------


@pytest.mark.parametrize("task_name", ["add", "fail"])
def test_task_finished_is_sent_once_the_result_is_stored(task_name):
    """A receiver that reads the result back (from any process) sees it finished, not RUNNING."""
    seen: list[Any] = []

    def look(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((task_result.status, task_backends["default"].get_result(task_result.id)))

    task_finished.connect(look, weak=False)
    try:
        result = tasks.add.enqueue(1, 2) if task_name == "add" else tasks.fail.enqueue("boom")
        run()
    finally:
        task_finished.disconnect(look)
    ((sent, stored),) = seen
    expected = TaskResultStatus.SUCCESSFUL if task_name == "add" else TaskResultStatus.FAILED
    assert sent == stored.status == expected
    assert stored.id == result.id and stored.finished_at is not None
    if task_name == "add":
        assert stored.return_value == 3
    else:
        assert [e.exception_class_path for e in stored.errors] == ["testproject.tasks.TaskFailure"]


def test_a_retried_attempt_sends_no_task_finished(clock, signals_seen):
    result = tasks.flaky.enqueue(fail_until=2)
    run()
    assert ("finished", result.id, TaskResultStatus.FAILED) not in signals_seen
    clock.advance("1s")
    run()
    assert [s for s in signals_seen if s[0] == "finished"] == [("finished", result.id, TaskResultStatus.SUCCESSFUL)]


def test_a_dict_with_keys_that_are_not_strings_is_stored_as_json_has_it():
    finished: list[Any] = []

    def keep(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result.return_value)

    task_finished.connect(keep, weak=False)
    try:
        result = tasks.int_keys.enqueue()
        run()
    finally:
        task_finished.disconnect(keep)
    fetched = tasks.int_keys.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"1": "one", "2": "two"} == finished[0]


@pytest.mark.parametrize(
    "chosen",
    [
        {"serial_key": "user:7", "max_attempts": 4, "backoff": {"BASE": "5s", "FACTOR": 3}},
        {"backoff": timedelta(seconds=90)},
        {"backoff": {"BASE": timedelta(milliseconds=1500), "MAX": "1h"}},
        {"max_attempts": 2, "priority": 7, "queue_name": "emails"},
        {},
    ],
)
def test_get_result_task_equals_the_task_enqueue_returned(clock, chosen):
    """Options given with using() come back with the result (Django's contract: result.task is the task)."""
    task = tasks.record.using(**chosen)
    result = task.enqueue("x")
    assert result.task == task
    assert tasks.record.get_result(result.id).task == task
    run()
    fetched = tasks.record.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.task == task


# -- USE_TZ = False: every call works, aware datetimes still accepted ------------------------------


@pytest.fixture
def naive_settings(settings: Any) -> Any:
    """``USE_TZ = False`` in a zone that is not UTC (PostgreSQL sessions then speak local time)."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"
    return settings


def test_enqueue_run_and_read_results_with_use_tz_false(clock, naive_settings):
    from django.utils import timezone

    added = tasks.add.enqueue(2, 3)
    local_later = timezone.make_naive(clock.now() + timedelta(hours=1))  # naive: Paris wall time
    deferred = tasks.record.using(run_after=local_later).enqueue("later")
    aware_later = clock.now() + timedelta(hours=2)
    deferred_aware = tasks.record.using(run_after=aware_later).enqueue("aware")
    failing = tasks.fail.enqueue("boom")
    assert timezone.is_naive(added.enqueued_at)

    report = run()
    assert (report.fired, report.failed) == (1, 1)
    done = tasks.add.get_result(added.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    for moment in (done.enqueued_at, done.started_at, done.finished_at, done.last_attempted_at):
        assert timezone.is_naive(moment)  # what Django's own backends give with USE_TZ = False
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.finished_at == timezone.make_naive(clock.now())
    assert tasks.fail.get_result(failing.id).status == TaskResultStatus.FAILED

    waiting = tasks.record.get_result(deferred.id)
    assert waiting.status == TaskResultStatus.READY and waiting.task.run_after == local_later
    assert waiting.task == deferred.task
    assert tasks.record.get_result(deferred_aware.id).task.run_after == aware_later
    clock.advance("1h")
    assert run().fired == 1
    assert tasks.record.get_result(deferred.id).status == TaskResultStatus.SUCCESSFUL
    clock.advance("1h")
    assert run().fired == 1
    assert tasks.record.get_result(deferred_aware.id).status == TaskResultStatus.SUCCESSFUL


def test_retries_with_backoff_and_use_tz_false(clock, naive_settings):
    result = tasks.flaky.enqueue(fail_until=3)
    run()
    assert tasks.flaky.get_result(result.id).status == TaskResultStatus.READY
    for _ in range(2):
        clock.advance("1s")
        run()
    fetched = tasks.flaky.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.attempts == 3


def test_the_wakes_api_with_use_tz_false(clock, naive_settings, sinks):
    """schedule, watch/deliver_event, request_approval/resolve, cancel, run_due: naive local or aware times."""
    from django.utils import timezone

    calls = sinks("t.naive")
    at_local = django_wakes.schedule(
        workspace_id="w", kind="t.naive", at=timezone.make_naive(clock.now() + timedelta(minutes=5))
    )
    at_aware = django_wakes.schedule(workspace_id="w", kind="t.naive", at=clock.now() + timedelta(minutes=5))
    assert Wake.objects.get(pk=at_local.pk).due_at == Wake.objects.get(pk=at_aware.pk).due_at == at_aware.due_at
    assert Wake.objects.get(pk=at_aware.pk).due_at == clock.now() + timedelta(minutes=5)  # the same instant
    watcher = django_wakes.watch(workspace_id="w", kind="t.naive", event_key="ci:1", expires_in="1d")
    approval = django_wakes.request_approval(workspace_id="w", kind="t.naive", prompt="Deploy?", expires_in="1h")
    doomed = django_wakes.schedule(workspace_id="w", kind="t.naive", delay="1m")
    assert django_wakes.cancel(doomed.pk) is True
    assert django_wakes.deliver_event(workspace_id="w", event_key="ci:1", payload={"ok": True}) == 1
    django_wakes.resolve(approval.token, {"approved": True}, actor="demo")
    report = run()
    assert report.fired == 2 and report.next_at == clock.now() + timedelta(minutes=5)
    assert sorted(calls.ids) == sorted([watcher.pk, approval.wake.pk])
    clock.advance("5m")
    assert run().fired == 2
    assert Wake.objects.filter(state=State.FIRED).count() == 4


def test_a_wake_stored_with_use_tz_false_is_the_same_instant_with_use_tz_true(clock, settings, sinks):
    sinks("t.switch")
    settings.USE_TZ = False
    settings.TIME_ZONE = "Europe/Paris"
    moment = clock.now() + timedelta(minutes=5)
    wake = django_wakes.schedule(workspace_id="w", kind="t.switch", at=moment)
    settings.USE_TZ = True
    assert Wake.objects.get(pk=wake.pk).due_at == moment
