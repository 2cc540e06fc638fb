"""The management commands: ``runwakes --once`` (exit status, argument validation), ``wakes status``
(human table and ``--json``) and ``wakes gc``.

Most tests call the commands in-process with ``call_command``; a few run ``manage.py`` as a real
process to check what a shell, cron or a Kubernetes CronJob sees (exit status, stderr).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_wakes import clock, schedule
from django_wakes.management.commands.wakes import Command as WakesCommand
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.models import Runner as RunnerRow
from tests.factories import WakeAttemptFactory, WakeFactory
from tests.processes import Procs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-commands"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


# --------------------------------------------------------------------------------------------------
# runwakes --once
# --------------------------------------------------------------------------------------------------


def test_once_returns_normally_when_every_wake_fired(sinks):
    calls = sinks("c.ok")
    wakes = [schedule(workspace_id=WS, delay="0s", kind="c.ok") for _ in range(3)]
    later = schedule(workspace_id=WS, delay="1h", kind="c.ok")

    call_command("runwakes", "--once", stdout=StringIO(), stderr=StringIO())

    assert sorted(calls.ids) == sorted(w.pk for w in wakes)
    assert Wake.objects.get(pk=later.pk).state == State.PENDING


@pytest.mark.parametrize("max_attempts", [5, 1], ids=["failed-will-retry", "dead"])
def test_once_exits_1_when_a_wake_failed(sinks, max_attempts):
    sinks("c.ok")
    sinks("c.fail", RuntimeError("nope"))
    ok = schedule(workspace_id=WS, delay="0s", kind="c.ok")
    bad = schedule(workspace_id=WS, delay="0s", kind="c.fail", max_attempts=max_attempts)

    with pytest.raises(CommandError, match="1 wake\\(s\\) failed") as info:
        call_command("runwakes", "--once", stdout=StringIO(), stderr=StringIO())

    assert info.value.returncode == 1
    assert Wake.objects.get(pk=ok.pk).state == State.FIRED, "one failure does not stop the pass"
    assert Wake.objects.get(pk=bad.pk).state == (State.PENDING if max_attempts > 1 else State.DEAD)


def test_once_with_nothing_due_returns_normally():
    call_command("runwakes", "--once", stdout=StringIO(), stderr=StringIO())


def test_once_as_a_process_exit_status_says_whether_anything_failed(procs: Procs):
    """What cron sees: 0 after a clean pass, 1 after a pass with a failure (``probe.intent``
    raises when its intent says ``fail``)."""
    ok = schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={})
    clean = procs.manage("runwakes", "--once")
    assert clean.returncode == 0, clean.stderr
    assert Wake.objects.get(pk=ok.pk).state == State.FIRED

    bad = schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={"fail": True})
    failing = procs.manage("runwakes", "--once")
    assert failing.returncode == 1, failing.stderr
    assert "1 wake(s) failed" in failing.stderr
    assert WakeAttempt.objects.get(wake_id=bad.pk).outcome == Outcome.FAILED


def test_once_logs_one_summary_line(sinks, caplog):
    sinks("c.ok")
    sinks("c.fail", RuntimeError("nope"))
    for kind in ("c.ok", "c.ok", "c.fail"):
        schedule(workspace_id=WS, delay="0s", kind=kind)
    later = schedule(workspace_id=WS, delay="1h", kind="c.ok")

    with caplog.at_level(logging.INFO, logger="django_wakes"), pytest.raises(CommandError):
        call_command("runwakes", "--once", stdout=StringIO(), stderr=StringIO())

    (line,) = [r.getMessage() for r in caplog.records if "one pass (--once)" in r.getMessage()]
    assert re.match(r"runner \S+:\d+:\w+, one pass \(--once\): claimed=3 fired=2 expired=0 failed=1 dead=0 ", line)
    retry = Wake.objects.get(kind="c.fail").due_at  # the failed wake's retry comes before the later wake
    assert retry < Wake.objects.get(pk=later.pk).due_at
    assert line.endswith(f"next_due={retry.isoformat()}"), line


def test_once_with_nothing_due_still_logs_its_summary(caplog):
    with caplog.at_level(logging.INFO, logger="django_wakes"):
        call_command("runwakes", "--once", stdout=StringIO(), stderr=StringIO())
    (line,) = [r.getMessage() for r in caplog.records if "one pass (--once)" in r.getMessage()]
    assert "claimed=0 fired=0" in line and line.endswith("next_due=-")


def test_runwakes_logs_one_start_up_line(procs: Procs):
    """Runner id, kinds, queues, lanes, push or poll, lease: what an operator checks first."""
    runner = procs.runner(
        "starting",
        "--queues",
        "default,emails",
        "--lanes",
        "user:1",
        "--lease",
        "7s",
        "--interval",
        "0.5",
        "--concurrency",
        "2",
        "--no-listen",
    )
    wait_for(lambda: "starting:" in procs.log(runner) or procs.alive(runner), timeout=60, what="the start-up line")
    assert procs.stop(runner) == 0
    (line,) = [line for line in procs.log(runner).splitlines() if "starting:" in line]
    match = re.search(r"runner (\S+) starting: kinds=(\S+) (.*)$", line)
    assert match, line
    assert match.group(1).split(":")[1] == str(runner.pid), "the runner id names the process"
    assert {"probe.intent", "probe.record", "session_turn"} <= set(match.group(2).split(","))
    assert match.group(3) == "queues=default,emails lanes=user:1 push=off poll=0.5s lease=7s concurrency=2 batch=100"


def test_runwakes_start_up_line_says_push_where_it_listens(procs: Procs):
    runner = procs.runner("listening", "--interval", "2")
    wait_for(lambda: "starting:" in procs.log(runner) or procs.alive(runner), timeout=60, what="the start-up line")
    assert procs.stop(runner) == 0
    (line,) = [line for line in procs.log(runner).splitlines() if "starting:" in line]
    push = "push=LISTEN(default)" if connection.vendor == "postgresql" else "push=off"
    assert f"queues=all lanes=all {push} poll=2s lease=" in line, line


needs_sqlite_file = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's one write lock for the whole database file"
)


@contextmanager
def sqlite_write_lock() -> Iterator[None]:
    """Hold SQLite's write lock from another connection, as a busy runner beside this one does."""
    blocker = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


