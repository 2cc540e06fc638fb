"""Async twins of the public engine calls, named the way Django names its own (``aget``, ``acreate``).

``await aschedule(...)`` is ``schedule(...)`` run through ``sync_to_async(thread_sensitive=True)``,
which is exactly how Django's own ``a*`` queryset and model methods are built: the call runs whole in
the one thread Django's sync code shares, on that thread's connection, so it keeps its transactions
(a create and its budget locks commit together, never across an ``await``), its results and its
exceptions. Safe in an ASGI view (``SynchronousOnlyOperation`` is what calling ``schedule()`` there
directly raises) and in an asyncio agent loop; an asyncio loop without Django's request cycle
should call ``django.db.close_old_connections`` through ``sync_to_async`` between long idle
stretches, as for any Django async code (docs/agents.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from .approvals import reissue_approval
from .create import schedule, schedule_many
from .sessions import nudge_session, resume_session, stop_session
from .triggers import cancel, deliver_event, resolve
from .waiting import request_approval, watch

__all__ = [
    "acancel",
    "adeliver_event",
    "anudge_session",
    "areissue_approval",
    "arequest_approval",
    "aresolve",
    "aresume_session",
    "aschedule",
    "aschedule_many",
    "astop_session",
    "awatch",
]

P = ParamSpec("P")
R = TypeVar("R")


def twin(fn: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Return ``a<fn>``: ``fn`` awaited through ``sync_to_async(thread_sensitive=True)``, same signature."""
    in_thread = sync_to_async(fn, thread_sensitive=True)

    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await in_thread(*args, **kwargs)
        return result

    functools.update_wrapper(run, fn)  # signature (inspect follows __wrapped__), module, docs
    run.__name__ = run.__qualname__ = f"a{fn.__name__}"
    run.__doc__ = (
        f"Async :func:`django_wakes.{fn.__name__}`: the same call in Django's shared sync thread "
        f"(``sync_to_async(thread_sensitive=True)``), with its transactions, result and exceptions.\n\n"
        f"{fn.__doc__ or ''}"
    )
    return run


aschedule = twin(schedule)
aschedule_many = twin(schedule_many)
awatch = twin(watch)
arequest_approval = twin(request_approval)
areissue_approval = twin(reissue_approval)
adeliver_event = twin(deliver_event)
aresolve = twin(resolve)
acancel = twin(cancel)
astop_session = twin(stop_session)
aresume_session = twin(resume_session)
anudge_session = twin(nudge_session)
