"""The sink registry (what firing a wake of a given ``kind`` does) and the outcomes a sink may return.

A sink is a plain callable ``fn(wake, result)``, or an ``async def`` one (it is awaited to the end:
:func:`call_sink`). Returning ``None`` (or anything that is not an outcome below) settles the wake as
fired; raising is a failed attempt, retried with backoff.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.utils.module_loading import import_string

from .conf import call_session_hook, wakes_settings
from .exceptions import AlreadyRegistered, NotRegistered

if TYPE_CHECKING:
    from .models import Wake

Sink = Callable[["Wake", dict[str, Any]], Any]

SESSION_TURN = "session_turn"

logger = logging.getLogger("django_wakes")


class _Keep:
    """The default of ``scratch=``: leave the wake's scratch as it is."""

    def __repr__(self) -> str:
        return "KEEP"


#: ``scratch=KEEP`` (the default) leaves the wake's scratch as it was; any JSON value replaces it.
KEEP: Any = _Keep()


@dataclass(frozen=True)
class Retry:
    """Fail this attempt on purpose and fire again at ``at`` (counts as an attempt).

    ``error``: the exception that failed it, recorded like a raised one (class path and traceback)
    while the sink still picks the time of the next attempt (the Tasks backend's per-task backoff).
    """

    at: datetime | int | float | None = None
    reason: str = ""
    scratch: Any = KEEP
    error: BaseException | None = None


@dataclass(frozen=True)
class Defer:
    """Not now: fire again at ``until`` without counting an attempt ("the session is busy")."""

    until: datetime | int | float | timedelta | str
    scratch: Any = KEEP


@dataclass(frozen=True)
class Stop:
    """Settle this occurrence as fired and end its recurring chain (no further occurrences)."""

    reason: str = ""
    scratch: Any = KEEP
    output: Any = KEEP


@dataclass(frozen=True)
class Done:
    """Settle as fired (like returning ``None``), writing ``scratch`` and ``output`` in the same fenced transaction.

    ``output`` (any JSON value) is kept on the wake as what firing produced: operators see it in the
    admin, and the Django Tasks backend returns it as the task's return value.
    """

    scratch: Any = KEEP
    output: Any = KEEP


