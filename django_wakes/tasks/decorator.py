"""``django_wakes.tasks.task``: the framework's ``@task`` that also takes django-wakes' options, under any backend.

The framework's own decorator hands extra arguments to the backend's ``task_class``: under
``WakesBackend`` that is :class:`~django_wakes.tasks.WakesTask`, which takes ``max_attempts``,
``backoff``, ``serial_key`` and ``limit_key``; under another backend (``ImmediateBackend`` in test settings, a
different queue in one deployment) the plain ``Task`` refuses them, and the module that declares the
task fails to import with a ``TypeError``. On Django 6.0 the framework's decorator takes no extra
argument at all. This one builds the task with the framework's decorator, then adds the options
when the backend's task class has them; under another backend they are left out (the task runs
once, in no lane, as that backend runs every task), so the same code imports everywhere.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from .compat import Task
from .compat import task as framework_task

logger = logging.getLogger("django_wakes")


def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int | None = None,
    queue_name: str | None = None,
    backend: str | None = None,
    takes_context: bool = False,
    max_attempts: int | None = None,
    backoff: Any = None,
    serial_key: str | None = None,
    limit_key: str | None = None,
) -> Any:
    """Declare a task as ``django.tasks.task`` does, with django-wakes' options where the backend takes them.

    ``priority``, ``queue_name``, ``backend`` and ``takes_context`` are the framework's (its defaults
    when left out). ``max_attempts``, ``backoff``, ``serial_key`` and ``limit_key`` are :class:`WakesTask`'s
    (docs/tasks.md); a backend whose task class lacks them gets the task without them.
    """
    standard: dict[str, Any] = {"takes_context": takes_context}
    for name, value in (("priority", priority), ("queue_name", queue_name), ("backend", backend)):
        if value is not None:
            standard[name] = value
    ours: dict[str, Any] = {
        name: value
        for name, value in (
            ("max_attempts", max_attempts),
            ("backoff", backoff),
            ("serial_key", serial_key),
            ("limit_key", limit_key),
        )
        if value is not None
    }

    def wrapper(func: Callable[..., Any]) -> Task:  # type: ignore[type-arg]
        made: Task = framework_task(**standard)(func)  # type: ignore[type-arg]
        if not ours:
            return made
        fields = {field.name for field in dataclasses.fields(made)}
        if not set(ours) <= fields:
            logger.debug(
                "task %s: backend %r takes no %s; left out", made.module_path, made.backend, ", ".join(sorted(ours))
            )
            return made
        return dataclasses.replace(made, **ours)

    if function is not None:
        return wrapper(function)
    return wrapper
