"""The one place that knows where the Tasks framework lives: ``django.tasks`` (Django 6+) or the backport.

Django 6 ships ``django.tasks``; on Django 5.2 the ``django-tasks`` package (``pip install
django-wakes[tasks]``) backports the same API as ``django_tasks``. Everything else in
:mod:`django_wakes.tasks` imports these names from here, so the rest of the code reads the same on both.
The two differ in one name only: Django calls the invalid-task error ``InvalidTask``, the backport
``InvalidTaskError``.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING

__all__ = [
    "BaseTaskBackend",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "available",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _framework() -> str | None:
    """The importable Tasks framework, Django's own first; ``None`` when neither is installed."""
    if find_spec("django.tasks") is not None:
        return "django.tasks"
    if find_spec("django_tasks") is not None:
        return "django_tasks"
    return None


#: ``"django.tasks"``, ``"django_tasks"`` (the backport) or ``None``.
FRAMEWORK = _framework()


def available() -> bool:
    """Whether a Tasks framework is importable."""
    return FRAMEWORK is not None


if TYPE_CHECKING or FRAMEWORK == "django.tasks":
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
elif FRAMEWORK == "django_tasks":
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    raise ImportError(
        "django_wakes.tasks needs the Tasks framework: Django 6+, or on Django 5.2 the backport "
        "(pip install 'django-wakes[tasks]')"
    )
