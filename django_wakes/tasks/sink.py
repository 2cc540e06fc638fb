"""The sink behind kind ``django_wakes.task``: run the task a wake names, hand its return value back.

A task that returns settles its wake as fired with the (JSON) return value as ``output``. A task
that raises is a failed attempt: retried after the task's ``backoff`` (or ``WAKES["BACKOFF"]``)
while attempts remain, then FAILED (the wake is dead) with the exception's class path and traceback
on the attempt. The framework's ``task_started`` and ``task_finished`` signals are sent as Django's
own backends send them; ``task_finished`` only when the task is finished (succeeded, or failed for good),
and only once that is stored: after the settle commits, so a receiver's ``get_result()`` sees it.

An ``async def`` task is awaited to its end on an event loop of its own in the runner's fire thread.
"""

from __future__ import annotations

import traceback
from typing import Any

from .. import clock, signals
from ..engine.interrupts import by_signal
from ..exceptions import InvalidWake
from ..models import Wake
from ..sinks import Done, Retry, registry
from ..validation import json_value
from . import TASK_KIND, options, results
from .arguments import string_keys
from .compat import TaskContext, TaskError, TaskResultStatus, normalize_json, task_finished, task_started


def run_task(wake: Wake, result: dict[str, Any]) -> Done | Retry | None:
    """Run the task of ``wake``; return its outcome for the engine to settle under the claim's fence."""
    task = results.load_task(wake)
    sender = type(task.get_backend())
    task_result = results.task_result(wake, task=task)
    task_started.send(sender=sender, task_result=task_result)
    try:
        if task.takes_context:
            returned = task.call(TaskContext(task_result=task_result), *task_result.args, **task_result.kwargs)
        else:
            returned = task.call(*task_result.args, **task_result.kwargs)
        value = _storable(normalize_json(returned))
    except BaseException as exc:  # sys.exit() in a task is its failure, like any exception (engine/interrupts.py)
        if by_signal(exc):
            raise
        if wake.attempts >= wake.max_attempts:
            results.set_status(task_result, TaskResultStatus.FAILED, finished_at=results.local(clock.now()))
            task_result.errors.append(
                TaskError(
                    exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    traceback=_traceback(exc),
                )
            )
            _finish_when_stored(wake, sender, task_result)
            raise
        spec = (wake.intent or {}).get("backoff")
        if spec is not None:
            return Retry(at=clock.now() + options.backoff_delay(spec, wake.attempts), error=exc)
        raise
    results.set_status(
        task_result, TaskResultStatus.SUCCESSFUL, finished_at=results.local(clock.now()), _return_value=value
    )
    _finish_when_stored(wake, sender, task_result)
    # ``None`` is what the wake's output already holds: returning nothing spares the settle a write per task.
    return Done(output=value) if value is not None else None


#: Where a finished task's ``(backend class, TaskResult)`` waits on its wake for the settle to commit.
FINISHED = "_django_wakes_task_finished"


def _finish_when_stored(wake: Wake, sender: type, task_result: Any) -> None:
    """Send ``task_finished`` once the engine has stored this outcome (see :func:`_send_finished`)."""
    setattr(wake, FINISHED, (sender, task_result))


def _send_finished(sender: Any, wake: Wake, **kwargs: Any) -> None:
    """``wake_fired`` / ``wake_dead``, sent when the settle commits: now ``task_finished`` may go out.

    The engine hands these signals the very ``Wake`` the sink ran with, so the finished result
    waiting on it is this attempt's. A settle refused because another runner took the wake over sends
    neither, and so no ``task_finished`` (that runner's attempt sends its own).
    """
    finished = wake.__dict__.pop(FINISHED, None)
    if finished is not None:
        backend_class, task_result = finished
        task_finished.send(sender=backend_class, task_result=task_result)


def _storable(value: Any) -> Any:
    """The return value as it will be stored: JSON, object keys as JSON has them (``{1: "one"}`` is stored
    ``{"1": "one"}``, as Django's backends store it); a ``TypeError`` fails the attempt, as in Django's backends.
    """
    try:
        return json_value(string_keys(value, name="the task's return value"), name="the task's return value")
    except (InvalidWake, ValueError) as exc:
        raise TypeError(str(exc)) from exc


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def register() -> None:
    """Register the task sink (``AppConfig.ready`` calls this when a Tasks framework is importable)."""
    registry.register(TASK_KIND, run_task, replace=True)
    signals.wake_fired.connect(_send_finished, dispatch_uid="django_wakes.tasks.sink.finished")
    signals.wake_dead.connect(_send_finished, dispatch_uid="django_wakes.tasks.sink.dead")
