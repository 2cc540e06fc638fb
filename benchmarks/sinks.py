"""The benchmark's sinks: a no-op, one that records when it fired (latency), one that waits (I/O-bound)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

_lock = threading.Lock()
_stamp_file = None
#: How long the I/O-bound sink waits, like a webhook or a model call would (``BENCH_IO_SECONDS``).
IO_SECONDS = float(os.environ.get("BENCH_IO_SECONDS", "0.1"))


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


async def io_wait(wake: Any, result: dict[str, Any]) -> None:
    """Wait ``IO_SECONDS`` without holding a thread: an I/O-bound sink (``runwakes --concurrency N``)."""
    await asyncio.sleep(IO_SECONDS)
