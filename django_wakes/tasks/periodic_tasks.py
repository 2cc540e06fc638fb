"""Periodic tasks: declared in code, reconciled with the database at deploy.

Declare them in an app's ``wakes.py`` (autodiscovered at start-up)::

    from django_wakes.tasks import periodic
    from myapp.tasks import send_digest

    periodic(send_digest, cron="0 9 * * MON-FRI", tz="Europe/Paris", args=["daily"])

Each declaration is one recurring chain of task wakes (a cron or interval chain: each occurrence is
its own wake, the next one booked when it settles). :func:`sync_periodic` (``manage.py wakes
sync-periodic``, and ``runwakes`` on boot) makes the chains match the declarations: a new one is
booked, a changed one (any of its settings) is ended and booked again, one no longer declared is
ended. It holds one row lock for the whole comparison, so runners booting together book a chain once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from django.db import transaction
from django.utils.module_loading import import_string

from .. import clock, engine
from ..conf import wakes_settings
from ..durations import Duration, parse_duration
from ..engine.shared import lock_or_create, retry_rolled_back
from ..exceptions import InvalidWake
from ..models import LIVE_STATES, Wake, WorkspaceLock
from ..querysets import WakeQuerySet
from ..schedules import recurrence
from ..validation import key
from . import options
from .compat import Task
from .exceptions import PeriodicTaskError
from .kind import TASK_KIND

if TYPE_CHECKING:
    from .backend import WakesBackend


#: The row :func:`sync_periodic` locks (a :class:`~django_wakes.models.WorkspaceLock`): one sync at a time.
SYNC_LOCK = "django_wakes.tasks.periodic"


@dataclass(frozen=True)
class PeriodicTask:
    """One declared periodic task: what :func:`sync_periodic` books as a chain."""

    name: str
    task: str  # the task's dotted path
    backend: str
    cron: str | None
    every_seconds: float | None
    tz: str | None
    catch_up: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    queue_name: str
    serial_key: str | None
    max_attempts: int
    backoff: dict[str, float] | None
    limit_key: str | None = None

    @property
    def fingerprint(self) -> str:
        """A digest of every setting: a declaration whose fingerprint changed is re-planned.

        ``limit_key`` counts only when set, so declarations made before it existed keep their fingerprint.
        """
        settings = {k: v for k, v in self.__dict__.items() if not (k == "limit_key" and v is None)}
        text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]


class PeriodicRegistry:
    """The periodic tasks declared in this process, by name."""

    def __init__(self) -> None:
        self._declared: dict[str, PeriodicTask] = {}
        self._lock = threading.Lock()

    def add(self, entry: PeriodicTask) -> PeriodicTask:
        with self._lock:
            existing = self._declared.get(entry.name)
            if existing is not None and existing != entry:
                raise PeriodicTaskError(
                    f"a different periodic task is already declared as {entry.name!r}: give one of them name=..."
                )
            self._declared[entry.name] = entry
        return entry

    def remove(self, name: str) -> None:
        with self._lock:
            self._declared.pop(name, None)

    def all(self) -> dict[str, PeriodicTask]:
        with self._lock:
            return dict(self._declared)

    def snapshot(self) -> dict[str, PeriodicTask]:
        """A copy to hand back to :meth:`restore` (tests)."""
        return self.all()

    def restore(self, snapshot: dict[str, PeriodicTask]) -> None:
        with self._lock:
            self._declared = dict(snapshot)


declared = PeriodicRegistry()


def periodic(
    task: Task,  # type: ignore[type-arg]
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    catch_up: str = "latest",
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    name: str | None = None,
) -> PeriodicTask:
    """Declare that ``task`` runs on ``cron`` (in ``tz``) or ``every`` interval, with these arguments.

    ``catch_up``: what a chain does with the runs missed while no runner was up: ``"latest"`` (the
    default: run once for them), ``"replay"`` (run each) or ``"skip"``. ``name`` (default: the task's
    path) tells two declarations of one task apart. The task's priority, queue, lane and attempts are
    the task's own (``task.using(...)`` first to change them). Nothing is written here: the chain is
    booked by :func:`sync_periodic`. Raise :class:`PeriodicTaskError` (or an ``InvalidWake``) for a
    declaration that could not run.
    """
    return declared.add(
        _entry(task, cron=cron, every=every, tz=tz, catch_up=catch_up, args=args, kwargs=kwargs, name=name)
    )


def _entry(
    task: Any,
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    catch_up: str = "latest",
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    name: str | None = None,
) -> PeriodicTask:
    """Check one declaration (without writing anything) and return what :func:`sync_periodic` books."""
    if not isinstance(task, Task):
        raise PeriodicTaskError(f"periodic() takes a task (a function decorated with @task), not {task!r}")
    backend = cast("WakesBackend", task.get_backend())
    if not getattr(backend, "runs_tasks_as_wakes", False):
        raise PeriodicTaskError(
            f"{task.module_path} runs on the {task.backend!r} backend, which is not django_wakes.tasks.WakesBackend"
        )
    if task.run_after is not None:
        raise PeriodicTaskError("a periodic task's runs come from its schedule: drop run_after")
    if (cron is None) == (every is None):
        raise PeriodicTaskError("periodic() needs exactly one of cron= or every=")
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict | None):
        raise PeriodicTaskError("periodic(): args must be a list and kwargs a dict")
    recurrence.plan_chain(
        now=clock.now(), cron=cron, every=every, tz=tz, start_at=None, end_at=None, catch_up=catch_up
    )  # refuses a bad cron, interval, time zone or catch-up now, at start-up, not at the next sync
    call_args, call_kwargs = backend.arguments_as_json(list(args), dict(kwargs or {}))
    return PeriodicTask(
        name=key(name if name is not None else task.module_path, name="name"),
        task=task.module_path,
        backend=task.backend,
        cron=cron,
        every_seconds=parse_duration(every, name="every").total_seconds() if every is not None else None,
        tz=tz,
        catch_up=catch_up,
        args=call_args,
        kwargs=call_kwargs,
        priority=task.priority,
        queue_name=task.queue_name,
        max_attempts=getattr(task, "max_attempts", None) or backend.max_attempts,
        backoff=options.backoff(getattr(task, "backoff", None)),
        **options.filled_keys(task, call_args, call_kwargs),
    )


@dataclass
class SyncReport:
    """What one :func:`sync_periodic` did, by declaration name."""

    booked: list[str] = field(default_factory=list)
    replanned: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.booked or self.replanned or self.ended)


def sync_periodic() -> SyncReport:
    """Make the database's periodic chains match the declarations; idempotent, safe to run concurrently."""
    return retry_rolled_back("syncing periodic tasks", _sync)


