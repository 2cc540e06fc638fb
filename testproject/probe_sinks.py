"""Sinks the multi-process tests and benchmarks schedule (owned by the concurrency tests).

They are inert unless a wake of their kind fires: nothing happens at import time. What they do is
steered by environment variables of the *runner* process, so the test that starts a runner decides:

``WAKES_PROBE_DIR``
    Directory the sinks append their JSON-lines evidence to, one file per process
    (``<kind>-<pid>.jsonl``), so concurrent runners never interleave writes. Unset: nothing is
    written.
``WAKES_PROBE_MAX_SLEEP_MS``
    ``probe.record`` sleeps a random 0..N ms inside its firing interval (default 2) so runners
    get chances to overlap.
``WAKES_PROBE_BLOCK``
    ``"1"``: ``probe.block`` blocks after recording its start, until ``<dir>/release`` exists
    (bounded by ``WAKES_PROBE_BLOCK_SECONDS``, default 300) — a runner stuck mid-sink.
``WAKES_PROBE_LATE_ERROR``
    ``"1"``: once released, ``probe.block`` raises, so an unfenced late settle would be visible.

Timestamps are ``time.monotonic_ns()``: CLOCK_MONOTONIC is system-wide on Linux, so intervals
recorded by different processes on one machine are comparable.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from django_wakes import sink


def _append(kind: str, record: dict[str, Any]) -> None:
    directory = os.environ.get("WAKES_PROBE_DIR")
    if not directory:
        return
    path = Path(directory) / f"{kind}-{os.getpid()}.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _record(wake: Any, result: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": wake.pk,
        "serial_key": wake.serial_key,
        "fire_at": wake.fire_at.isoformat() if wake.fire_at else None,
        "attempts": wake.attempts,
        "pid": os.getpid(),
        "result": result,
        **extra,
    }


@sink("probe.record")
def record(wake: Any, result: dict[str, Any]) -> None:
    """Note the firing interval [start, end] of this wake in this process."""
    start = time.monotonic_ns()
    max_ms = float(os.environ.get("WAKES_PROBE_MAX_SLEEP_MS", "2"))
    if max_ms > 0:
        time.sleep(random.uniform(0, max_ms) / 1000)
    end = time.monotonic_ns()
    _append("record", _record(wake, result, start=start, end=end))


@sink("probe.block")
def block(wake: Any, result: dict[str, Any]) -> None:
    """Record the start, then (if told to) block until released: a runner wedged mid-sink."""
    _append("block", _record(wake, result, phase="start", start=time.monotonic_ns()))
    if os.environ.get("WAKES_PROBE_BLOCK") != "1":
        return
    release = Path(os.environ.get("WAKES_PROBE_DIR", ".")) / "release"
    deadline = time.monotonic() + float(os.environ.get("WAKES_PROBE_BLOCK_SECONDS", "300"))
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    _append("block", _record(wake, result, phase="released", end=time.monotonic_ns()))
    if os.environ.get("WAKES_PROBE_LATE_ERROR") == "1":
        raise RuntimeError(f"late finisher pid={os.getpid()} settles wake {wake.pk} after losing its lease")