class SinkRegistry:
    """Map ``kind`` strings to sink callables.

    Registration normally happens at start-up (``AppConfig.ready`` loads ``WAKES["SINKS"]`` and
    autodiscovers ``wakes.py`` modules); the runner asks :meth:`kinds` each pass, so registering a
    sink later makes the next pass fire the wakes that were waiting for it.
    """

    def __init__(self) -> None:
        self._sinks: dict[str, Sink] = {}
        # WAKES["SINKS"] entries that did not load at start-up: kind -> why (what E005 reports).
        self._unloaded: dict[str, str] = {}
        self._lock = threading.Lock()

    def register(self, kind: str, fn: Sink, *, replace: bool = False) -> Sink:
        if not isinstance(kind, str) or not kind:
            raise ValueError("kind must be a non-empty string")
        if kind == SESSION_TURN:
            raise AlreadyRegistered("'session_turn' is built in; configure WAKES['SPAWN_TURN'] instead")
        with self._lock:
            if kind in self._sinks and not replace and self._sinks[kind] is not fn:
                raise AlreadyRegistered(f"a sink is already registered for kind {kind!r}")
            self._sinks[kind] = fn
        return fn

    def unregister(self, kind: str) -> None:
        with self._lock:
            if kind not in self._sinks:
                raise NotRegistered(f"no sink registered for kind {kind!r}")
            del self._sinks[kind]

    def reset(self) -> None:
        """Forget every registered sink (for tests)."""
        with self._lock:
            self._sinks.clear()
            self._unloaded.clear()

    def snapshot(self) -> dict[str, Sink]:
        """Return a copy of the registrations, to hand back to :meth:`restore` later (for tests)."""
        with self._lock:
            return dict(self._sinks)

    def restore(self, snapshot: dict[str, Sink]) -> None:
        """Make the registrations exactly ``snapshot`` again: later additions go, removals come back."""
        with self._lock:
            self._sinks.clear()
            self._sinks.update(snapshot)

    def get(self, kind: str) -> Sink | None:
        """Return the sink for ``kind``, or ``None`` if nothing can fire it right now."""
        if kind == SESSION_TURN:
            return _session_turn if wakes_settings.get("SPAWN_TURN") else None
        with self._lock:
            return self._sinks.get(kind)

    def kinds(self) -> list[str]:
        """Return every kind that can fire now, sorted (the runner claims only these)."""
        with self._lock:
            kinds = set(self._sinks)
        if wakes_settings.get("SPAWN_TURN"):
            kinds.add(SESSION_TURN)
        return sorted(kinds)

    def load_settings(self) -> None:
        """Register the sinks named in ``WAKES["SINKS"]`` (kind -> dotted path).

        ``AppConfig.ready`` calls this, so it never raises: an entry that cannot be loaded (a path
        that does not import, not a callable, a built-in kind) is skipped, and the system check
        ``django_wakes.E005`` reports it, naming the setting and the value (``runwakes`` refuses to
        start with it); a wake of that kind waits, unwakeable, as for any kind without a sink.
        """
        self._unloaded.clear()
        table = wakes_settings.get("SINKS")
        if not isinstance(table, dict):
            return
        for kind, path in table.items():
            try:
                fn = import_string(path) if isinstance(path, str) else path
                if not callable(fn):
                    raise TypeError(f"it is a {type(fn).__name__}, not a callable")
                self.register(kind, fn, replace=True)
            except Exception as exc:  # noqa: BLE001 - reported by the system check, not as a traceback from ready()
                logger.debug("WAKES['SINKS'][%r] = %r not loaded", kind, path, exc_info=True)
                if isinstance(kind, str):
                    problem = f"{type(exc).__name__}: {exc!s:.200}"
                    self._unloaded[kind] = f"WAKES['SINKS'][{kind!r}] = {path!r:.200} did not load ({problem})"

    def why_missing(self, kind: str) -> str:
        """Why no sink fires ``kind``, for :class:`~django_wakes.exceptions.UnknownKind`'s message.

        A ``WAKES["SINKS"]`` entry that failed to load is named with its error (what ``manage.py check``
        reports as ``django_wakes.E005``), so the message leads to the cause rather than to the kind.
        """
        if kind == SESSION_TURN:
            return " (set WAKES['SPAWN_TURN'] to enable it)"
        with self._lock:
            unloaded = self._unloaded.get(kind)
        if unloaded is not None:
            return f": {unloaded} (manage.py check reports it as django_wakes.E005)"
        return ""


def _session_turn(wake: Wake, result: dict[str, Any]) -> Any:
    """Hand the result to the host's turn spawner: ``SPAWN_TURN(session_id, result, workspace_id=...)``.

    ``workspace_id`` is passed when the hook takes it (:func:`~django_wakes.conf.call_session_hook`).
    """
    spawn = wakes_settings.spawn_turn
    if spawn is None:  # pragma: no cover - get() only returns this sink when configured
        raise RuntimeError("WAKES['SPAWN_TURN'] is not configured")
    return call_session_hook(spawn, wake.session_id, result, workspace_id=wake.workspace_id)


registry = SinkRegistry()


def call_sink(fn: Sink, wake: Wake, result: dict[str, Any]) -> Any:
    """Call a sink and return what it returned; an ``async def`` sink is awaited to completion.

    Without this an ``async def`` sink would only *create* its coroutine: nothing after its first
    line would run, yet the wake would settle as fired — a silently lost effect. Awaiting it through
    ``async_to_sync`` also lets it use Django's async ORM (``await Model.objects.aget(...)``).
    """
    returned = fn(wake, result)
    if inspect.isawaitable(returned):
        returned = async_to_sync(_await)(returned)
    return returned


async def _await(awaitable: Any) -> Any:
    return await awaitable


def sink(kind: str, *, replace: bool = False) -> Callable[[Sink], Sink]:
    """Register the decorated ``fn(wake, result)`` as the sink for ``kind``."""

    def decorator(fn: Sink) -> Sink:
        return registry.register(kind, fn, replace=replace)

    return decorator