#: The keys of one ``WAKES["PERIODIC"]`` entry (``task`` and one of ``cron``/``every`` are required).
SETTINGS_KEYS = frozenset({"task", "cron", "every", "tz", "catch_up", "args", "kwargs", "name"})


def from_settings() -> dict[str, PeriodicTask]:
    """The periodic tasks of ``WAKES["PERIODIC"]`` (a list of dicts whose ``task`` is a dotted path)."""
    table = wakes_settings.get("PERIODIC") or []
    if not isinstance(table, list | tuple):
        raise PeriodicTaskError("WAKES['PERIODIC'] must be a list of dicts")
    found: dict[str, PeriodicTask] = {}
    for n, spec in enumerate(table):
        where = f"WAKES['PERIODIC'][{n}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("task"), str) or set(spec) - SETTINGS_KEYS:
            raise PeriodicTaskError(
                f"{where} must be a dict with 'task' (a dotted path) and some of {sorted(SETTINGS_KEYS)}"
            )
        try:
            task = import_string(spec["task"])
        except ImportError as exc:
            raise PeriodicTaskError(f"{where}: cannot import {spec['task']!r}: {exc}") from exc
        entry = _entry(task, **{k: v for k, v in spec.items() if k != "task"})
        if entry.name in found and found[entry.name] != entry:
            raise PeriodicTaskError(f"{where}: another entry is named {entry.name!r}")
        found[entry.name] = entry
    return found


