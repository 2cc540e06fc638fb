"""django-wakes as a backend of Django's Tasks framework (``django.tasks``, or the ``django-tasks`` backport).

::

    TASKS = {"default": {"BACKEND": "django_wakes.tasks.WakesBackend"}}

Names are imported lazily (PEP 562), so importing this package needs no Tasks framework until one
of them is used; :func:`framework_available` says whether one is installed.

* :class:`WakesBackend` — the backend (``backend.py``); :class:`WakesTask` — its task class, with
  ``max_attempts``, ``backoff`` and ``serial_key`` options;
* :func:`periodic` — declare a periodic task; :func:`sync_periodic` — reconcile the declarations
  with the database (``periodic_tasks.py``);
* ``results.py`` — a task's wake read as a ``TaskResult``; ``sink.py`` — the sink that runs tasks.
"""

from __future__ import annotations

import logging
from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import WakesBackend, WakesTask
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
]

_LAZY = {
    "WakesBackend": "backend",
    "WakesTask": "backend",
    "PeriodicTask": "periodic_tasks",
    "SyncReport": "periodic_tasks",
    "periodic": "periodic_tasks",
    "sync_periodic": "periodic_tasks",
}

#: The kind of every task's wake (the admin and ``wakes status`` recognise tasks by it).
TASK_KIND = "django_wakes.task"


def framework_available() -> bool:
    """Whether ``django.tasks`` (Django 6+) or the ``django_tasks`` backport can be imported."""
    try:
        if find_spec("django.tasks") is not None:
            return True
    except ModuleNotFoundError:  # pragma: no cover
        pass
    return find_spec("django_tasks") is not None


def sync_periodic_on_boot() -> None:
    """Reconcile periodic tasks as ``runwakes`` starts; a failure is logged, never stops the runner.

    Nothing to do without a Tasks framework, nor when nothing is declared and no periodic chain is
    live (one read). A bad declaration is logged as an error, a database that stays away as a
    warning: the runner still serves everything else, and the next boot (or ``manage.py wakes
    sync-periodic``) tries again.
    """
    if not framework_available():
        return
    from ..engine import TRANSIENT_ERRORS
    from ..exceptions import WakeError
    from .periodic_tasks import anything_to_sync, sync_periodic

    logger = logging.getLogger("django_wakes")
    try:
        report = sync_periodic() if anything_to_sync() else None
    except WakeError as exc:
        logger.error("periodic tasks were not synced: %s", exc)
        return
    except TRANSIENT_ERRORS as exc:
        logger.warning("periodic tasks were not synced (database unavailable: %s); the next boot tries again", exc)
        return
    if report is not None and report.changed:
        logger.info(
            "periodic tasks synced: booked=%s replanned=%s ended=%s kept=%d",
            ",".join(report.booked) or "-",
            ",".join(report.replanned) or "-",
            ",".join(report.ended) or "-",
            len(report.kept),
        )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
