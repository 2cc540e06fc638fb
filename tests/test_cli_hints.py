"""What the command line tells a person (issue 27, item 6): ``wakes preview --cron`` as the Python API spells
it; a real ``runwakes`` stopped with Ctrl-C says how to stop it at once, and ends with what it did; ``wakes
status`` counts and names overdue wakes by one definition.
"""

from __future__ import annotations

import os
import re
import signal
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_wakes import clock, schedule
from tests.factories import WakeFactory
from tests.processes import Procs, wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # A command's options, a signal's handling: not about the database, so once per suite run (CI's time).
    pytest.mark.skipif(os.environ.get("WAKES_TEST_DB", "sqlite") != "sqlite", reason="runs on the SQLite pass"),
]

HINT = "press Ctrl-C again to exit at once"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_preview_takes_cron_as_an_option_too():
    """``preview(cron=...)`` in Python; ``--cron`` on the command line (the argument form still works)."""
    common = ("--tz", "Europe/Paris", "-n", "3", "--start", "2025-03-28")
    as_option = run("wakes", "preview", "--cron", "0 9 * * MON-FRI", *common)
    assert as_option == run("wakes", "preview", "0 9 * * MON-FRI", *common)
    assert "Next 3 fire times of cron '0 9 * * MON-FRI' in Europe/Paris" in as_option
    assert "1  Fri 2025-03-28 09:00:00 CET    2025-03-28 08:00:00Z" in as_option
    assert "2  Mon 2025-03-31 09:00:00 CEST   2025-03-31 07:00:00Z" in as_option


def test_preview_refuses_two_different_cron_expressions():
    with pytest.raises(CommandError, match="give the cron expression once"):
        run("wakes", "preview", "0 9 * * *", "--cron", "0 10 * * *")


def test_a_ctrl_c_says_how_to_exit_at_once_and_the_runner_ends_with_what_it_did(procs: Procs):
    runner = procs.runner("ctrl-c", "--interval", "0.2", "--no-listen")
    wait_for(lambda: "starting:" in procs.log(runner) or procs.alive(runner), timeout=60, what="the start-up line")
    slow = schedule(workspace_id="w1", delay="0s", kind="probe.intent", intent={"sleep": 2})
    wait_for(lambda: procs.phase("start", id=slow.pk) or procs.alive(runner), timeout=30, what="the sink to start")

    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=30) == 0
    log = procs.log(runner)
    (hint,) = [line for line in log.splitlines() if HINT in line]
    assert "finishing 1 wake(s) in hand" in hint, log
    last = log.strip().splitlines()[-1]
    assert re.search(
        r"runwakes stopped: fired 1, failed 0, dead 0, expired 0, deferred 0 \(runner \S+, up \d+s\)$", last
    ), log
    assert procs.phase("end", id=slow.pk), "the wake in hand was finished before the runner stopped"


def test_a_second_ctrl_c_exits_at_once(procs: Procs):
    runner = procs.runner("ctrl-c-twice", "--interval", "0.2", "--no-listen")
    wait_for(lambda: "starting:" in procs.log(runner) or procs.alive(runner), timeout=60, what="the start-up line")
    hung = schedule(workspace_id="w1", delay="0s", kind="probe.intent", intent={"sleep": 60})
    wait_for(lambda: procs.phase("start", id=hung.pk) or procs.alive(runner), timeout=30, what="the sink to start")

    runner.send_signal(signal.SIGINT)
    wait_for(lambda: HINT in procs.log(runner) or procs.alive(runner), timeout=10, what="the hint")
    runner.send_signal(signal.SIGINT)
    assert runner.wait(timeout=10) == 1
    assert "second signal" in procs.log(runner)


def test_status_counts_and_names_overdue_wakes_by_one_definition():
    """Due 30 s ago is due, not overdue (over a minute): "overdue 0" and "Oldest overdue: none" agree."""
    now = clock.now()
    WakeFactory(fire_at=now - timedelta(seconds=30), kind="c.late")
    out = run("wakes", "status")
    assert re.search(r"^\s+overdue\s+0\s", out, re.M), out
    assert re.search(r"^\s+due now\s+1$", out, re.M), out
    assert "Oldest overdue: none" in out, out

    old = WakeFactory(fire_at=now - timedelta(minutes=5), kind="c.old")
    out = run("wakes", "status")
    assert re.search(r"^\s+overdue\s+1\s", out, re.M), out
    assert re.search(rf"^Oldest overdue: wake {old.pk} \(c\.old\), due 5m\d\ds ago", out, re.M), out
