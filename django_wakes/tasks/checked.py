"""Django's in-memory Tasks backends, checking a call's arguments as ``WakesBackend`` does: for a project's tests.

Code that enqueues on Django's ``ImmediateBackend`` in its tests and on ``WakesBackend`` in production
meets two differences there (:mod:`django_wakes.tasks.arguments`): the task gets a dict's keys as JSON
writes them (``{"1": "one"}``, not ``{1: "one"}``), and NaN or an infinity is refused at ``enqueue()``.
These subclasses make both happen in the tests too: each call's arguments go through the same check
and reach the task (or the stored result) as ``WakesBackend`` would hand them over::

    # settings for tests
    TASKS = {"default": {"BACKEND": "django_wakes.tasks.checked.ImmediateBackend"}}
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .arguments import json_arguments
from .compat import FRAMEWORK

if TYPE_CHECKING:
    from django.tasks.backends.dummy import DummyBackend as _Dummy
    from django.tasks.backends.immediate import ImmediateBackend as _Immediate
else:
    _backends = f"{FRAMEWORK}.backends"
    _Dummy = import_module(f"{_backends}.dummy").DummyBackend
    _Immediate = import_module(f"{_backends}.immediate").ImmediateBackend

__all__ = ["DummyBackend", "ImmediateBackend"]


class ImmediateBackend(_Immediate):
    """Django's ``ImmediateBackend``; arguments checked and passed as ``WakesBackend`` passes them."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        call_args, call_kwargs = json_arguments(args, kwargs)
        return super().enqueue(task, call_args, call_kwargs)


class DummyBackend(_Dummy):
    """Django's ``DummyBackend``; arguments checked and kept as ``WakesBackend`` stores them."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        call_args, call_kwargs = json_arguments(args, kwargs)
        return super().enqueue(task, call_args, call_kwargs)
