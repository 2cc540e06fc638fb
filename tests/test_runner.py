"""The :class:`~django_wakes.runner.sweeper.Sweeper` in this process: passes, push nudges, stop, gc, heartbeat, signals.

Runners that loop run in a thread of the test process against the test database
(``transaction=True``: what the test writes is committed, so the runner thread's own connection sees
it). Every wait is bounded and generous; where a test needs to prove that something happened
*before* the polling backstop, the backstop is made far longer (30 s) than the bounded wait (10 s),
so only the behaviour under test can make it pass.

Runs on every database (SQLite included: its file-based test database is shared by the threads,
each with its own connection).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from django_wakes import clock, schedule, signals
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.models import Runner as RunnerRow
from django_wakes.runner import Sweeper
from django_wakes.sinks import registry
from tests.factories import WakeFactory
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-runner"
BACKSTOP = 30.0  # seconds: a polling interval no bounded wait below comes close to
WAIT = 10.0


class SpyRunner(Sweeper):
    """A runner that says when it goes to sleep between passes (so a test knows the loop is idle)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asleep = threading.Event()
        self.sleeps = 0

    def _sleep_until(self, next_at: Any) -> None:
        self.sleeps += 1
        self.asleep.set()
        try:
            super()._sleep_until(next_at)
        finally:
            self.asleep.clear()


class Looping:
    """``runner.run()`` in a thread; re-raises whatever the loop raised when joined."""

    def __init__(self, runner: Sweeper) -> None:
        self.runner = runner
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="test-runner-loop", daemon=True)

    def _main(self) -> None:
        try:
            self.runner.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc
        finally:
            connections.close_all()

    def start(self) -> Looping:
        self.thread.start()
        return self

    def join(self, timeout: float = WAIT) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"run() did not return within {timeout:.0f}s of stop()"
        if self.error is not None:
            raise self.error

    def stop(self, timeout: float = WAIT) -> None:
        self.runner.stop()
        self.join(timeout)


@pytest.fixture
def loop(transactional_db) -> Iterator[Callable[..., Looping]]:
    """Start runner loops in threads; stop and join them before the database is flushed."""
    started: list[Looping] = []
    releases: list[threading.Event] = []

    def start(runner: Sweeper, *, release: threading.Event | None = None) -> Looping:
        if release is not None:
            releases.append(release)
        looping = Looping(runner).start()
        started.append(looping)
        return looping

    yield start
    for event in releases:
        event.set()
    for looping in started:
        looping.runner.stop()
    for looping in started:
        looping.thread.join(30)
        assert not looping.thread.is_alive(), "a runner thread outlived its test"


def blocking_sink(kind: str) -> tuple[threading.Event, threading.Event, list[int]]:
    """Register a sink that records the wake id, signals ``entered`` and blocks until ``release``."""
    entered, release = threading.Event(), threading.Event()
    ids: list[int] = []

    def fn(wake: Wake, result: dict[str, Any]) -> None:
        ids.append(wake.pk)
        entered.set()
        assert release.wait(60), "test never released the blocking sink"

    registry.register(kind, fn, replace=True)
    return entered, release, ids


def due_now(kind: str, **kwargs: Any) -> Wake:
    return schedule(workspace_id=WS, delay="0s", kind=kind, **kwargs)


# --------------------------------------------------------------------------------------------------
# One pass
# --------------------------------------------------------------------------------------------------


def test_run_once_returns_a_report_of_the_pass(sinks):
    ok = sinks("t.ok")
    sinks("t.fail", RuntimeError("boom"))
    fired = [due_now("t.ok", intent={"n": n}) for n in range(2)]
    failing = due_now("t.fail")
    future = schedule(workspace_id=WS, delay="1h", kind="t.ok")

    runner = Sweeper()
    report = runner.run_once()

    assert report.claimed == 3
    assert (report.fired, report.failed, report.dead) == (2, 1, 0)
    assert report.outcomes == {fired[0].pk: "fired", fired[1].pk: "fired", failing.pk: "failed"}
    assert sorted(ok.ids) == sorted(w.pk for w in fired)
    assert (runner.fired, runner.failed) == (2, 1)
    failing.refresh_from_db()
    assert failing.state == State.PENDING and failing.attempts == 1 and "boom" in failing.last_error
    # The next moment worth a pass: the failed wake's backoff, which comes before the future wake.
    assert report.next_at == failing.due_at < Wake.objects.get(pk=future.pk).due_at
    assert Wake.objects.get(pk=future.pk).state == State.PENDING

    again = runner.run_once()
    assert (again.claimed, again.fired, again.failed) == (0, 0, 0), "nothing else is due"


