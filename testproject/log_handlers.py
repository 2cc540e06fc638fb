"""A host's logging handler that breaks: ``tests/test_sink_exits.py`` points ``runwakes`` at it.

``RaisingInFireThreads`` raises ``SystemExit`` from ``emit`` for every ERROR record logged in a
runner's fire thread (``django-wakes-fire-*``), as a broken error-reporting handler might: code
that runs *outside* any sink, and that ends the thread's step and then the thread itself (the
runner logs the broken step, which raises again). Settings install it only when
``WAKES_TEST_BREAK_FIRE_LOGGING=1``.
"""

from __future__ import annotations

import logging
import threading


class RaisingInFireThreads(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR and threading.current_thread().name.startswith("django-wakes-fire-"):
            raise SystemExit(f"the host's log handler exits on: {record.getMessage()[:80]}")
