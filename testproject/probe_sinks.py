"""Sinks the real-process tests schedule (``tests/test_multiprocess.py``, ``tests/test_runner_processes.py``).

They are inert unless a wake of their kind fires: nothing happens at import time. Each firing leaves
JSON-lines evidence in ``WAKES_PROBE_DIR`` (an environment variable of the *runner* process; unset:
nothing is written), one file per kind and process (``<kind>-<pid>.jsonl``), so concurrent runners
never interleave writes. ``tests.processes.Procs.records(kind)`` reads them back. Each line is one
``write(2)`` on an ``O_APPEND`` file, not fsynced: a SIGKILL does not lose what the kernel already has.

Timestamps are ``time.monotonic_ns()``: CLOCK_MONOTONIC is system-wide on Linux, so intervals
recorded by different processes on one machine are comparable.

``probe.record``
    One line per firing with its interval ``start``/``end``, after sleeping a random 0..N ms
    (``WAKES_PROBE_MAX_SLEEP_MS``, default 2) so runners get chances to overlap.
``probe.block``
    A ``start`` line; then, if ``WAKES_PROBE_BLOCK="1"``, blocks until ``<dir>/release`` exists
    (bounded by ``WAKES_PROBE_BLOCK_SECONDS``, default 300) — a runner stuck mid-sink — and writes a
    ``released`` line; then, if ``WAKES_PROBE_LATE_ERROR="1"``, raises, so an unfenced late settle
    would be visible.
``probe.trace``
    For ``tests/test_tracing.py``: opens an OpenTelemetry span of its own (``probe.work``), schedules a
    ``probe.trace`` wake from inside the sink if its intent says ``spawn``, returns ``Retry`` (due
    again in 0.2 s) while its attempt number is at most ``retries``, then raises if ``fail``.
``probe.intent``
    Does what its wake's ``intent`` says, so each test decides per wake: a ``start`` line *before*
    anything else (a process killed mid-sink leaves a start without an end), then a sleep of
    ``sleep`` seconds or a random ``sleep_min``..``sleep_max`` (only on the attempt numbers in
    ``slow_attempts``, if given; with ``slow_until_guarded``, only until a runner died holding the
    wake), then a ``raise`` line and an exception if ``fail``, else an ``end`` line; with ``exit``
    (``"SystemExit"`` or ``"KeyboardInterrupt"``) a ``raise`` line and ``sys.exit()`` or ``raise
    KeyboardInterrupt``, as code lifted from a script does. Lines carry the wake id, lane, pid, thread,
    attempt number, claim token, fencing token, trigger and ``t``.
``probe.async_intent``
    An ``async def`` sink: a ``start`` line, ``await asyncio.sleep(sleep)``, then ``exit`` as above or
    an ``end`` line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django_wakes import sink


def _append(kind: str, record: dict[str, Any]) -> None:
    directory = os.environ.get("WAKES_PROBE_DIR")
    if not directory:
        return
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(os.path.join(directory, f"{kind}-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


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
    _append("probe.record", _record(wake, result, start=start, end=end))


@sink("probe.block")
def block(wake: Any, result: dict[str, Any]) -> None:
    """Record the start, then (if told to) block until released: a runner wedged mid-sink."""
    _append("probe.block", _record(wake, result, phase="start", start=time.monotonic_ns()))
    if os.environ.get("WAKES_PROBE_BLOCK") != "1":
        return
    release = Path(os.environ.get("WAKES_PROBE_DIR", ".")) / "release"
    deadline = time.monotonic() + float(os.environ.get("WAKES_PROBE_BLOCK_SECONDS", "300"))
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    _append("probe.block", _record(wake, result, phase="released", end=time.monotonic_ns()))
    if os.environ.get("WAKES_PROBE_LATE_ERROR") == "1":
        raise RuntimeError(f"late finisher pid={os.getpid()} settles wake {wake.pk} after losing its lease")


@sink("probe.intent")
def intent(wake: Any, result: dict[str, Any]) -> None:
    """Sleep, fail or succeed as the wake's intent says, with start and end (or raise) lines."""
    steer = wake.intent if isinstance(wake.intent, dict) else {}
    base = {
        "id": wake.pk,
        "lane": wake.serial_key,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "attempt": wake.attempts,
        "token": wake.claim_token,
        "fence": wake.fence,
        "trigger": result.get("trigger"),
    }
    _append("probe.intent", {**base, "phase": "start", "t": time.monotonic_ns()})
    fast_this_time = ("slow_attempts" in steer and wake.attempts not in steer["slow_attempts"]) or (
        steer.get("slow_until_guarded") and wake.guarded  # slow only until a runner died holding it
    )
    if fast_this_time:
        pass
    elif "sleep_max" in steer:
        time.sleep(random.uniform(float(steer.get("sleep_min", 0)), float(steer["sleep_max"])))
    elif steer.get("sleep"):
        time.sleep(float(steer["sleep"]))
    if steer.get("fail"):
        _append("probe.intent", {**base, "phase": "raise", "t": time.monotonic_ns()})
        raise RuntimeError(f"probe.intent: wake {wake.pk} fails on purpose")
    if steer.get("exit"):
        _append("probe.intent", {**base, "phase": "raise", "t": time.monotonic_ns()})
        _exit(steer["exit"])
    _append("probe.intent", {**base, "phase": "end", "t": time.monotonic_ns()})