def test_run_once_only_takes_its_lanes(sinks):
    calls = sinks("t.lanes")
    a = [due_now("t.lanes", serial_key="lane-a") for _ in range(2)]
    b = due_now("t.lanes", serial_key="lane-b")
    free = due_now("t.lanes")

    report = Sweeper(lanes=["lane-a"]).run_once()

    assert calls.ids == [a[0].pk], "one wake of lane-a per pass, earliest first; nothing of other lanes"
    assert report.claimed == 1
    assert Wake.objects.get(pk=b.pk).state == State.PENDING
    assert Wake.objects.get(pk=free.pk).state == State.PENDING


def test_sink_outcomes_send_wake_fired_failed_and_dead(sinks):
    sinks("t.ok")
    sinks("t.fail", RuntimeError("kaput"))
    ok = due_now("t.ok")
    retried = due_now("t.fail", max_attempts=3)
    dead = due_now("t.fail", max_attempts=1)
    seen: dict[str, list[dict[str, Any]]] = {"fired": [], "failed": [], "dead": []}

    def receiver(name: str) -> Callable[..., None]:
        def on_signal(sender: Any, **kwargs: Any) -> None:
            seen[name].append(kwargs)

        return on_signal

    receivers = {name: receiver(name) for name in seen}
    signals.wake_fired.connect(receivers["fired"], weak=False)
    signals.wake_failed.connect(receivers["failed"], weak=False)
    signals.wake_dead.connect(receivers["dead"], weak=False)
    try:
        report = Sweeper().run_once()
    finally:
        signals.wake_fired.disconnect(receivers["fired"])
        signals.wake_failed.disconnect(receivers["failed"])
        signals.wake_dead.disconnect(receivers["dead"])

    assert (report.fired, report.failed, report.dead) == (1, 2, 1)
    assert [(k["wake"].pk, k["outcome"]) for k in seen["fired"]] == [(ok.pk, Outcome.FIRED)]
    assert [k["wake"].pk for k in seen["failed"]] == [retried.pk]
    failed = seen["failed"][0]
    assert "kaput" in failed["error"]
    assert failed["retry_at"] == Wake.objects.get(pk=retried.pk).due_at
    assert [k["wake"].pk for k in seen["dead"]] == [dead.pk]
    assert "kaput" in seen["dead"][0]["error"]
    assert Wake.objects.get(pk=dead.pk).state == State.DEAD


def test_unwakeable_kind_is_logged_once_by_the_runner_then_fires_when_its_sink_returns(sinks, caplog):
    sinks("t.gone")
    wake = due_now("t.gone")
    other = due_now("t.gone")
    registry.unregister("t.gone")
    runner = Sweeper()

    with caplog.at_level(logging.DEBUG, logger="django_wakes"):
        passes = [runner.run_once() for _ in range(3)]

    assert [report.claimed for report in passes] == [0, 0, 0]
    mentions = [r for r in caplog.records if "no sink" in r.getMessage()]
    assert [r.levelno for r in mentions] == [logging.WARNING], (
        "a runner must warn once per kind no sink can fire, not once per wake nor once per pass"
    )
    said = mentions[0].getMessage()
    assert "kind='t.gone'" in said and any(f"wake {w.pk}" in said for w in (wake, other))
    assert "restarts" in said, "the warning says how a sink deployed later is picked up"
    wake.refresh_from_db()
    assert wake.state == State.PENDING and wake.attempts == 0
    assert not WakeAttempt.objects.filter(wake=wake).exists()

    calls = sinks("t.gone")  # registered again: the next pass fires it
    assert runner.run_once().fired == 2
    assert sorted(calls.ids) == [wake.pk, other.pk]
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED


# --------------------------------------------------------------------------------------------------
# The loop: push nudges, stop, gc
# --------------------------------------------------------------------------------------------------


def test_a_wake_created_due_now_in_this_process_nudges_the_sleeping_loop(sinks, loop):
    calls = sinks("t.push")
    runner = SpyRunner(interval=BACKSTOP)
    loop(runner)
    wait_for(runner.asleep.is_set, what="the loop to go to sleep (nothing is due)")
    sleeps_before = runner.sleeps

    wake = due_now("t.push")

    # The loop sleeps up to 30 s; only the nudge can make this fire within the bounded wait.
    wait_for(
        lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists(),
        what=f"the nudged loop to fire wake {wake.pk} (backstop is {BACKSTOP:.0f}s)",
    )
    assert calls.ids == [wake.pk]
    assert runner.sleeps >= sleeps_before


def test_a_wake_created_due_soon_in_this_process_shortens_the_sleep(sinks, loop):
    """Due in 2 s, while the loop sleeps up to 30 s: the nudge re-plans the sleep to the new due time."""
    calls = sinks("t.soon")
    runner = SpyRunner(interval=BACKSTOP)
    loop(runner)
    wait_for(runner.asleep.is_set, what="the loop to go to sleep (nothing is due)")

    wake = schedule(workspace_id=WS, delay="2s", kind="t.soon")

    wait_for(
        lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists(),
        timeout=15,
        what=f"wake {wake.pk}, due in 2s, to fire long before the {BACKSTOP:.0f}s backstop",
    )
    assert calls.ids == [wake.pk]
    attempt = WakeAttempt.objects.get(wake=wake)
    assert attempt.started_at >= wake.fire_at, "never early"


