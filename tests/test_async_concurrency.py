"""With ``--concurrency N``, ``async def`` sinks are awaited together on one event loop (no thread each),
and their outcomes are settled like any other's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from django_wakes import Retry, schedule, sink
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.runner import Sweeper
from tests.processes import wait_for
from tests.test_runner import loop  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-async-concurrency"


def test_async_sinks_overlap_on_one_thread_and_all_settle(loop):  # noqa: F811
    runs: list[tuple[int, float, float, int]] = []

    @sink("t.async.io")
    async def io_bound(wake: Wake, result: dict[str, Any]) -> None:
        started = time.monotonic()
        await asyncio.sleep(0.3)  # waiting on a network call, say
        runs.append((wake.pk, started, time.monotonic(), threading.get_ident()))

    wakes = [schedule(workspace_id=WS, kind="t.async.io", delay="0s") for _ in range(20)]
    runner = Sweeper(interval=0.05, concurrency=10, lease=timedelta(seconds=30), listen=False)
    looping = loop(runner)
    wait_for(
        lambda: Wake.objects.filter(workspace_id=WS, state=State.FIRED).count() == 20,
        timeout=30,
        what="all 20 async sinks to settle",
    )
    looping.stop()
    assert sorted(pk for pk, *_ in runs) == sorted(w.pk for w in wakes)  # each ran once
    threads = {ident for *_, ident in runs}
    assert len(threads) == 1, "every async sink ran on the one event-loop thread"
    assert threads != {threading.get_ident()}
    peak = max(sum(1 for _, s, e, _ in runs if s <= start < e) for _, start, _, _ in runs)
    assert peak >= 2, "async sinks were awaited together, not one after another"
    assert WakeAttempt.objects.filter(wake__workspace_id=WS, outcome=Outcome.FIRED).count() == 20


def test_async_sink_failures_and_retries_settle_through_the_loop(loop):  # noqa: F811
    @sink("t.async.bad")
    async def bad(wake: Wake, result: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        if wake.intent["n"] == 0:
            raise RuntimeError("upstream 503")
        return Retry(reason="later", scratch={"seen": True})

    failing = schedule(workspace_id=WS, kind="t.async.bad", delay="0s", intent={"n": 0}, max_attempts=1)
    retrying = schedule(workspace_id=WS, kind="t.async.bad", delay="0s", intent={"n": 1})
    runner = Sweeper(interval=0.05, concurrency=4, lease=timedelta(seconds=30), listen=False)
    looping = loop(runner)
    wait_for(
        lambda: (
            Wake.objects.filter(pk=failing.pk, state=State.DEAD).exists()
            and Wake.objects.filter(pk=retrying.pk, attempts=1, state=State.PENDING).exists()
        ),
        timeout=30,
        what="the failure and the retry to settle",
    )
    looping.stop()
    assert "upstream 503" in Wake.objects.get(pk=failing.pk).last_error
    row = Wake.objects.get(pk=retrying.pk)
    assert row.last_error == "later" and row.scratch == {"seen": True}


def test_a_cancelled_async_sink_is_a_failed_attempt_not_a_stranded_wake(loop):  # noqa: F811
    @sink("t.async.cancelled")
    async def cancelled(wake: Wake, result: dict[str, Any]) -> None:
        raise asyncio.CancelledError

    wake = schedule(workspace_id=WS, kind="t.async.cancelled", delay="0s", max_attempts=1)
    runner = Sweeper(interval=0.05, concurrency=2, lease=timedelta(seconds=30), listen=False)
    looping = loop(runner)
    wait_for(lambda: Wake.objects.filter(pk=wake.pk, state=State.DEAD).exists(), timeout=30, what="the dead letter")
    looping.stop()
    assert runner._async is not None and runner._async.running == 0


def test_a_concurrent_runner_claims_ahead_of_its_free_slots_while_sinks_are_fast(loop, monkeypatch):  # noqa: F811
    """Claims beyond the free slots wait in hand, so a freed slot starts its next wake without a claim's
    round trip; they are all fired once, async sinks never more at once than the slots."""
    from django_wakes import engine

    asked: list[int] = []
    real = engine.claim_batch

    def counting(**kwargs: Any) -> Any:
        asked.append(kwargs["limit"])
        return real(**kwargs)

    monkeypatch.setattr(engine, "claim_batch", counting)
    running, peak = [0], [0]

    @sink("t.async.ahead")
    async def quick(wake: Wake, result: dict[str, Any]) -> None:
        running[0] += 1  # the one event-loop thread: no lock needed
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1

    for _ in range(30):
        schedule(workspace_id=WS, kind="t.async.ahead", delay="0s")
    runner = Sweeper(interval=0.05, concurrency=3, lease=timedelta(seconds=30), listen=False)
    looping = loop(runner)
    wait_for(
        lambda: Wake.objects.filter(workspace_id=WS, state=State.FIRED).count() == 30,
        timeout=30,
        what="all 30 async sinks to settle",
    )
    looping.stop()
    assert asked and asked[0] > 3, f"the first claim asks beyond the 3 free slots: {asked}"
    assert peak[0] <= 3, f"never more sinks at once than the slots ({peak[0]})"
    assert WakeAttempt.objects.filter(wake__workspace_id=WS, outcome=Outcome.FIRED).count() == 30


def test_claim_ahead_follows_the_sink_durations():
    runner = Sweeper(concurrency=50, batch=100, lease=timedelta(minutes=5), listen=False)
    assert runner.claim_ahead() == 100  # durations unknown: what a plain runner claims
    runner._sink_seconds = 0.0001  # no-op sinks
    assert runner.claim_ahead() == 100
    runner._sink_seconds = 0.1  # 100 ms each: the slots finish 50 in CLAIM_AHEAD_SECONDS
    assert runner.claim_ahead() == 50
    runner._sink_seconds = 30.0  # slow sinks: none held beyond the slots, others may take them
    assert runner.claim_ahead() == 0
