"""django-wakes as a backend of Django's Tasks framework (``django.tasks``, or the ``django-tasks`` backport).

::

    TASKS = {"default": {"BACKEND": "django_wakes.tasks.WakesBackend"}}

Names are imported lazily (PEP 562), so importing this package needs no Tasks framework until one
of them is used; :func:`framework_available` says whether one is installed.

* :class:`WakesBackend` — the backend (``backend.py``); :class:`WakesTask` — its task class, with
  ``max_attempts``, ``backoff`` and ``serial_key`` options;
* :func:`task` — the framework's ``@task`` with those options, importable under any backend (``decorator.py``);
* :func:`periodic` — declare a periodic task; :func:`sync_periodic` — reconcile the declarations
  with the database (``periodic_tasks.py``);
* ``results.py`` — a task's wake read as a ``TaskResult``; ``sink.py`` — the sink that runs tasks.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import WakesBackend, WakesTask
    from .decorator import task
    from .periodic_tasks import PeriodicTask, SyncReport, periodic, sync_periodic

__all__ = [
    "TASK_KIND",
    "PeriodicTask",
    "SyncReport",
    "WakesBackend",
    "WakesTask",
    "framework_available",
    "periodic",
    "sync_periodic",
    "sync_periodic_on_boot",
    "task",
]

from .kind import TASK_KIND, framework_available

_LAZY = {
    "WakesBackend": "backend",
    "WakesTask": "backend",
    "PeriodicTask": "periodic_tasks",
    "SyncReport": "periodic_tasks",
    "periodic": "periodic_tasks",
    "sync_periodic": "periodic_tasks",
    "sync_periodic_on_boot": "boot",
    "task": "decorator",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