def test_stop_makes_run_return_and_deregisters(loop):
    runner = SpyRunner(interval=BACKSTOP)
    looping = loop(runner)
    wait_for(runner.asleep.is_set, what="the loop to go to sleep")
    assert RunnerRow.objects.filter(pk=runner.runner_id).exists(), "a running loop registers itself"

    looping.stop()  # well before the 30 s sleep would end

    assert not RunnerRow.objects.filter(pk=runner.runner_id).exists()


def test_stop_finishes_the_wake_in_hand_and_hands_back_the_rest_of_the_batch(loop):
    entered, release, ids = blocking_sink("t.block")
    wakes = [due_now("t.block", intent={"n": n}) for n in range(3)]
    runner = Sweeper(interval=BACKSTOP)
    looping = loop(runner, release=release)
    assert entered.wait(WAIT), "the runner never entered the sink"
    assert Wake.objects.filter(state=State.FIRING).count() == 3, "one pass claims the whole batch"

    runner.stop()
    release.set()
    looping.join()

    assert ids == [wakes[0].pk], "after stop() no further wake of the batch starts"
    assert Wake.objects.get(pk=wakes[0].pk).state == State.FIRED
    for wake in wakes[1:]:
        wake.refresh_from_db()
        assert (wake.state, wake.attempts, wake.claim_token, wake.lease_until) == (State.PENDING, 0, None, None)
        assert not WakeAttempt.objects.filter(wake=wake).exists(), "a handed-back claim is not an attempt"


def test_gc_every_deletes_old_terminal_wakes_while_the_loop_runs(settings, loop):
    settings.WAKES = {**settings.WAKES, "GC_AFTER": "1h"}
    long_ago = clock.now() - timedelta(hours=2)
    old = [WakeFactory(settled=True, updated_at=long_ago, created_at=long_ago) for _ in range(3)]
    old_pending = WakeFactory(
        state=State.PENDING, fire_at=clock.now() + timedelta(days=1), created_at=long_ago, updated_at=long_ago
    )
    recent = WakeFactory(settled=True)

    runner = Sweeper(interval=0.1, gc_every=timedelta(milliseconds=200))
    looping = loop(runner)
    wait_for(
        lambda: not Wake.objects.filter(pk__in=[w.pk for w in old]).exists(),
        what="the loop's periodic gc to delete terminal wakes older than GC_AFTER",
    )
    looping.stop()

    assert set(Wake.objects.values_list("pk", flat=True)) == {old_pending.pk, recent.pk}


def test_gc_every_none_never_deletes(settings, loop):
    settings.WAKES = {**settings.WAKES, "GC_AFTER": "1h"}
    long_ago = clock.now() - timedelta(hours=2)
    old = WakeFactory(settled=True, updated_at=long_ago, created_at=long_ago)
    runner = SpyRunner(interval=0.05, gc_every=None)
    looping = loop(runner)
    wait_for(lambda: runner.sleeps >= 5, what="a few passes of the loop")
    looping.stop()
    assert Wake.objects.filter(pk=old.pk).exists()


# --------------------------------------------------------------------------------------------------
# Heartbeat
# --------------------------------------------------------------------------------------------------


def test_heartbeat_renews_the_lease_of_a_slow_wake_in_hand(loop):
    entered, release, _ = blocking_sink("t.slow")
    wake = due_now("t.slow")
    runner = Sweeper(interval=BACKSTOP, lease=timedelta(seconds=1))
    loop(runner, release=release)
    assert entered.wait(WAIT)
    first = Wake.objects.get(pk=wake.pk)
    assert first.state == State.FIRING
    registered = RunnerRow.objects.get(pk=runner.runner_id)

    # Three lease lengths later the lease has moved on with the clock, and it was never taken over.
    wait_for(
        lambda: Wake.objects.get(pk=wake.pk).lease_until > first.lease_until + timedelta(seconds=2),
        what="the heartbeat to push the lease forward",
    )
    renewed = Wake.objects.get(pk=wake.pk)
    assert (renewed.state, renewed.claim_token, renewed.attempts) == (State.FIRING, first.claim_token, 1)
    assert RunnerRow.objects.get(pk=runner.runner_id).heartbeat_at > registered.heartbeat_at

    release.set()
    wait_for(lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists(), what="the slow wake to settle")
    assert [a.outcome for a in WakeAttempt.objects.filter(wake=wake)] == [Outcome.FIRED]


