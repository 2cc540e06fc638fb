"""``WakesBackend``: the Tasks framework's backend whose tasks are wakes, run by ``runwakes``.

``Task.enqueue()`` writes one wake (kind ``django_wakes.task``) in the caller's transaction, so a
task enqueued in a transaction that rolls back never runs, and runners see it only after commit.
Everything else a wake has comes with it: leases that re-run a killed runner's task, retries with
backoff and a dead letter, lanes, priorities, queues, push wake-ups.

Per-task options go on the decorator (``@task(max_attempts=3, backoff="30s", serial_key="user:{user_id}")``)
or on one call (``.using(serial_key="user:7")``); :class:`WakesTask` carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import clock, engine
from ..conf import wakes_settings
from ..exceptions import InvalidWake, WakeError
from ..models import Wake
from ..timeutil import to_datetime
from ..validation import key
from . import options, results
from .arguments import json_arguments
from .compat import BaseTaskBackend, Task, TaskResult, TaskResultDoesNotExist, task_enqueued
from .exceptions import InvalidTaskOptions
from .kind import TASK_KIND

#: The workspace task wakes are written to unless ``OPTIONS["WORKSPACE"]`` names another.
DEFAULT_WORKSPACE = "tasks"
#: Attempts a task gets unless it or ``OPTIONS["MAX_ATTEMPTS"]`` says otherwise: one, as Django's
#: contract has it (a task that raises is FAILED). A runner killed mid-task does not use one up the
#: first time (it cannot tell whether the task started), so that task runs again.
DEFAULT_MAX_ATTEMPTS = 1


def _run_at(run_after: datetime | None, intent: dict[str, Any]) -> datetime:
    """When a task's wake is due: ``run_after``, or now when it is further back than ``WAKES["PAST_AT_LIMIT"]``.

    A ``run_after`` in the past is ordinary in Django's API ("an hour after sign-up", computed for an
    old account): it runs at once, and is never refused as ``schedule(at=...)`` refuses a time that
    old. The asked ``run_after`` is kept in the intent, so the ``TaskResult`` still reports it.
    """
    now = clock.now()
    if run_after is None:
        return now
    moment = to_datetime(run_after, name="run_after")
    limit = wakes_settings.past_at_limit
    if limit is not None and now - moment > limit:
        intent["run_after"] = moment.isoformat()
        return now
    return moment


@dataclass(frozen=True, kw_only=True)
class WakesTask(Task):  # type: ignore[type-arg]
    """A ``Task`` with django-wakes' options: ``@task(max_attempts=..., backoff=..., serial_key=...)``.

    ``max_attempts``: how often it is started before it is FAILED (default ``OPTIONS["MAX_ATTEMPTS"]``).
    ``backoff``: the wait before the next attempt: a duration (``"30s"``) or ``{"BASE", "FACTOR",
    "MAX"}`` (default: ``WAKES["BACKOFF"]``). ``serial_key``: a lane (tasks of one lane run one at a
    time, in order), or a template filled from the call's arguments (``"account:{account_id}"``).
    ``limit_key``: the key whose ``WAKES["LIMITS"]`` hold its start back (``"crm:{account_id}"``, a template too).
    """

    max_attempts: int | None = None
    backoff: Any = None
    serial_key: str | None = None
    limit_key: str | None = None

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        backoff: Any = None,
        serial_key: str | None = None,
        limit_key: str | None = None,
    ) -> WakesTask:
        """Return a copy with other defaults, django-wakes' options included (``.using(serial_key="user:7")``)."""
        changes: dict[str, Any] = {}
        for name, value in (
            ("priority", priority),
            ("queue_name", queue_name),
            ("run_after", run_after),
            ("backend", backend),
            ("max_attempts", max_attempts),
            ("backoff", backoff),
            ("serial_key", serial_key),
            ("limit_key", limit_key),
        ):
            if value is not None:
                changes[name] = value
        return replace(self, **changes)


