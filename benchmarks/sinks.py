"""The benchmark's sinks: a no-op, and one that records when it fired (for the latency figures)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_lock = threading.Lock()
_stamp_file = None


def noop(wake: Any, result: dict[str, Any]) -> None:
    """Do nothing: what is measured is the engine, not the sink."""


def stamp(wake: Any, result: dict[str, Any]) -> None:
    """Append ``<wake id> <time.time()>`` to ``$BENCH_STAMP_FILE`` the moment the sink runs."""
    global _stamp_file
    now = time.time()
    with _lock:
        if _stamp_file is None:
            _stamp_file = open(os.environ["BENCH_STAMP_FILE"], "a", buffering=1)  # noqa: SIM115
        _stamp_file.write(f"{wake.pk} {now:.6f}\n")
