"""What the rest of the package needs to know of tasks without importing a Tasks framework."""

from __future__ import annotations

from importlib.util import find_spec

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