class WakesBackend(BaseTaskBackend):
    """Store tasks as wakes for ``runwakes`` to run: ``"BACKEND": "django_wakes.tasks.WakesBackend"`` in ``TASKS``.

    ``OPTIONS``: ``WORKSPACE`` (the workspace its wakes are written to, default ``"tasks"``) and
    ``MAX_ATTEMPTS`` (default 1; a task may ask for more).
    """

    task_class = WakesTask
    #: ``periodic()`` books only tasks whose backend runs them as wakes (it asks this, not the class,
    #: so the declarations module need not import the backend that checks them).
    runs_tasks_as_wakes = True

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - {"WORKSPACE", "MAX_ATTEMPTS"}
        if unknown:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {sorted(unknown)}")
        try:
            self.workspace = key(self.options.get("WORKSPACE", DEFAULT_WORKSPACE), name="WORKSPACE")
            self.max_attempts = (
                options.max_attempts(self.options.get("MAX_ATTEMPTS"), name="MAX_ATTEMPTS") or DEFAULT_MAX_ATTEMPTS
            )
            for queue in self.queues:
                key(queue, name="QUEUES", max_length=Wake._meta.get_field("queue_name").max_length or 100)
        except InvalidWake as exc:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]: {exc}") from exc

    def validate_task(self, task: Task) -> None:  # type: ignore[type-arg]
        """The framework's checks, then django-wakes' options (each refused with :class:`InvalidTaskOptions`)."""
        super().validate_task(task)
        options.max_attempts(getattr(task, "max_attempts", None))
        options.backoff(getattr(task, "backoff", None))
        options.lane_template(getattr(task, "serial_key", None))
        options.lane_template(getattr(task, "limit_key", None), name="limit_key")

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:  # type: ignore[type-arg]
        """Write the task's wake in the caller's transaction and return its ``TaskResult`` (READY)."""
        self.validate_task(task)
        call_args, call_kwargs = self.arguments_as_json(args, kwargs)
        intent: dict[str, Any] = {
            "task": task.module_path,
            "args": call_args,
            "kwargs": call_kwargs,
            "backend": self.alias,
        }
        backoff = options.backoff(getattr(task, "backoff", None))
        if backoff is not None:
            intent["backoff"] = backoff
        if task.run_after is not None:
            intent["deferred"] = True
            if timezone.is_naive(task.run_after):  # USE_TZ = False: local time in TIME_ZONE, as Django reads it
                intent["naive"] = True
        own = options.chosen(task, _declared(task))
        if own:
            intent["using"] = own
        wake = engine.schedule(
            workspace_id=self.workspace,
            kind=TASK_KIND,
            at=_run_at(task.run_after, intent),
            intent=intent,
            priority=task.priority,
            queue_name=task.queue_name,
            max_attempts=getattr(task, "max_attempts", None) or self.max_attempts,
            **options.filled_keys(task, call_args, call_kwargs),
        )
        result = results.task_result(wake, task=task, attempts=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def arguments_as_json(self, args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments as the JSON the task will get back, or :class:`InvalidTaskArguments`.

        What Django's ``normalize_json`` accepts, keys as JSON writes them (``{1: "one"}`` is given to
        the task as ``{"1": "one"}``); NaN and infinities refused (:mod:`.arguments` says why).
        """
        return json_arguments(args, kwargs)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """System checks (the framework runs them): the app is installed, the periodic tasks can be booked."""
        from .periodic_tasks import from_settings, wanted

        messages: list[CheckMessage] = []
        if not apps.is_installed("django_wakes"):
            messages.append(
                Error(
                    f"TASKS[{self.alias!r}] uses django_wakes.tasks.WakesBackend, but django_wakes is not installed",
                    hint="Add 'django_wakes' to INSTALLED_APPS.",
                    id="django_wakes.tasks.E001",
                )
            )
            return messages
        try:
            from_settings()
        except Exception:  # noqa: BLE001 - WAKES['PERIODIC'] itself is reported by django_wakes.E014, once
            return messages
        try:
            wanted()
        except WakeError as exc:
            messages.append(
                Error(
                    f"a periodic task cannot be booked: {exc}",
                    hint="Fix the periodic() call or the WAKES['PERIODIC'] entry (docs/tasks.md).",
                    id="django_wakes.tasks.E002",
                )
            )
        return messages

    def get_result(self, result_id: str) -> TaskResult:  # type: ignore[type-arg]
        """Read the task's wake now (from any process); ``TaskResultDoesNotExist`` if there is none."""
        wake_id = _wake_id(result_id)
        wake = (
            Wake.objects.using(engine.db_alias()).filter(pk=wake_id, kind=TASK_KIND).first()
            if wake_id is not None
            else None
        )
        if wake is None:
            raise TaskResultDoesNotExist(result_id)
        return results.task_result(wake)


def _declared(task: Task) -> Task | None:  # type: ignore[type-arg]
    """The task as decorated (what the runner imports), or ``None`` if it cannot be imported."""
    try:
        declared = import_string(task.module_path)
    except Exception:  # noqa: BLE001 - a task the runner cannot import fails there, with its own error
        return None
    return declared if isinstance(declared, Task) else None


def _wake_id(result_id: Any) -> int | None:
    """A result id is the wake's id as text; anything else names no result."""
    if not isinstance(result_id, str | int) or isinstance(result_id, bool):
        return None
    text = str(result_id)
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value < 2**63 else None


__all__ = ["DEFAULT_MAX_ATTEMPTS", "DEFAULT_WORKSPACE", "InvalidTaskOptions", "WakesBackend", "WakesTask"]
