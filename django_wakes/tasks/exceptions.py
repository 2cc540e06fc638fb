"""What the Tasks backend raises on purpose, each also the kind of error the Tasks framework documents.

Each class is a :class:`~django_wakes.exceptions.WakeError` (so code that catches django-wakes' errors
catches these) and, where the standard API names one, that error too: code written against
``django.tasks`` catches what it expects.
"""

from __future__ import annotations

from ..exceptions import InvalidIntent, InvalidWake, WakeError
from .compat import InvalidTask


class InvalidTaskArguments(InvalidIntent, TypeError):
    """A task's arguments (or a lane template filled from them) are not plain JSON; nothing was enqueued.

    A ``TypeError`` as well, which is what Django's own backends raise for an argument JSON cannot hold.
    """


class InvalidTaskOptions(InvalidWake, InvalidTask):
    """A task's django-wakes options (``max_attempts``, ``backoff``, ``serial_key``) are wrong."""


class PeriodicTaskError(WakeError):
    """A periodic task declaration is wrong, or a second, different one uses the same name."""


class TaskInterrupted(WakeError):
    """The runner running this task died (or lost its lease) mid-task: recorded as the attempt's error.

    Never raised; its dotted path is the ``exception_class_path`` of the :class:`TaskError` that says so.
    """


class TaskOutcomeInvalid(WakeError):
    """The task's attempt failed outside the task function (its return value could not be stored).

    Never raised; its dotted path names such an attempt's error when no exception class was recorded.
    """