@needs_sqlite_file
def test_once_retries_a_claim_the_locked_database_rolled_back(procs: Procs):
    """Beside other runners on SQLite a claim can meet "database is locked"; --once has no next pass,
    so it tries again within its run instead of exiting 0 having fired nothing."""
    wake = schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={})
    with sqlite_write_lock():
        once = procs.start(["manage.py", "runwakes", "--once"], name="once", DATABASE_URL=f"{procs.db_url}?timeout=1")
        wait_for(
            lambda: "claim pass failed" in procs.log(once) or once.poll() is not None,
            timeout=60,
            what="the --once claim to meet the lock",
        )
    assert once.wait(timeout=60) == 0, procs.log(once)
    assert "database is locked" in procs.log(once)
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED


@needs_sqlite_file
def test_once_that_cannot_claim_exits_non_zero(procs: Procs):
    wake = schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={})
    with sqlite_write_lock():
        done = procs.manage("runwakes", "--once", DATABASE_URL=f"{procs.db_url}?timeout=0.2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the pass did not complete: the database refused it (OperationalError: database is locked)" in done.stderr
    assert Wake.objects.get(pk=wake.pk).state == State.PENDING


BAD_ARGUMENTS = [
    (["--interval", "0"], "--interval", "must be greater than 0"),
    (["--interval", "-1"], "--interval", "must be greater than 0"),
    (["--interval", "soon"], "--interval", "is not a number"),
    (["--interval", "nan"], "--interval", ""),
    (["--interval", "inf"], "--interval", "must be at most"),
    (["--interval", "1e300"], "--interval", "must be at most"),
    (["--shutdown-timeout", "inf"], "--shutdown-timeout", "must be at most"),
    (["--batch", "x"], "--batch", "is not a whole number"),
    (["--batch", "0"], "--batch", "must be at least 1"),
    (["--concurrency", "0"], "--concurrency", "must be at least 1"),
    (["--concurrency", "2.5"], "--concurrency", "is not a whole number"),
    (["--lease", "nonsense"], "--lease", "cannot parse"),
    (["--lease", "0s"], "--lease", "positive"),
    (["--lease", "-5m"], "--lease", ""),
    (["--gc-every", "weekly"], "--gc-every", "cannot parse"),
    (["--shutdown-timeout", "0"], "--shutdown-timeout", "must be greater than 0"),
    (["--lanes", ","], "--lanes", "needs at least one name"),
    (["--lanes", " , ,"], "--lanes", "needs at least one name"),
    (["--queues", ","], "--queues", "needs at least one name"),
]


@pytest.mark.parametrize(("argv", "option", "message"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _, _ in BAD_ARGUMENTS])
def test_runwakes_rejects_bad_arguments_before_doing_anything(sinks, argv, option, message):
    calls = sinks("c.ok")
    wake = schedule(workspace_id=WS, delay="0s", kind="c.ok")

    with pytest.raises(CommandError) as info:
        call_command("runwakes", "--once", *argv, stdout=StringIO(), stderr=StringIO())

    text = str(info.value)
    assert f"argument {option}" in text, text
    assert message in text, text
    assert calls == [] and Wake.objects.get(pk=wake.pk).state == State.PENDING


def test_runwakes_bad_argument_as_a_process_exits_2_with_usage(procs: Procs):
    result = procs.manage("runwakes", "--lanes", ",")
    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert "argument --lanes: needs at least one name" in result.stderr


def test_runwakes_lanes_option_is_a_trimmed_list(sinks):
    calls = sinks("c.lanes")
    a = schedule(workspace_id=WS, delay="0s", kind="c.lanes", serial_key="alpha")
    b = schedule(workspace_id=WS, delay="0s", kind="c.lanes", serial_key="beta")
    c = schedule(workspace_id=WS, delay="0s", kind="c.lanes", serial_key="gamma")
    call_command("runwakes", "--once", "--lanes", " alpha, gamma ,", stdout=StringIO(), stderr=StringIO())
    assert sorted(calls.ids) == sorted([a.pk, c.pk])
    assert Wake.objects.get(pk=b.pk).state == State.PENDING


# --------------------------------------------------------------------------------------------------
# wakes status
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def populated() -> dict[str, Any]:
    """Rows in every state, a backlog of two overdue wakes, one future wake, a live and a dead runner."""
    now = clock.now()
    overdue_old = WakeFactory(fire_at=now - timedelta(minutes=10), kind="c.status")
    overdue_new = WakeFactory(fire_at=now - timedelta(minutes=1))
    future = WakeFactory(fire_at=now + timedelta(hours=2))
    WakeFactory(state=State.FIRING, lease_until=now + timedelta(minutes=5), claim_token="t" * 32)
    WakeFactory.create_batch(3, settled=True)
    WakeFactory(settled=True, state=State.DEAD, last_error="boom")
    WakeFactory(state=State.CANCELLED, due_at=None)
    WakeFactory(settled=True, state=State.EXPIRED)
    live = RunnerRow.objects.create(
        id="host-a:101:abc", host="host-a", pid=101, started_at=now - timedelta(hours=1), heartbeat_at=now
    )
    RunnerRow.objects.create(
        id="host-b:202:def",
        host="host-b",
        pid=202,
        started_at=now - timedelta(days=1),
        heartbeat_at=now - timedelta(hours=1),
    )
    return {"now": now, "oldest": overdue_old, "newer": overdue_new, "future": future, "live": live}


EXPECTED_STATES = {
    "pending": 3,
    "firing": 1,
    "fired": 3,
    "expired": 1,
    "cancelled": 1,
    "dead": 1,
    "superseded": 0,
}


def test_status_prints_a_table_of_states_backlog_next_due_and_live_runners(populated):
    out = run("wakes", "status")

    for state, count in EXPECTED_STATES.items():
        assert re.search(rf"^\s+{state}\s+{count}$", out, re.M), f"no '{state} {count}' row in:\n{out}"
    assert re.search(r"^\s+due now\s+2$", out, re.M), out
    oldest = populated["oldest"]
    match = re.search(rf"^Oldest overdue: wake {oldest.pk} \(c\.status\), due (\d+)m(\d\d)s ago \((.+)\)$", out, re.M)
    assert match, out
    assert int(match.group(1)) >= 10
    assert match.group(3) == local_time(oldest.due_at), "the due time to the second, in TIME_ZONE, zone named"
    match = re.search(r"^Next due:       in (1h59m|2h00m) \((.+)\)$", out, re.M)
    assert match, out
    assert match.group(2) == local_time(populated["future"].due_at)
    assert "Live runners (1)" in out
    assert re.search(r"^  host-a:101:abc  host=host-a pid=101  up 1h00m  heartbeat [\d.]+s ago", out, re.M), out
    assert "host-b" not in out, "a runner without a recent heartbeat is not live"
    assert ".000" not in out and "+00:00" not in out, "no raw ISO timestamps in the human table"


def local_time(moment: Any) -> str:
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def test_status_json_is_the_same_snapshot_for_scripts(populated):
    snap = json.loads(run("wakes", "status", "--json"))

    assert snap["states"] == EXPECTED_STATES
    assert snap["due_backlog"] == 2
    oldest = populated["oldest"]
    assert snap["oldest_overdue"]["id"] == oldest.pk
    assert snap["oldest_overdue"]["kind"] == "c.status"
    assert snap["oldest_overdue"]["lane"] is None
    assert snap["oldest_overdue"]["late_seconds"] >= 600
    assert snap["oldest_overdue"]["due_at"] == oldest.due_at.isoformat(), "machine values: ISO 8601"
    assert snap["next_due_at"] == populated["future"].due_at.isoformat()
    assert [(r["id"], r["host"], r["pid"]) for r in snap["runners"]] == [("host-a:101:abc", "host-a", 101)]
    assert snap["attention"] == {
        "overdue": 2,  # due over a minute ago
        "unwakeable": 2,  # neither kind has a sink here, and no live runner recorded kinds
        "hung": 0,
        "lapsed": 0,
        "dead": 1,
        "dead_last_24h": 1,
    }


@pytest.fixture
def troubled(sinks) -> dict[str, Any]:
    """What the dashboard leads with: a hung wake, a lapsed one, unwakeable ones, dead letters old and new."""
    sinks("c.fires")
    now = clock.now()
    RunnerRow.objects.create(
        id="host-a:1:x", host="host-a", pid=1, started_at=now - timedelta(hours=1), heartbeat_at=now, kinds=["c.fires"]
    )
    hung = WakeFactory(
        kind="c.fires",
        state=State.FIRING,
        claimed_at=now - timedelta(minutes=5),  # longer than the 15 s lease, which its runner renews
        lease_until=now + timedelta(seconds=10),
        claim_token="h" * 32,
    )
    WakeFactory(kind="c.fires", state=State.FIRING, lease_until=now - timedelta(minutes=1), claim_token="l" * 32)
    unwakeable = [WakeFactory(kind="c.nobody", fire_at=now - timedelta(seconds=5)) for _ in range(2)]
    WakeFactory(kind="c.nobody", fire_at=now + timedelta(hours=1))  # not due: not unwakeable yet
    WakeFactory(settled=True, state=State.DEAD, last_error="x", updated_at=now - timedelta(days=3))
    WakeFactory.create_batch(2, settled=True, state=State.DEAD, last_error="y")
    return {"hung": hung, "unwakeable": unwakeable}


def test_status_leads_with_hung_unwakeable_and_dead_counts(troubled):
    snap = json.loads(run("wakes", "status", "--json"))
    assert snap["attention"] == {
        "overdue": 0,
        "unwakeable": 2,  # due, of a kind no live runner fires (the lapsed c.fires one is re-driven)
        "hung": 1,
        "lapsed": 1,
        "dead": 3,
        "dead_last_24h": 2,
    }
    assert snap["fireable_kinds"] == ["c.fires"]

    out = run("wakes", "status")
    assert out.startswith("Needs attention\n"), out
    assert re.search(r"^  hung\s+1   firing longer than its lease", out, re.M), out
    assert re.search(r"^  unwakeable\s+2   ", out, re.M), out
    assert re.search(r"^  dead\s+3   dead letters .*; 2 in the last 24 h$", out, re.M), out
    assert "kinds: c.fires" in out


def test_status_colours_only_the_counts_that_need_a_person(troubled):
    coloured = run("wakes", "status", "--force-color")  # a common option after the subcommand
    assert re.search(r"\x1b\[[\d;]*m  hung\s+1", coloured), coloured
    assert re.search(r"^  overdue\s+0", coloured, re.M), "a zero count stays plain"
    assert "\x1b[" not in run("wakes", "status", "--no-color")


def test_status_of_an_empty_table():
    out = run("wakes", "status")
    assert all(re.search(rf"^\s+{s}\s+0$", out, re.M) for s in EXPECTED_STATES), out
    assert "Oldest overdue: none" in out
    assert "Next due:       none" in out
    assert "Live runners (0)" in out
    snap = json.loads(run("wakes", "status", "--json"))
    assert snap["states"] == dict.fromkeys(EXPECTED_STATES, 0)
    assert (snap["due_backlog"], snap["oldest_overdue"], snap["next_due_at"], snap["runners"]) == (0, None, None, [])
    assert snap["stopped_sessions"] == []


def test_status_as_a_process_prints_json_on_stdout(populated, procs: Procs):
    result = procs.manage("wakes", "status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["states"] == EXPECTED_STATES


# --------------------------------------------------------------------------------------------------
# wakes: Django's common options anywhere, help for every subcommand
# --------------------------------------------------------------------------------------------------

SUBCOMMANDS = ("status", "gc", "sync-periodic", "preview")
COMMON = ["--settings", "testproject.settings", "--pythonpath", ".", "-v", "2", "--traceback", "--no-color"]


def wakes_parser() -> Any:
    return WakesCommand().create_parser("manage.py", "wakes")


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_django_common_options_are_accepted_after_a_subcommand(subcommand):
    options = vars(wakes_parser().parse_args([subcommand, *COMMON, "--skip-checks"]))
    assert options["action"] == subcommand
    assert (options["settings"], options["pythonpath"], options["verbosity"]) == ("testproject.settings", ".", 2)
    assert options["traceback"] and options["no_color"] and options["skip_checks"]


def test_a_common_option_before_the_subcommand_is_kept():
    assert wakes_parser().parse_args(["-v", "3", "--traceback", "status"]).verbosity == 3
    assert wakes_parser().parse_args(["-v", "3", "--traceback", "status"]).traceback
    assert wakes_parser().parse_args(["status"]).verbosity == 1, "Django's default when given nowhere"
    assert wakes_parser().parse_args(["-v", "0", "status", "-v", "2"]).verbosity == 2, "the later one wins"


def test_common_options_after_the_subcommand_through_call_command():
    snap = json.loads(run("wakes", "status", "--json", "--verbosity", "2", "--settings", "testproject.settings"))
    assert snap["states"]["pending"] == 0


def test_status_with_settings_after_the_subcommand_as_a_process(procs: Procs):
    """The line from the issue: ``manage.py wakes status --settings mysite.settings`` (was: unrecognized arguments)."""
    result = procs.manage("wakes", "status", "--settings", "testproject.settings", "--verbosity", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Needs attention"), result.stdout

    missing = procs.manage("wakes", "status", "--settings", "no_such_project.settings")
    assert missing.returncode != 0
    assert "No module named 'no_such_project'" in missing.stderr, "the settings given after the subcommand are used"


def test_traceback_after_the_subcommand_shows_the_trace(procs: Procs):
    plain = procs.manage("wakes", "gc", "--older-than", "soon")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr, plain.stderr
    traced = procs.manage("wakes", "gc", "--older-than", "soon", "--traceback")
    assert traced.returncode == 1 and "Traceback (most recent call last)" in traced.stderr, traced.stderr


def test_help_names_every_subcommand_with_its_help():
    parser = wakes_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subparsers.choices) >= set(SUBCOMMANDS)
    text = parser.format_help()
    for name, sub in subparsers.choices.items():
        assert re.search(rf"^    {re.escape(name)}\s+\S", text, re.M), f"{name} has no help line in:\n{text}"
        assert name in WakesCommand.help, f"the command's description names {name}"
        assert sub.description, f"'wakes {name} --help' says what {name} does"
        assert "--settings" in sub.format_help()


def test_help_as_a_process(procs: Procs):
    result = procs.manage("wakes", "--help")
    assert result.returncode == 0, result.stderr
    for name in SUBCOMMANDS:
        assert re.search(rf"^    {re.escape(name)}\s+\S", result.stdout, re.M), result.stdout


def test_wakes_without_an_action_is_an_error():
    with pytest.raises(CommandError):
        call_command("wakes", stdout=StringIO(), stderr=StringIO())


# --------------------------------------------------------------------------------------------------
# wakes gc
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def aged() -> dict[str, Any]:
    now = clock.now()

    def at(days: int) -> dict[str, Any]:
        moment = now - timedelta(days=days)
        return {"created_at": moment, "updated_at": moment}

    old_terminal = [
        WakeFactory(settled=True, **at(40)),
        WakeFactory(settled=True, state=State.DEAD, last_error="x", **at(40)),
        WakeFactory(settled=True, state=State.EXPIRED, **at(40)),
        WakeFactory(state=State.CANCELLED, due_at=None, **at(40)),
    ]
    for wake in old_terminal[:2]:
        WakeAttemptFactory(wake=wake, outcome=Outcome.FAILED)
    ten_days = WakeFactory(settled=True, **at(10))
    live = [
        WakeFactory(fire_at=now + timedelta(days=1), **at(40)),
        WakeFactory(state=State.FIRING, lease_until=now + timedelta(minutes=1), claim_token="k" * 32, **at(40)),
    ]
    return {"old": old_terminal, "ten_days": ten_days, "live": live}


def ids(wakes: list[Wake]) -> set[int]:
    return {w.pk for w in wakes}


def test_gc_deletes_terminal_wakes_older_than_gc_after_by_default(aged):
    out = run("wakes", "gc")

    assert out.strip() == "deleted 4 terminal wake(s) older than 30d"
    assert set(Wake.objects.values_list("pk", flat=True)) == ids([aged["ten_days"], *aged["live"]])
    assert not WakeAttempt.objects.filter(wake_id__in=ids(aged["old"])).exists()


def test_gc_older_than_overrides_the_setting_and_never_touches_live_wakes(aged):
    out = run("wakes", "gc", "--older-than", "5d")
    assert out.strip() == "deleted 5 terminal wake(s) older than 5d"
    assert set(Wake.objects.values_list("pk", flat=True)) == ids(aged["live"])
    assert run("wakes", "gc", "--older-than", "5d").strip() == "deleted 0 terminal wake(s) older than 5d"


def test_gc_follows_the_gc_after_setting(aged, settings):
    settings.WAKES = {**settings.WAKES, "GC_AFTER": "7d"}
    assert run("wakes", "gc").strip() == "deleted 5 terminal wake(s) older than 7d"


def test_gc_disabled_by_setting_needs_an_explicit_older_than(aged, settings):
    settings.WAKES = {**settings.WAKES, "GC_AFTER": None}
    with pytest.raises(CommandError, match="GC_AFTER.*None"):
        run("wakes", "gc")
    assert Wake.objects.count() == 7
    assert run("wakes", "gc", "--older-than", "30d").strip() == "deleted 4 terminal wake(s) older than 30d"


@pytest.mark.parametrize("value", ["soon", "-3d", ""])
def test_gc_rejects_a_bad_older_than(aged, value):
    with pytest.raises(CommandError, match="--older-than"):
        run("wakes", "gc", "--older-than", value)
    assert Wake.objects.count() == 7
