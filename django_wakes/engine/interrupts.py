"""Tell a real Ctrl-C from a sink's own ``raise KeyboardInterrupt`` or ``sys.exit()``.

Both arrive as the same exception class; what differs is how it came. A sink's ``sys.exit()`` (code
lifted from a script) or ``raise KeyboardInterrupt`` is user code failing: a failed attempt of its
wake, and the pass goes on. An exception a *signal handler* raised (Python's default SIGINT handler
raises ``KeyboardInterrupt``; a host may install one that calls ``sys.exit()``) is the process being
told to stop, and it must go on up.

So the engine does not judge by class. While a pass runs in the main thread (the only thread
Python runs signal handlers in), :func:`noting_signals` wraps the SIGINT and SIGTERM handlers that
are Python functions: an exception one of them raises is remembered, by identity, before it
propagates into whatever code was running. :func:`by_signal` then answers for one exception.
``runwakes`` installs its own handlers, which raise nothing (they set the runner's stopping flag:
no new claims, finish what is in hand), so under a runner every exception a sink raises is the sink's.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: The signals whose Python handlers may raise into running code (SIGTERM's default kills, raising nothing).
WATCHED = (signal.SIGINT, signal.SIGTERM)

# Exceptions raised by a signal handler while a pass noted them (kept until the outermost pass ends).
_raised: list[BaseException] = []
_depth = 0


def by_signal(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a signal handler (the process is being stopped), not by user code."""
    return any(raised is exc for raised in _raised)


@contextmanager
def noting_signals() -> Iterator[None]:
    """Remember, for :func:`by_signal`, the exceptions signal handlers raise while the block runs.

    Outside the main thread this does nothing: signals are handled in the main thread only, so they
    cannot raise into code running anywhere else.
    """
    global _depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}
    if _depth == 0:
        for watched in WATCHED:
            handler = signal.getsignal(watched)
            if callable(handler):
                previous[watched] = handler
                signal.signal(watched, _noting(handler))
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        for watched, handler in previous.items():
            signal.signal(watched, handler)
        if _depth == 0:
            _raised.clear()


def _noting(handler: Callable[[int, FrameType | None], Any]) -> Callable[[int, FrameType | None], Any]:
    def noted(signum: int, frame: FrameType | None) -> Any:
        try:
            return handler(signum, frame)
        except BaseException as exc:
            _raised.append(exc)
            raise

    return noted
