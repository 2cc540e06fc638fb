"""Sinks the runner-process tests (``tests/test_runner_processes.py``) schedule.

Inert unless a wake of their kind fires. What a firing does is read from the wake's ``intent``, so
each test decides per wake; where the evidence goes is read from the *runner's* environment:

``WAKES_PROBE_DIR``
    Directory for JSON-lines evidence, one file per process (``runner-probe-<pid>.jsonl``), so
    concurrent runners never interleave writes. Unset: nothing is written.

``runner.probe`` writes a ``start`` line *before* it does anything else (so a process killed
mid-sink leaves a start without an end), sleeps, optionally raises, then writes an ``end`` line.
Intent keys: ``sleep`` (seconds) or ``sleep_min``/``sleep_max`` (a random sleep), ``slow_attempts``
(sleep only on these attempt numbers), ``fail`` (raise after sleeping). Each line carries the wake
id, lane, pid, thread, the attempt number and the claim token the runner holds, and
``time.monotonic_ns()`` (system-wide on Linux, so intervals from different processes compare).
Lines are written with one ``write(2)`` on an ``O_APPEND`` file and not fsynced: a SIGKILL does
not lose what the kernel already has.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from typing import Any

from django_wakes import sink


def _append(record: dict[str, Any]) -> None:
    directory = os.environ.get("WAKES_PROBE_DIR")
    if not directory:
        return
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(os.path.join(directory, f"runner-probe-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@sink("runner.probe")
def probe(wake: Any, result: dict[str, Any]) -> None:
    intent = wake.intent if isinstance(wake.intent, dict) else {}
    base = {
        "id": wake.pk,
        "lane": wake.serial_key,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "attempt": wake.attempts,
        "token": wake.claim_token,
        "trigger": result.get("trigger"),
    }
    _append({**base, "phase": "start", "t": time.monotonic_ns()})
    if "slow_attempts" in intent and wake.attempts not in intent["slow_attempts"]:
        pass
    elif "sleep_max" in intent:
        time.sleep(random.uniform(float(intent.get("sleep_min", 0)), float(intent["sleep_max"])))
    elif intent.get("sleep"):
        time.sleep(float(intent["sleep"]))
    if intent.get("fail"):
        _append({**base, "phase": "raise", "t": time.monotonic_ns()})
        raise RuntimeError(f"runner.probe: wake {wake.pk} fails on purpose")
    _append({**base, "phase": "end", "t": time.monotonic_ns()})