def test_heartbeat_keeps_renewing_while_stop_drains_the_wake_in_hand(loop):
    """After stop() the runner finishes the wake in hand; until it has, its lease must not lapse
    (another runner would re-drive it and this one's settle would be fenced off)."""
    entered, release, _ = blocking_sink("t.drain")
    wake = due_now("t.drain")
    runner = Sweeper(interval=BACKSTOP, lease=timedelta(seconds=1))
    looping = loop(runner, release=release)
    assert entered.wait(WAIT)
    runner.stop()
    at_stop = Wake.objects.get(pk=wake.pk)

    wait_for(
        lambda: Wake.objects.get(pk=wake.pk).lease_until > at_stop.lease_until + timedelta(seconds=2),
        what="the heartbeat to keep renewing the lease while the stopping runner drains",
    )
    assert looping.thread.is_alive(), "run() is still finishing the wake in hand"

    release.set()
    looping.join()
    final = Wake.objects.get(pk=wake.pk)
    assert (final.state, final.attempts) == (State.FIRED, 1)


def test_a_wake_recovered_at_boot_is_kept_alive_by_the_heartbeat(settings, loop):
    """A lapsed lease re-driven when the runner starts must be renewed like any other wake in hand.

    The lease comes from the runner (1 s here, the setting agrees); if the boot-time re-drive were
    not covered by the heartbeat, its lease would lapse mid-sink and another runner would re-drive
    it a second time.
    """
    settings.WAKES = {**settings.WAKES, "LEASE": "1s"}
    entered, release, ids = blocking_sink("t.orphan")
    now = clock.now()
    orphan = WakeFactory(
        kind="t.orphan",
        state=State.FIRING,
        fire_at=now - timedelta(minutes=1),
        due_at=now - timedelta(minutes=1),
        result={"trigger": "at"},
        attempts=1,
        claim_token="f" * 32,
        claimed_by="dead-runner",
        claimed_at=now - timedelta(minutes=1),
        lease_until=now - timedelta(seconds=30),
    )
    runner = Sweeper(interval=BACKSTOP, lease=timedelta(seconds=1))
    loop(runner, release=release)
    assert entered.wait(WAIT), "the runner never re-drove the orphan"
    taken = Wake.objects.get(pk=orphan.pk)
    # the dead runner's sink was not known to have started: re-driven uncharged, guarded from now on
    assert taken.state == State.FIRING and taken.claimed_by == runner.runner_id and taken.attempts == 1
    assert taken.guarded

    wait_for(
        lambda: Wake.objects.get(pk=orphan.pk).lease_until > taken.lease_until + timedelta(seconds=2),
        what="the heartbeat to renew the re-driven wake's lease",
    )

    release.set()
    wait_for(lambda: Wake.objects.filter(pk=orphan.pk, state=State.FIRED).exists(), what="the orphan to settle")
    assert ids == [orphan.pk]
    assert [(a.number, a.outcome) for a in WakeAttempt.objects.filter(wake=orphan)] == [
        (1, Outcome.ABANDONED),
        (1, Outcome.FIRED),
    ]


# --------------------------------------------------------------------------------------------------
# Concurrency in one process
# --------------------------------------------------------------------------------------------------


def test_concurrency_fires_lanes_in_parallel_threads_never_two_of_one_lane(loop):
    lock = threading.Lock()
    intervals: list[tuple[str, int, float, float]] = []
    active = [0]
    peak = [0]

    def fn(wake: Wake, result: dict[str, Any]) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        start = time.monotonic()
        time.sleep(0.15)
        end = time.monotonic()
        with lock:
            active[0] -= 1
            intervals.append((wake.serial_key, wake.pk, start, end))

    registry.register("t.parallel", fn, replace=True)
    wakes = [due_now("t.parallel", serial_key=f"lane-{n % 4}") for n in range(12)]
    runner = Sweeper(interval=0.1, concurrency=3)
    looping = loop(runner)
    wait_for(lambda: Wake.objects.filter(state=State.FIRED).count() == len(wakes), timeout=60, what="all wakes to fire")
    looping.stop()

    assert sorted(pk for _, pk, _, _ in intervals) == sorted(w.pk for w in wakes), "each wake fired once"
    for lane in {lane for lane, *_ in intervals}:
        rows = sorted((s, e, pk) for key, pk, s, e in intervals if key == lane)
        for (_, prev_end, prev), (start, _, cur) in zip(rows, rows[1:], strict=False):
            assert start >= prev_end, f"{lane}: wake {cur} started while wake {prev} was firing"
        assert [pk for _, _, pk in rows] == sorted(pk for _, _, pk in rows), f"{lane}: earliest first"
    assert 2 <= peak[0] <= 3, f"expected parallel firing bounded by --concurrency 3, peak was {peak[0]}"