def wanted() -> dict[str, PeriodicTask]:
    """Every declared periodic task: ``periodic()`` calls and ``WAKES["PERIODIC"]``, by name."""
    entries = declared.all()
    for name, entry in from_settings().items():
        if name in entries and entries[name] != entry:
            raise PeriodicTaskError(f"{name!r} is declared both by periodic() and in WAKES['PERIODIC'], differently")
        entries[name] = entry
    return entries


def _live_chains(using: str) -> WakeQuerySet:
    """The live occurrences of periodic tasks' chains (only periodic tasks make chains of task wakes)."""
    return Wake.objects.using(using).filter(kind=TASK_KIND, chain_id__isnull=False, state__in=LIVE_STATES)


def anything_to_sync() -> bool:
    """Whether a sync could change anything: something is declared, or a periodic chain is live.

    ``runwakes`` asks first, so a project without periodic tasks pays one read at boot, and no lock.
    """
    return bool(wanted()) or _live_chains(engine.db_alias()).exists()


def _sync() -> SyncReport:
    using = engine.db_alias()
    report = SyncReport()
    wanted_now = wanted()
    with transaction.atomic(using=using):
        lock_or_create(WorkspaceLock.objects.using(using).all(), {"workspace_id": SYNC_LOCK})
        live: dict[str, list[Wake]] = {}
        for wake in _live_chains(using).order_by("id"):
            name = (wake.intent or {}).get("periodic")
            if isinstance(name, str):
                live.setdefault(name, []).append(wake)
        for name, wakes in sorted(live.items()):
            entry = wanted_now.get(name)
            # The chain is its open recurring row. Not a one-shot beside it (an operator's trigger now or
            # backfill: it books nothing after it), nor an occurrence whose chain was closed while it fired
            # or that was requeued (it finishes and books no successor): neither keeps the task scheduled.
            chains = [w for w in wakes if w.is_recurring and w.end_at is None]
            if entry is not None and chains and all(_fingerprint(w) == entry.fingerprint for w in chains):
                report.kept.append(name)
                continue
            for wake in wakes:
                if entry is None or wake in chains or _fingerprint(wake) != entry.fingerprint:
                    engine.cancel(wake.pk)  # pending: cancelled; firing: its chain books no successor
            if entry is None:
                report.ended.append(name)
            else:
                booked = _book(entry)
                if any(w.paused_at is not None for w in chains) and booked.chain_id:
                    engine.pause_chain(booked.chain_id)  # an operator paused the task: a deploy does not resume it
                (report.replanned if chains else report.booked).append(name)
        for name, entry in sorted(wanted_now.items()):
            if name not in live:
                _book(entry)
                report.booked.append(name)
    return report


def _fingerprint(wake: Wake) -> str | None:
    value = (wake.intent or {}).get("periodic_fingerprint")
    return value if isinstance(value, str) else None


def _book(entry: PeriodicTask) -> Wake:
    from .compat import task_backends

    backend = task_backends[entry.backend]
    intent: dict[str, Any] = {
        "task": entry.task,
        "args": entry.args,
        "kwargs": entry.kwargs,
        "backend": entry.backend,
        "periodic": entry.name,
        "periodic_fingerprint": entry.fingerprint,
    }
    if entry.backoff is not None:
        intent["backoff"] = entry.backoff
    try:
        return engine.schedule(
            workspace_id=getattr(backend, "workspace", "tasks"),
            kind=TASK_KIND,
            cron=entry.cron,
            every=timedelta(seconds=entry.every_seconds) if entry.every_seconds is not None else None,
            tz=entry.tz,
            catch_up=entry.catch_up,
            intent=intent,
            priority=entry.priority,
            queue_name=entry.queue_name,
            serial_key=entry.serial_key,
            max_attempts=entry.max_attempts,
            limit_key=entry.limit_key,
        )
    except InvalidWake as exc:
        raise PeriodicTaskError(f"periodic task {entry.name!r} could not be booked: {exc}") from exc
