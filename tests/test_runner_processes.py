"""``manage.py runwakes`` as real processes: graceful shutdown, push and backstop, sleeping to the next
due wake, the lease heartbeat, the runner registry, ``--concurrency`` and a chaos test with SIGKILLs.

Runners are subprocesses pointed at the pytest-django test database (``transaction=True``, so what
the test writes is committed and visible to them), started by the ``procs`` fixture
(``tests/processes.py``). Their sink is ``probe.intent`` (``testproject/probe_sinks.py``): it
writes a ``start`` line before it runs and an ``end`` line after, one JSON-lines file per process,
with ``time.monotonic_ns()`` stamps comparable across processes. Nothing here asserts on latency:
every wait is bounded and generous. Where a test must show that something happened *because of* a
mechanism (a push, sleeping until the next due wake), the runner's polling backstop is made far
longer than the bounded wait, so nothing else can make it pass. Latencies are printed for
information only (``pytest -s``).

Single-runner tests also run on SQLite (its test database is a file the runners open too); tests
with several runners, LISTEN/NOTIFY or SIGKILL chaos need PostgreSQL or MariaDB.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from django_wakes import schedule, signals
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.models import Runner as RunnerRow
from tests.processes import Procs, wait_for

KIND = "probe.intent"
WS = "ws-runner-procs"

pytestmark = [pytest.mark.multiprocess, pytest.mark.django_db(transaction=True)]

needs_server = pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="several runner processes racing for rows need a server database (row locks, SKIP LOCKED); "
    "SQLite serialises every writer behind one file lock",
)
needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="LISTEN/NOTIFY push hints exist only on PostgreSQL"
)


# --------------------------------------------------------------------------------------------------
# Process helpers
# --------------------------------------------------------------------------------------------------


def pid_of(runner_id: str) -> int:
    return int(runner_id.split(":")[1])


def probe(*, lane: str | None = None, delay: str = "0s", max_attempts: int | None = None, **intent: Any) -> Wake:
    return schedule(workspace_id=WS, kind=KIND, delay=delay, serial_key=lane, intent=intent, max_attempts=max_attempts)


def fired(*wakes: Wake) -> bool:
    return Wake.objects.filter(pk__in=[w.pk for w in wakes], state=State.FIRED).count() == len(wakes)


def latency_ms(wake: Wake) -> float:
    attempt = WakeAttempt.objects.filter(wake_id=wake.pk).order_by("number").first()
    return (attempt.started_at - wake.created_at).total_seconds() * 1000


def settle_canary(procs: Procs, runner: subprocess.Popen) -> None:
    """Fire one due-now wake and wait for it: the runner is past its first passes and asleep."""
    canary = probe(canary=True)
    wait_for(lambda: fired(canary) or procs.alive(runner), timeout=60, what="the runner to fire a canary wake")
    # Let the pass that fired it finish (it reads the next due time, then sleeps). This pause only
    # decides whether what follows is created while the runner sleeps; no verdict depends on it.
    time.sleep(1.0)


def pg_listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
        )
        return cursor.fetchone()[0] > 0


# --------------------------------------------------------------------------------------------------
# Graceful shutdown
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_mid_sink_finishes_the_wake_in_hand_exits_0_and_deregisters(procs: Procs, signum: int):
    slow = probe(sleep=2.0)
    runner = procs.runner("runner", "--interval", "0.5")
    wait_for(
        lambda: procs.phase("start", id=slow.pk) or procs.alive(runner),
        timeout=60,
        what="the runner to enter the 2 s sink",
    )
    row = RunnerRow.objects.get(pid=runner.pid)
    assert row.host == socket.gethostname()
    behind = probe(sleep=0)  # due now, but the runner is busy: after the signal it must not start it

    runner.send_signal(signum)
    signalled = time.monotonic_ns()
    rc = runner.wait(timeout=60)

    log = procs.log(runner)
    assert rc == 0, log
    assert f"signal {int(signum)}: no new claims" in log
    ends = procs.phase("end", id=slow.pk)
    assert len(ends) == 1 and ends[0]["t"] > signalled, "the wake in hand ran to its end after the signal"
    slow.refresh_from_db()
    assert slow.state == State.FIRED and slow.attempts == 1
    assert [a.outcome for a in WakeAttempt.objects.filter(wake=slow)] == [Outcome.FIRED]
    assert not RunnerRow.objects.filter(pk=row.pk).exists(), "a clean exit deregisters the runner"
    behind.refresh_from_db()
    assert not procs.phase("start", id=behind.pk), "no new wake starts after the signal"
    assert (behind.state, behind.attempts, behind.lease_until) == (State.PENDING, 0, None)


def test_a_second_signal_while_busy_exits_at_once_and_leaves_the_lease_to_lapse(procs: Procs):
    stuck = probe(sleep=120)
    runner = procs.runner("runner", "--interval", "0.5")
    wait_for(
        lambda: procs.phase("start", id=stuck.pk) or procs.alive(runner),
        timeout=60,
        what="the runner to enter the 120 s sink",
    )

    runner.send_signal(signal.SIGTERM)
    wait_for(
        lambda: "no new claims" in procs.log(runner) or procs.alive(runner),
        timeout=30,
        what="the first signal to be handled",
    )
    runner.send_signal(signal.SIGTERM)
    rc = runner.wait(timeout=30)  # far less than the 120 s the sink would take

    assert rc not in (0, None), procs.log(runner)
    assert "second signal" in procs.log(runner)
    assert not procs.phase("end", id=stuck.pk)
    stuck.refresh_from_db()
    assert stuck.state == State.FIRING and stuck.claim_token, "left firing: its lease will lapse"
    assert stuck.lease_until is not None and pid_of(stuck.claimed_by) == runner.pid
    assert not WakeAttempt.objects.filter(wake=stuck).exists()
    assert RunnerRow.objects.filter(pid=runner.pid).exists(), "no clean exit: the row ages out instead"


# --------------------------------------------------------------------------------------------------
# Push, backstop, sleeping until the next due wake
# --------------------------------------------------------------------------------------------------


def test_without_push_the_backstop_fires_a_wake_created_by_another_process(procs: Procs):
    """``--no-listen`` (and on SQLite/MariaDB there is no push across processes at all): the
    runner only learns of a wake created elsewhere on its next backstop tick (here every 3 s)."""
    runner = procs.runner("runner", "--no-listen", "--interval", "3")
    settle_canary(procs, runner)

    wake = probe()  # created in this process: no NOTIFY reaches the runner
    wait_for(
        lambda: fired(wake) or procs.alive(runner),
        timeout=60,
        what="the backstop tick to fire a wake no push announced",
    )
    print(f"\nbackstop ({connection.vendor}, --interval 3): due-to-claim {latency_ms(wake):.0f} ms")
    assert procs.stop(runner) == 0


@needs_postgres
def test_a_lost_notify_only_delays_the_wake_to_the_next_backstop_tick(procs: Procs):
    runner = procs.runner("runner", "--interval", "3")
    settle_canary(procs, runner)
    wait_for(pg_listening, timeout=30, what="the runner's LISTEN connection")

    uid = "django_wakes.engine.notify.created"
    from django_wakes.engine import notify as push

    assert signals.wake_created.disconnect(dispatch_uid=uid), "push hint receiver not connected"
    try:
        wake = probe()  # committed without its NOTIFY: the hint is lost
    finally:
        signals.wake_created.connect(push._on_created, dispatch_uid=uid)
    wait_for(
        lambda: fired(wake) or procs.alive(runner),
        timeout=60,
        what="the backstop to fire the wake whose NOTIFY was lost",
    )
    print(f"\nlost NOTIFY (--interval 3): due-to-claim {latency_ms(wake):.0f} ms")
    assert procs.stop(runner) == 0


@needs_postgres
def test_notify_from_another_process_wakes_a_listening_runner(procs: Procs):
    runner = procs.runner("runner", "--interval", "60")
    settle_canary(procs, runner)
    wait_for(pg_listening, timeout=30, what="the runner's LISTEN connection")

    samples = []
    for _ in range(5):
        wake = probe()  # this process commits and NOTIFYs; the runner sleeps up to 60 s otherwise
        wait_for(
            lambda w=wake: fired(w) or procs.alive(runner),
            timeout=20,
            what="the NOTIFY to wake the runner (its backstop is 60 s)",
        )
        samples.append(latency_ms(wake))
    print(f"\npush (NOTIFY) due-to-claim ms: {', '.join(f'{s:.1f}' for s in samples)}")
    assert procs.stop(runner) == 0


def test_a_runner_sleeps_until_the_next_due_wake_not_the_backstop(procs: Procs):
    wake = probe(delay="3s")
    runner = procs.runner("runner", "--interval", "60", "--no-listen")
    wait_for(
        lambda: fired(wake) or procs.alive(runner),
        timeout=30,
        what="the wake due in 3 s to fire (the runner's backstop is 60 s)",
    )
    attempt = WakeAttempt.objects.get(wake=wake)
    assert attempt.started_at >= wake.fire_at, "never early"
    late_ms = (attempt.started_at - wake.fire_at).total_seconds() * 1000
    print(f"\nsleep-to-due ({connection.vendor}): lateness {late_ms:.0f} ms")
    assert procs.stop(runner) == 0


# --------------------------------------------------------------------------------------------------
# Heartbeat
# --------------------------------------------------------------------------------------------------


@needs_server
def test_a_slow_sink_is_not_redriven_while_its_runner_renews_the_lease(procs: Procs):
    slow = probe(sleep=6)
    runner_a = procs.runner("runner-a", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: procs.phase("start", id=slow.pk) or procs.alive(runner_a),
        timeout=60,
        what="runner A to enter the 6 s sink",
    )
    runner_b = procs.runner("runner-b", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: RunnerRow.objects.filter(pid=runner_b.pid).exists() or procs.alive(runner_b),
        timeout=30,
        what="runner B to register",
    )
    assert not procs.phase("end", id=slow.pk), "runner B came up too late to test anything; slow machine?"

    wait_for(
        lambda: fired(slow) or len(procs.phase("start", id=slow.pk)) > 1 or procs.alive(runner_a, runner_b),
        timeout=60,
        what="the slow wake to settle",
    )
    assert procs.stop(runner_a) == 0 and procs.stop(runner_b) == 0

    assert [(r["pid"], r["attempt"]) for r in procs.phase("start", id=slow.pk)] == [(runner_a.pid, 1)]
    slow.refresh_from_db()
    assert slow.attempts == 1, "the wake was taken over although its runner was alive and renewing"
    attempts = list(WakeAttempt.objects.filter(wake=slow))
    assert [(a.number, a.outcome, pid_of(a.runner_id)) for a in attempts] == [(1, Outcome.FIRED, runner_a.pid)]


@needs_server
def test_a_wake_finishing_after_sigterm_keeps_its_lease_and_is_not_redriven(procs: Procs):
    """Graceful shutdown with a short lease and a second runner: the draining runner still renews."""
    slow = probe(sleep=5)
    runner_a = procs.runner("runner-a", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: procs.phase("start", id=slow.pk) or procs.alive(runner_a),
        timeout=60,
        what="runner A to enter the 5 s sink",
    )
    runner_b = procs.runner("runner-b", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: RunnerRow.objects.filter(pid=runner_b.pid).exists() or procs.alive(runner_b),
        timeout=30,
        what="runner B to register",
    )
    runner_a.send_signal(signal.SIGTERM)
    assert not procs.phase("end", id=slow.pk), "the sink ended before the signal; slow machine?"

    assert runner_a.wait(timeout=60) == 0, procs.log(runner_a)
    wait_for(lambda: fired(slow) or procs.alive(runner_b), timeout=30, what="the wake to be fired")
    assert procs.stop(runner_b) == 0
    assert "taken over" not in procs.log(runner_a)
    assert [(r["pid"], r["phase"]) for r in procs.phase("start", id=slow.pk)] == [(runner_a.pid, "start")]
    attempts = list(WakeAttempt.objects.filter(wake=slow))
    assert [(a.number, a.outcome, pid_of(a.runner_id)) for a in attempts] == [(1, Outcome.FIRED, runner_a.pid)]


@needs_server
def test_a_killed_runners_wake_is_redriven_by_another_after_the_lease_lapses(procs: Procs):
    wake = probe(sleep=120, slow_until_guarded=True)
    runner_a = procs.runner("runner-a", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: procs.phase("start", id=wake.pk) or procs.alive(runner_a), timeout=60, what="runner A to enter the sink"
    )
    runner_b = procs.runner("runner-b", "--interval", "0.2", "--lease", "1s", WAKES_LEASE="1s")
    wait_for(
        lambda: RunnerRow.objects.filter(pid=runner_b.pid).exists() or procs.alive(runner_b),
        timeout=30,
        what="runner B to register",
    )
    lease_seen = Wake.objects.get(pk=wake.pk).lease_until

    procs.kill(runner_a)
    wait_for(lambda: fired(wake) or procs.alive(runner_b), timeout=60, what="runner B to re-drive the orphan")
    assert procs.stop(runner_b) == 0

    wake.refresh_from_db()
    assert wake.attempts == 1  # the first death is not charged: nobody had recorded the sink's start
    attempts = list(WakeAttempt.objects.filter(wake=wake).order_by("id"))
    assert [(a.number, a.outcome, pid_of(a.runner_id)) for a in attempts] == [
        (1, Outcome.ABANDONED, runner_a.pid),
        (1, Outcome.FIRED, runner_b.pid),
    ]
    assert attempts[1].started_at >= lease_seen, "re-driven only after the (renewed) lease lapsed"
    starts = procs.phase("start", id=wake.pk)
    assert [r["pid"] for r in starts] == [runner_a.pid, runner_b.pid]
    assert starts[0]["fence"] < starts[1]["fence"]


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------


def _live_runners() -> list[dict[str, Any]]:
    out = StringIO()
    call_command("wakes", "status", "--json", stdout=out)
    return json.loads(out.getvalue())["runners"]


def test_status_lists_a_live_runner_and_a_killed_one_ages_out(procs: Procs, settings):
    settings.WAKES = {**settings.WAKES, "LEASE": "1s"}  # what this process judges staleness by
    runner = procs.runner("runner", "--interval", "0.5", WAKES_LEASE="1s")
    wait_for(
        lambda: RunnerRow.objects.filter(pid=runner.pid).exists() or procs.alive(runner),
        timeout=60,
        what="the runner to register",
    )

    shown = procs.manage("wakes", "status", "--json", WAKES_LEASE="1s")
    assert shown.returncode == 0, shown.stderr
    runners = json.loads(shown.stdout)["runners"]
    assert [(r["host"], r["pid"]) for r in runners] == [(socket.gethostname(), runner.pid)]
    assert pid_of(runners[0]["id"]) == runner.pid

    procs.kill(runner)
    wait_for(lambda: not _live_runners(), timeout=60, what="the killed runner to age out of the live list")
    assert RunnerRow.objects.filter(pid=runner.pid).exists(), "a killed runner cannot deregister"


# --------------------------------------------------------------------------------------------------
# --concurrency
# --------------------------------------------------------------------------------------------------


def _intervals(records: list[dict[str, Any]], kills: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """One interval per sink run (wake, claim, pid): [start, end]; a run cut by a kill ends at the kill.

    A claim is told apart by its fencing token: attempt numbers repeat when a claim is not charged.
    """
    kills = kills or {}
    runs: dict[tuple[int, int, int], dict[str, Any]] = {}
    for r in records:
        run = runs.setdefault(
            (r["id"], r["fence"], r["pid"]),
            {
                "id": r["id"],
                "attempt": r["attempt"],
                "fence": r["fence"],
                "pid": r["pid"],
                "lane": r["lane"],
                "thread": r["thread"],
            },
        )
        run[r["phase"]] = r["t"]
    for run in runs.values():
        run["completed"] = "end" in run
        run["stop"] = run.get("end", run.get("raise", kills.get(run["pid"])))
    return list(runs.values())


def _lane_overlaps(runs: list[dict[str, Any]]) -> list[tuple]:
    overlaps = []
    by_lane: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run["lane"] is not None:
            by_lane[run["lane"]].append(run)
    for lane, rows in by_lane.items():
        rows.sort(key=lambda r: r["start"])
        for prev, cur in zip(rows, rows[1:], strict=False):
            if cur["start"] < prev["stop"]:
                overlaps.append((lane, prev["id"], prev["pid"], cur["id"], cur["pid"]))
    return overlaps


def _peak_parallel(runs: list[dict[str, Any]]) -> int:
    events = sorted([(r["start"], 1) for r in runs] + [(r["stop"], -1) for r in runs])
    peak = active = 0
    for _, delta in events:
        active += delta
        peak = max(peak, active)
    return peak


def test_concurrency_fires_lanes_in_parallel_never_two_of_one_lane(procs: Procs):
    lanes, per_lane = 6, 6
    with transaction.atomic():
        wakes = [probe(lane=f"c-{n % lanes}", sleep=0.2) for n in range(lanes * per_lane)]
    runner = procs.runner("runner", "--interval", "0.2", "--concurrency", "4")
    wait_for(lambda: fired(*wakes) or procs.alive(runner), timeout=120, what="every wake to fire")
    assert procs.stop(runner) == 0

    runs = _intervals(procs.records(KIND))
    assert all(run["completed"] for run in runs)
    assert Counter(run["id"] for run in runs) == {w.pk: 1 for w in wakes}, "each wake fired exactly once"
    assert {run["pid"] for run in runs} == {runner.pid}
    assert _lane_overlaps(runs) == [], "two wakes of one lane fired at once"
    for lane in {run["lane"] for run in runs}:
        order = [run["id"] for run in sorted(runs, key=lambda r: r["start"]) if run["lane"] == lane]
        assert order == sorted(order), f"lane {lane} not fired earliest first"
    peak = _peak_parallel(runs)
    threads = {run["thread"] for run in runs}
    print(f"\n--concurrency 4: peak {peak} sinks at once on {len(threads)} threads")
    assert 2 <= peak <= 4, f"--concurrency 4 should fire lanes in parallel, at most 4 at once (peak {peak})"


# --------------------------------------------------------------------------------------------------
# Chaos: several runners, random SIGKILLs, restarts
# --------------------------------------------------------------------------------------------------

CHAOS_WAKES = 600
CHAOS_LANES = 12
CHAOS_KILLS = 6
CHAOS_LEASE = "2s"
SLOW_SINK = 2.5  # seconds: longer than the lease


@needs_server
@pytest.mark.parametrize("runner_count", [2, 4])
def test_chaos_runners_killed_at_random_and_restarted(procs: Procs, runner_count: int):
    """``runner_count`` runners fire 600 wakes (12 lanes + lane-less, some due over the next seconds,
    5 % failing for good, 8 with a sink slower than the lease) while the test SIGKILLs a runner
    ``CHAOS_KILLS`` times (half of the kills aimed at a runner inside a slow sink) and starts a
    replacement each time. Lease 2 s; the slow sinks take 2.5 s, so they need the heartbeat.

    What must hold at the end, from three independent records — the sinks' start/end lines, the
    ``WakeAttempt`` history, and the test's own list of killed pids:

    - Nothing stuck or lost: every wake is ``fired`` (or ``dead`` for the ones that always fail);
      none is ``pending`` or ``firing``; no lane lock is left.
    - Exactly once per claim: a claim is one fencing token of one wake (tokens grow claim after
      claim). Each claim has exactly one history row, and at most one sink run, by the process that
      holds that claim. Attempt numbers grow only after a charged claim.
    - Only a killed runner ever loses a claim: every claim but the last is ``interrupted`` (its sink
      had started: charged) or ``abandoned`` (not known to have started: not charged), and each
      belongs to a pid the test killed (live runners renew their leases). An ``interrupted`` claim
      always has a sink run.
    - At least once, and not twice by live runners: the last attempt of a fired wake has a
      completed sink run by its runner; any *other* completed run of that wake belongs to an
      interrupted attempt of a killed runner (it died between its sink returning and its settle
      committing — the at-least-once window, counted and printed). So the number of completed
      runs per wake equals 1 + the number of those crash windows.
    - Lanes are single file: within a lane no two sink runs overlap in time; a run cut by a kill
      has no end line and counts as lasting until the kill (the takeover waits for the lease).
    - Lanes keep their order: the wakes of a lane start in ``fire_at`` order.
    """
    rng = random.Random(4000 + runner_count)
    now = datetime.now(UTC)
    plan = []
    for i in range(CHAOS_WAKES):
        lane = None if i % 10 == 9 else f"lane-{i % CHAOS_LANES:02d}"
        fail = i % 20 == 7
        slow = not fail and i % 75 == 3
        # Most are overdue; the rest come due over the next ~8 s, so work keeps flowing while we kill.
        offset = timedelta(milliseconds=rng.randint(-3000, -1) if i % 3 else rng.randint(0, 8000))
        plan.append((lane, fail, slow, now + offset))
    order = list(range(CHAOS_WAKES))
    rng.shuffle(order)
    with transaction.atomic():
        for i in order:
            lane, fail, slow, at = plan[i]
            intent = {"i": i, "fail": True} if fail else {"i": i}
            intent.update({"sleep": SLOW_SINK} if slow else {"sleep_min": 0.002, "sleep_max": 0.008})
            schedule(workspace_id=WS, kind=KIND, at=at, serial_key=lane, intent=intent, max_attempts=1 if fail else 10)
    wakes = {w.pk: w for w in Wake.objects.filter(workspace_id=WS)}
    failing = {pk for pk, w in wakes.items() if w.intent.get("fail")}
    slow_ids = {pk for pk, w in wakes.items() if w.intent.get("sleep") == SLOW_SINK}

    args = ["--interval", "0.2", "--lease", CHAOS_LEASE]
    serial = [0]

    def start() -> subprocess.Popen:
        serial[0] += 1
        return procs.runner(f"runner-{serial[0]}", *args, WAKES_LEASE=CHAOS_LEASE)

    live = [start() for _ in range(runner_count)]
    kills: dict[int, int] = {}
    aimed = 0
    began = time.monotonic()
    for k in range(CHAOS_KILLS):
        time.sleep(rng.uniform(0.4, 1.2))
        victim = None
        if k % 2 == 0:  # aim at a runner inside a slow sink, if one is there right now
            records = procs.records(KIND)
            ended = {(r["pid"], r["id"], r["attempt"]) for r in records if r["phase"] != "start"}
            busy = {
                r["pid"]
                for r in records
                if r["phase"] == "start" and r["id"] in slow_ids and (r["pid"], r["id"], r["attempt"]) not in ended
            }
            candidates = [p for p in live if p.pid in busy and p.poll() is None]
            if candidates:
                victim = rng.choice(candidates)
                aimed += 1
        if victim is None:
            victim = rng.choice(live)
        procs.alive(*live)
        kills[victim.pid] = procs.kill(victim)
        live.remove(victim)
        live.append(start())

    settled = {State.FIRED, State.DEAD}
    wait_for(
        lambda: not Wake.objects.filter(workspace_id=WS).exclude(state__in=settled).exists() or procs.alive(*live),
        timeout=180,
        interval=0.5,
        what=f"every wake to settle (states now: {Counter(Wake.objects.values_list('state', flat=True))})",
    )
    elapsed = time.monotonic() - began
    for runner in live:
        assert procs.stop(runner) == 0, procs.log(runner)

    # -- nothing stuck or lost ----------------------------------------------------------------------
    final = {w.pk: w for w in Wake.objects.filter(workspace_id=WS)}
    assert set(final) == set(wakes)
    assert {pk for pk, w in final.items() if w.state == State.DEAD} == failing
    assert {pk for pk, w in final.items() if w.state == State.FIRED} == set(wakes) - failing
    assert not Wake.objects.filter(lane_lock__isnull=False).exists()

    history: dict[int, list[WakeAttempt]] = defaultdict(list)
    for attempt in WakeAttempt.objects.filter(wake__workspace_id=WS).order_by("wake_id", "number", "id"):
        history[attempt.wake_id].append(attempt)
    runs = _intervals(procs.records(KIND), kills)
    runs_of: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        runs_of[(run["id"], run["fence"])].append(run)

    lost = (Outcome.INTERRUPTED, Outcome.ABANDONED)
    problems: list[str] = []
    crash_windows = interrupted = abandoned = 0
    for pk, wake in final.items():
        rows = sorted(history[pk], key=lambda a: a.id)
        if not rows:
            problems.append(f"wake {pk}: no attempt history")
            continue
        # One row per claim, fencing tokens growing; numbers grow only after a charged claim.
        fences = [a.fence for a in rows]
        if fences != sorted(set(fences)):
            problems.append(f"wake {pk}: fencing tokens {fences} do not grow claim after claim")
        expected_number = 1
        for a in rows:
            if a.number != expected_number:
                problems.append(f"wake {pk}: attempt numbers {[(r.number, r.outcome) for r in rows]}")
                break
            expected_number += 0 if a.outcome == Outcome.ABANDONED else 1
        if rows[-1].number != wake.attempts:
            problems.append(f"wake {pk}: last attempt {rows[-1].number} but attempts = {wake.attempts}")
        for a in rows[:-1] + ([rows[-1]] if rows[-1].outcome in lost else []):
            if a.outcome not in lost:
                problems.append(f"wake {pk}: claim {a.fence} {a.outcome} but a later claim followed")
            elif pid_of(a.runner_id) not in kills:
                problems.append(f"wake {pk}: claim {a.fence} {a.outcome} although pid {pid_of(a.runner_id)} lived")
            interrupted += a.outcome == Outcome.INTERRUPTED
            abandoned += a.outcome == Outcome.ABANDONED
        for a in rows:
            claim_runs = runs_of.get((pk, a.fence), [])
            if len(claim_runs) > 1:
                problems.append(f"wake {pk}: claim {a.fence} ran {len(claim_runs)} times")
            if any(r["pid"] != pid_of(a.runner_id) for r in claim_runs):
                problems.append(f"wake {pk}: claim {a.fence} ran in a process that did not hold it")
            if a.outcome == Outcome.INTERRUPTED and not claim_runs:
                problems.append(f"wake {pk}: claim {a.fence} charged as interrupted but its sink never started")
        recorded = {a.fence for a in rows}
        extra = [key for key in runs_of if key[0] == pk and key[1] not in recorded]
        if extra:
            problems.append(f"wake {pk}: sink runs under claims never recorded: {extra}")
        last = rows[-1]
        completed = [r for r in runs if r["id"] == pk and r["completed"]]
        if wake.state == State.FIRED:
            if last.outcome != Outcome.FIRED or not any(r["fence"] == last.fence for r in completed):
                problems.append(f"wake {pk}: fired, but its last claim has no completed sink run")
            windows = [r for r in completed if r["fence"] != last.fence]
            if any(r["pid"] not in kills for r in windows):
                problems.append(f"wake {pk}: completed twice by live runners")
            crash_windows += len(windows)
            if len(completed) != 1 + len(windows):
                problems.append(f"wake {pk}: {len(completed)} completed runs")
        elif last.outcome == Outcome.FAILED:
            if not any(r["fence"] == last.fence and "raise" in r for r in runs if r["id"] == pk):
                problems.append(f"wake {pk}: dead after a failure its sink never raised")
        elif last.outcome != Outcome.INTERRUPTED:
            problems.append(f"wake {pk}: dead with last attempt {last.outcome}")
    cut = [r for r in runs if "end" not in r and "raise" not in r]
    problems += [f"run of wake {r['id']} in live pid {r['pid']} never ended" for r in cut if r["pid"] not in kills]
    assert problems == [], f"{len(problems)} violations, e.g. {problems[:10]}"

    # -- lanes: single file, in order ------------------------------------------------------------
    overlaps = _lane_overlaps(runs)
    assert overlaps == [], f"{len(overlaps)} overlapping runs within a lane, e.g. {overlaps[:5]}"
    out_of_order = []
    for lane in {w.serial_key for w in wakes.values() if w.serial_key}:
        firsts: dict[int, int] = {}
        for run in runs:
            if run["lane"] == lane:
                firsts[run["id"]] = min(firsts.get(run["id"], run["start"]), run["start"])
        started = sorted(firsts, key=firsts.__getitem__)
        if started != sorted(started, key=lambda pk: (wakes[pk].fire_at, pk)):
            out_of_order.append(lane)
    assert out_of_order == [], f"lanes not started in fire_at order: {out_of_order}"

    assert len(kills) == CHAOS_KILLS
    per_pid = Counter(r["pid"] for r in runs if r["completed"])
    print(
        f"\nchaos {connection.vendor} x{runner_count}: {len(final)} wakes settled in {elapsed:.1f}s, "
        f"{len(kills)} kills ({aimed} aimed mid-sink), {interrupted} interrupted (charged) and {abandoned} "
        f"abandoned (uncharged) claims, "
        f"{len(cut)} sink runs cut by a kill, {crash_windows} re-runs after a completed-but-unsettled sink, "
        f"{len(per_pid)} processes fired"
    )