@sink("probe.async_intent")
async def async_intent(wake: Any, result: dict[str, Any]) -> None:
    """``probe.intent`` for an ``async def`` sink: ``start``, an ``await``, then ``exit`` as told or ``end``."""
    steer = wake.intent if isinstance(wake.intent, dict) else {}
    base = {"id": wake.pk, "pid": os.getpid(), "attempt": wake.attempts}
    _append("probe.async_intent", {**base, "phase": "start", "t": time.monotonic_ns()})
    await asyncio.sleep(float(steer.get("sleep", 0)))
    if steer.get("exit"):
        _append("probe.async_intent", {**base, "phase": "raise", "t": time.monotonic_ns()})
        _exit(steer["exit"])
    _append("probe.async_intent", {**base, "phase": "end", "t": time.monotonic_ns()})


def _exit(how: str) -> None:
    """What code lifted from a script does: ``sys.exit()`` or a ``KeyboardInterrupt`` of its own."""
    if how == "KeyboardInterrupt":
        raise KeyboardInterrupt
    sys.exit(f"probe sink exits ({how})")


@sink("probe.ledger")
def ledger(wake: Any, result: dict[str, Any]) -> None:
    """Append this firing's effect to an fsynced ledger, then sleep ``intent["sleep"]`` seconds if given.

    The line *is* the effect (``<dir>/probe.ledger-<pid>.jsonl``, written with one ``write(2)`` and
    fsynced before anything else), so no crash of the runner can lose an effect that happened. It
    carries what a fault test needs to tell whether the runner still owned the claim it ran under:
    wake id, lane, attempt number, claim token, the claim's ``claimed_at`` and the wall-clock
    (``time.time()``) and ``time.monotonic_ns()`` moments the sink started (``tests/test_faults.py``).
    """
    steer = wake.intent if isinstance(wake.intent, dict) else {}
    directory = os.environ.get("WAKES_PROBE_DIR")
    if directory:
        line = {
            "id": wake.pk,
            "kind": wake.kind,
            "lane": wake.serial_key,
            "attempt": wake.attempts,
            "token": wake.claim_token,
            "claimed_at": wake.claimed_at.timestamp() if wake.claimed_at else None,
            "pid": os.getpid(),
            "wall": time.time(),
            "t": time.monotonic_ns(),
        }
        path = os.path.join(directory, f"probe.ledger-{os.getpid()}.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    if steer.get("sleep"):
        time.sleep(float(steer["sleep"]))


@sink("probe.poison")
def poison(wake: Any, result: dict[str, Any]) -> None:
    """Write a ledger line (so each start is on record), then SIGKILL this very runner process.

    A poisoned wake: every runner that fires it dies mid-sink, so only its lease lapsing and its
    ``max_attempts`` can stop it taking the fleet down one runner at a time.
    """
    ledger(wake, result)
    os.kill(os.getpid(), 9)  # SIGKILL: no handler, no cleanup, no settle


@sink("probe.trace")
def trace_probe(wake: Any, result: dict[str, Any]) -> Any:
    """A sink with a span of its own, a wake it creates, retries and a failure, as its intent says."""
    from datetime import timedelta

    from opentelemetry import trace

    from django_wakes import Retry, clock, schedule

    steer = wake.intent if isinstance(wake.intent, dict) else {}
    with trace.get_tracer("probe").start_as_current_span("probe.work", attributes={"probe.wake": wake.pk}):
        if steer.get("spawn") and wake.attempts == 1:
            schedule(workspace_id=wake.workspace_id, kind="probe.trace", delay="0s", intent={"spawned_by": wake.pk})
    if wake.attempts <= steer.get("retries", 0):
        return Retry(at=clock.now() + timedelta(milliseconds=200), reason="again")
    if steer.get("fail"):
        raise RuntimeError("probe.trace fails on purpose")
    return None


@sink("probe.ha")
def ha(wake: Any, result: dict[str, Any]) -> None:
    """The HA tests' workload (``tests/test_ha.py``): a ledger line like ``probe.ledger``'s, plus the port
    of the PostgreSQL node this runner's connection is on (which node claimed it), inside ``once()`` when
    the intent says ``"once": true`` (the effect then happens at most once per wake, whatever re-drives it;
    the receipt's session is ``ha:<intent's run>:<wake id>``).

    The port is read first: during a failover that query fails like any sink's own query would.
    """
    from django.db import connection

    from django_wakes import once

    steer = wake.intent if isinstance(wake.intent, dict) else {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        (port,) = cursor.fetchone()
    directory = os.environ.get("WAKES_PROBE_DIR")

    def effect() -> dict[str, Any]:
        if directory:
            line = {
                "id": wake.pk,
                "i": steer.get("i"),
                "once": bool(steer.get("once")),
                "attempt": wake.attempts,
                "claimed_at": wake.claimed_at.timestamp() if wake.claimed_at else None,
                "port": port,
                "pid": os.getpid(),
                "wall": time.time(),
            }
            fd = os.open(
                os.path.join(directory, f"probe.ha-{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT
            )
            try:
                os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return {"port": port}

    if steer.get("once"):
        once(f"ha:{steer.get('run', '')}:{wake.pk}", "effect", effect)
    else:
        effect()
