"""django-wakes: a durable alarm clock for Django.

The public API is importable from the package root without importing models at import time
(PEP 562 lazy attributes), so ``import django_wakes`` is safe in settings and ``AppConfig``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0.dev0"

_EXPORTS = {
    "schedule": "engine",
    "schedule_many": "engine",
    "watch": "engine",
    "request_approval": "engine",
    "deliver_event": "engine",
    "resolve": "engine",
    "reissue_approval": "engine",
    "cancel": "engine",
    "requeue": "engine",
    "run_due": "engine",
    "recover": "engine",
    "gc": "engine",
    "stop_session": "engine",
    "resume_session": "engine",
    "nudge_session": "engine",
    "ApprovalRequest": "engine",
    "RunReport": "engine",
    "pause_chain": "engine",
    "resume_chain": "engine",
    "trigger_chain": "engine",
    "backfill_chain": "engine",
    # Async twins (sync_to_async(thread_sensitive=True), as Django's own a* methods): engine/aio.py
    "aschedule": "engine",
    "aschedule_many": "engine",
    "awatch": "engine",
    "arequest_approval": "engine",
    "areissue_approval": "engine",
    "adeliver_event": "engine",
    "aresolve": "engine",
    "acancel": "engine",
    "astop_session": "engine",
    "aresume_session": "engine",
    "anudge_session": "engine",
    "dispatch": "agents.dispatch",
    "adispatch": "agents.dispatch",
    "preview": "schedules.recurrence",
    "DstPolicy": "schedules.recurrence",
    "once": "receipts",
    "sink": "sinks",
    "registry": "sinks",
    "Retry": "sinks",
    "Defer": "sinks",
    "Stop": "sinks",
    "Done": "sinks",
    "KEEP": "sinks",
    "WakeError": "exceptions",
    "InvalidWake": "exceptions",
    "InvalidDuration": "exceptions",
    "InvalidTime": "exceptions",
    "InvalidIntent": "exceptions",
    "InvalidSchedule": "exceptions",
    "UnknownKind": "exceptions",
    "AlreadyRegistered": "exceptions",
    "NotRegistered": "exceptions",
    "ApprovalError": "exceptions",
    "ApprovalNotFound": "exceptions",
    "ApprovalAlreadyResolved": "exceptions",
    "ApprovalExpired": "exceptions",
    "ApprovalDenied": "exceptions",
    "ApprovalSuperseded": "exceptions",
    "ApprovalReissueLimit": "exceptions",
    "BudgetExceeded": "exceptions",
    "SessionStopped": "exceptions",
    "IdempotencyConflict": "exceptions",
    "OnceError": "exceptions",
    "OnceInProgress": "exceptions",
    "OnceInterrupted": "exceptions",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from .agents.dispatch import adispatch, dispatch  # noqa: F401
    from .engine import (  # noqa: F401
        ApprovalRequest,
        RunReport,
        acancel,
        adeliver_event,
        anudge_session,
        areissue_approval,
        arequest_approval,
        aresolve,
        aresume_session,
        aschedule,
        aschedule_many,
        astop_session,
        awatch,
        backfill_chain,
        cancel,
        deliver_event,
        gc,
        nudge_session,
        pause_chain,
        recover,
        reissue_approval,
        request_approval,
        requeue,
        resolve,
        resume_chain,
        resume_session,
        run_due,
        schedule,
        schedule_many,
        stop_session,
        trigger_chain,
        watch,
    )
    from .exceptions import *  # noqa: F403
    from .receipts import once  # noqa: F401
    from .schedules.recurrence import DstPolicy, preview  # noqa: F401
    from .sinks import KEEP, Defer, Done, Retry, Stop, registry, sink  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'django_wakes' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
