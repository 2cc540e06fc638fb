"""Read a task's wake (and its attempts) as the ``TaskResult`` the Tasks framework documents.

The wake is the record; nothing about a task is stored twice. Its state maps to a status:

========================================  ============
wake                                      status
========================================  ============
``pending`` (new, or waiting to retry)    READY
``firing``                                RUNNING
``fired``                                 SUCCESSFUL
``dead``, ``cancelled``, ``expired``,     FAILED
``superseded``
========================================  ============

``worker_ids`` holds the runner of every attempt (an interrupted one too: a runner that died
mid-task processed it), so ``attempts`` (their count) is the number of times the task was started,
and the context's ``attempt`` counts from 1. ``errors`` has one entry per failed attempt: the
exception's class path and traceback, or :class:`~.exceptions.TaskInterrupted` for a runner that died.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.utils import timezone
from django.utils.module_loading import import_string

from ..engine import db_alias
from ..models import Outcome, State, Wake, WakeAttempt
from . import options
from .compat import Task, TaskError, TaskResult, TaskResultStatus

STATUS: dict[str, TaskResultStatus] = {
    State.PENDING: TaskResultStatus.READY,
    State.FIRING: TaskResultStatus.RUNNING,
    State.FIRED: TaskResultStatus.SUCCESSFUL,
    State.DEAD: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
    State.EXPIRED: TaskResultStatus.FAILED,
    State.SUPERSEDED: TaskResultStatus.FAILED,
}

#: Attempt outcomes that are not a start of the task (a deferral is "not now", before the task ran).
NOT_STARTED = (Outcome.DEFERRED,)

INTERRUPTED_PATH = "django_wakes.tasks.exceptions.TaskInterrupted"
INVALID_OUTCOME_PATH = "django_wakes.tasks.exceptions.TaskOutcomeInvalid"


def load_task(wake: Wake) -> Task:  # type: ignore[type-arg]
    """The ``Task`` a wake runs, equal to the one it was enqueued with.

    The decorated task, with what the enqueued one had of its own: the priority, queue, backend and
    ``run_after`` (naive again if it was given naive, with ``USE_TZ = False``), and django-wakes'
    options given with ``using()`` (``max_attempts``, ``backoff``, ``serial_key``: kept in the intent).
    """
    intent = wake.intent or {}
    path = intent.get("task")
    if not isinstance(path, str):
        raise SuspiciousOperation(f"wake {wake.pk} is not a task (its intent names no task)")
    task = import_string(path)
    if not isinstance(task, Task):
        raise SuspiciousOperation(f"wake {wake.pk}: {path} is not a Task (decorate the function with @task)")
    asked = intent.get("run_after")  # a run_after further back than PAST_AT_LIMIT: the wake is due from its enqueue
    run_after = (
        (datetime.fromisoformat(asked) if isinstance(asked, str) else wake.fire_at) if intent.get("deferred") else None
    )
    if run_after is not None and intent.get("naive"):
        run_after = timezone.make_naive(run_after)
    return task.using(
        priority=wake.priority,
        queue_name=wake.queue_name,
        backend=intent.get("backend"),
        run_after=run_after,
        **options.decoded(intent.get("using")),
    )


def local(moment: datetime | None) -> datetime | None:
    """A time as the Tasks framework hands it out: aware, or naive in ``TIME_ZONE`` with ``USE_TZ = False``.

    That is what Django's own backends give (``timezone.now()``), so a caller can compare a result's
    times with its own.
    """
    if moment is None or settings.USE_TZ:
        return moment
    naive: datetime = timezone.make_naive(moment)
    return naive


def started_attempts(wake: Wake) -> list[WakeAttempt]:
    """The settled attempts that started the task, oldest first (none for a wake never claimed before)."""
    first_claim = wake.attempts <= (1 if wake.state == State.FIRING else 0)
    # A dead task retried from the dead letter (requeue) starts counting again but keeps its last_error:
    # its earlier attempts are rows to read.
    if first_claim and not wake.guarded and not wake.last_error and wake.state in (State.PENDING, State.FIRING):
        return []  # never settled an attempt, never interrupted: no row to read (saves a query per task)
    return list(
        WakeAttempt.objects.using(db_alias())
        .filter(wake_id=wake.pk)
        .exclude(outcome__in=NOT_STARTED)
        .order_by("number", "id")
    )


def task_result(wake: Wake, *, task: Task | None = None, attempts: Iterable[WakeAttempt] | None = None) -> TaskResult:  # type: ignore[type-arg]
    """Build the ``TaskResult`` of a task's wake (``attempts``: its started attempts, if already read)."""
    task = task if task is not None else load_task(wake)
    done = list(attempts) if attempts is not None else started_attempts(wake)
    running = wake.state == State.FIRING
    worker_ids = [a.runner_id for a in done] + ([wake.claimed_by] if running else [])
    intent = wake.intent or {}
    result: TaskResult = TaskResult(  # type: ignore[type-arg]
        task=task,
        id=str(wake.pk),
        status=STATUS[wake.state],
        enqueued_at=local(wake.created_at),
        started_at=local(_first_start(done, wake)),
        finished_at=local(wake.settled_at if wake.state not in (State.PENDING, State.FIRING) else None),
        last_attempted_at=local(wake.claimed_at if running else (done[-1].started_at if done else None)),
        args=intent.get("args", []),
        kwargs=intent.get("kwargs", {}),
        backend=task.backend,
        errors=errors(done),
        worker_ids=worker_ids,
    )
    if wake.state == State.FIRED:
        object.__setattr__(result, "_return_value", wake.output)
    return result


def _first_start(done: Sequence[WakeAttempt], wake: Wake) -> datetime | None:
    if done:
        return done[0].started_at
    return wake.claimed_at if wake.state == State.FIRING else None


def errors(attempts: Iterable[WakeAttempt]) -> list[TaskError]:
    """One ``TaskError`` per failed attempt, oldest first."""
    found = []
    for attempt in attempts:
        path = _error_path(attempt)
        if path is not None:
            found.append(TaskError(exception_class_path=path, traceback=attempt.error))
    return found


def _error_path(attempt: WakeAttempt) -> str | None:
    if attempt.outcome == Outcome.INTERRUPTED:
        return INTERRUPTED_PATH
    if attempt.outcome == Outcome.FAILED:
        return attempt.error_type or INVALID_OUTCOME_PATH
    if attempt.outcome == Outcome.RETRY and attempt.error_type:
        return attempt.error_type
    return None


def set_status(result: TaskResult, status: Any, **fields: Any) -> None:  # type: ignore[type-arg]
    """Move an in-memory ``TaskResult`` on (the framework's results are frozen dataclasses)."""
    object.__setattr__(result, "status", status)
    for name, value in fields.items():
        object.__setattr__(result, name, value)
