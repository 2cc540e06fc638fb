"""Budgets and stops with real processes on PostgreSQL and MariaDB: N creators racing for one session
never end above its cap, and a stop that comes after a runner's claim still keeps the sink from running.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import traceback
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

import django_wakes
from django_wakes.models import State, Wake
from tests.processes import Procs, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.django_db(transaction=True)]

WS = "ws-budget-race"
CREATORS = 6
TRIES = 15
CAP = 20


def _needs_server() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("racing processes need a server database (SQLite serialises every writer behind one file lock)")


def _create_for_one_session(barrier: Any, out: Path) -> None:
    code = 0
    made = refused = 0
    try:
        barrier.wait(timeout=60)
        for _ in range(TRIES):
            try:
                django_wakes.schedule(workspace_id=WS, session_id="s-race", kind="t.budget", delay="1h", budget=True)
                made += 1
            except django_wakes.BudgetExceeded:
                refused += 1
        out.write_text(json.dumps({"made": made, "refused": refused}))
    except BaseException:  # noqa: BLE001 - reported through the file and the exit code
        out.write_text(json.dumps({"error": traceback.format_exc()}))
        code = 1
    finally:
        connections.close_all()
        os._exit(code)


def test_processes_racing_to_create_for_one_session_never_exceed_its_cap(sinks, settings, tmp_path: Path):
    _needs_server()
    sinks("t.budget")
    settings.WAKES = {**settings.WAKES, "BUDGETS": {"SESSION_MAX_LIVE": CAP, "SESSION_MIN_DELAY": None}}
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(CREATORS)
    outputs = [tmp_path / f"creator-{n}.json" for n in range(CREATORS)]
    connections.close_all()
    children = [context.Process(target=_create_for_one_session, args=(barrier, out)) for out in outputs]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    results = [json.loads(out.read_text()) for out in outputs]
    for child, result in zip(children, results, strict=True):
        assert child.exitcode == 0, result
    made = sum(r["made"] for r in results)
    live = Wake.objects.filter(session_id="s-race", state=State.PENDING).count()
    assert live == made == CAP, f"{made} made, {live} live, cap {CAP}"
    assert sum(r["refused"] for r in results) == CREATORS * TRIES - CAP
    print(f"\nbudget race {connection.vendor}: {CREATORS} processes x {TRIES} tries -> {live} live wakes (cap {CAP})")


def test_a_stop_after_the_claim_supersedes_the_unstarted_wake_in_a_real_runner(procs: Procs):
    _needs_server()
    first = django_wakes.schedule(workspace_id=WS, session_id="s-stop", kind="probe.block", delay="0s", serial_key="a")
    second = django_wakes.schedule(workspace_id=WS, session_id="s-stop", kind="probe.block", delay="0s", serial_key="b")
    runner = procs.runner("runner", "--interval", "0.2", "--lease", "30s", WAKES_LEASE="30s", WAKES_PROBE_BLOCK="1")
    started = wait_for(lambda: procs.records("probe.block") or procs.alive(runner), timeout=60, what="the first sink")
    blocked = started[0]["id"]
    waiting = second.pk if blocked == first.pk else first.pk
    assert Wake.objects.get(pk=waiting).state == State.FIRING, "both were claimed in one batch"
    assert django_wakes.stop_session("s-stop", reason="stop", workspace_id=WS) == 0  # nothing pending: both are claimed
    (procs.probe_dir / "release").touch()
    wait_for(
        lambda: Wake.objects.get(pk=waiting).state == State.SUPERSEDED or procs.alive(runner),
        timeout=60,
        what="the claimed, unstarted wake to be superseded",
    )
    assert procs.stop(runner) == 0, procs.log(runner)
    assert [r["id"] for r in procs.records("probe.block") if r["phase"] == "start"] == [blocked]
    assert Wake.objects.get(pk=blocked).state == State.FIRED
    row = Wake.objects.get(pk=waiting)
    assert row.attempts == 0 and row.lane_lock is None
