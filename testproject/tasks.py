"""Tasks of the testproject, written against the standard ``django.tasks`` API only (run by django-wakes).

``tests/test_tasks*.py`` enqueue them in-process and through real ``runwakes`` processes; what they
did is written to ``WAKES_PROBE_DIR`` (one JSON line per run) so another process can read it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskContext, task


class TaskFailure(Exception):
    """What :func:`fail` raises: a class with a dotted path a test can look for."""


def _probe(name: str, **fields: Any) -> None:
    directory = os.environ.get("WAKES_PROBE_DIR")
    if directory:
        line = json.dumps({"task": name, "pid": os.getpid(), "at": time.time(), **fields})
        with (Path(directory) / f"task-{name}-{os.getpid()}.jsonl").open("a", encoding="utf-8") as out:
            out.write(line + "\n")


@task
def add(a: int, b: int) -> int:
    _probe("add", a=a, b=b)
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str, *, subject: str = "") -> dict[str, str]:
    _probe("send_email", to=to)
    return {"sent_to": to, "subject": subject}


@task
def fail(message: str) -> None:
    _probe("fail", message=message)
    raise TaskFailure(message)


@task
def unstorable() -> object:
    return object()


@task(takes_context=True, max_attempts=3, backoff="1s")
def flaky(context: TaskContext, fail_until: int) -> dict[str, Any]:
    """Fail until attempt ``fail_until``, then return what the context said."""
    _probe("flaky", attempt=context.attempt)
    if context.attempt < fail_until:
        raise TaskFailure(f"attempt {context.attempt} fails")
    return {"attempt": context.attempt, "result_id": context.task_result.id}


@task(takes_context=True)
def context_echo(context: TaskContext) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "workers": list(context.task_result.worker_ids)}


@task
async def async_double(value: int) -> int:
    await asyncio.sleep(0)
    _probe("async_double", value=value)
    return value * 2


@task(serial_key="account:{account}")
def lane_step(account: str, step: int) -> int:
    _probe("lane_step", account=account, step=step)
    return step


@task
def record(label: str) -> str:
    _probe("record", label=label)
    return label


@task
def slow(seconds: float, label: str) -> str:
    """Sleep (in a runner that a test kills meanwhile), recording when it started and ended."""
    _probe("slow", phase="start", label=label)
    time.sleep(seconds)
    _probe("slow", phase="end", label=label)
    return label


@task
def hang_once(label: str) -> str:
    """Hang (until killed) the first time ``label`` runs; return at once when run again."""
    marker = Path(os.environ.get("WAKES_PROBE_DIR", "/tmp")) / f"hang-once-{label}"  # noqa: S108
    first = not marker.exists()
    _probe("hang_once", label=label, first=first)
    if first:
        marker.touch()
        time.sleep(600)
    return label


@task
def script_exit(how: str) -> None:
    """Code lifted from a script: ``sys.exit()`` (``how="exit"``) or ``raise KeyboardInterrupt``."""
    _probe("script_exit", how=how)
    if how == "KeyboardInterrupt":
        raise KeyboardInterrupt
    sys.exit(1)


@task
async def async_script_exit() -> None:
    """An ``async def`` task that calls ``sys.exit()`` after an ``await``."""
    await asyncio.sleep(0)
    _probe("async_script_exit")
    sys.exit(1)


@task
def int_keys() -> dict[int, str]:
    """A dict with keys JSON writes as strings: stored ``{"1": "one"}``, as Django's backends store it."""
    return {1: "one", 2: "two"}


@task(queue_name="reports")
def report(name: str) -> str:
    _probe("report", name=name)
    return name


def not_a_task() -> None:
    """A plain function: a periodic entry naming it is refused."""


@task(limit_key="crm:{account}")
def crm_sync(account: str) -> str:
    """A task under the limits of its account's key (``WAKES["LIMITS"]`` entry ``crm:*``; tests/test_limits.py)."""
    _probe("crm_sync", account=account)
    return account
