"""Concurrency and crash tests with REAL processes against a real PostgreSQL or MariaDB server.

Runner processes are ``python manage.py runwakes`` subprocesses pointed at the pytest-django test
database (``transaction=True``, so what a test writes is committed and visible to them), started by
the ``procs`` fixture (``tests/processes.py``). Their sinks live in ``testproject/probe_sinks.py``
and leave JSON-lines evidence that ``procs.records(kind)`` reads. The short-lived creators,
resolvers and ``once()`` callers are ``python -m tests.processes`` children released together
through a file barrier.

Nothing here asserts on timing: every wait is bounded and generous, and every assertion is about
what happened (who fired what, in which order, with which result, how many rows exist).
"""

from __future__ import annotations

import json
import random
import signal
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from django_wakes import deliver_event, request_approval, schedule, watch
from django_wakes.models import Outcome, Receipt, ReceiptState, State, Wake, WakeAttempt
from tests.processes import Procs, race, wait_for

SERVER_VENDORS = {"postgresql", "mysql"}

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        connection.vendor not in SERVER_VENDORS,
        reason=(
            f"multi-process tests need a server database (PostgreSQL or MariaDB) that several processes "
            f"can share with row locks and SKIP LOCKED; this run uses {connection.vendor}"
        ),
    ),
    pytest.mark.django_db(transaction=True),
]

LEASE = "2s"
FAST = ("--interval", "0.2")  # runners poll at least every 0.2 s


@pytest.fixture(autouse=True)
def _needs_skip_locked(transactional_db: None) -> None:
    """Skip where racing runners cannot pass over each other's locked rows."""
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip(f"{connection.display_name} lacks SELECT ... FOR UPDATE SKIP LOCKED")


def _state_counts() -> Counter:
    return Counter(Wake.objects.values_list("state", flat=True))


# --------------------------------------------------------------------------------------------------
# 1. Lanes and exactly-once under 4 racing runners
# --------------------------------------------------------------------------------------------------

RUNNERS = 4
WAKES = 2000
LANES = 25


def test_four_runners_fire_every_wake_once_lanes_single_file_earliest_first(procs: Procs):
    rng = random.Random(20240601)
    base = datetime.now(UTC) - timedelta(minutes=10)
    # Distinct fire_at per wake, all in the past (due now), inserted in shuffled order so that id
    # order says nothing about fire_at order within a lane.
    offsets = list(range(WAKES))
    rng.shuffle(offsets)
    with transaction.atomic():
        for i, offset in enumerate(offsets):
            schedule(
                workspace_id="mp-lanes",
                kind="probe.record",
                serial_key=f"lane-{i % LANES:02d}",
                at=base + timedelta(milliseconds=offset * 7),
                intent={"i": i},
            )
    assert Wake.objects.filter(state=State.PENDING).count() == WAKES
    fire_at = dict(Wake.objects.values_list("id", "fire_at"))
    lane_of = dict(Wake.objects.values_list("id", "serial_key"))

    runners = [procs.runner(f"runner-{n}", *FAST) for n in range(RUNNERS)]
    wait_for(
        lambda: Wake.objects.filter(state=State.FIRED).count() == WAKES or any(procs.alive(r) for r in runners),
        timeout=150,
        interval=0.5,
        what=f"all {WAKES} wakes to be fired (states now: {_state_counts()})",
    )
    for runner in runners:
        assert procs.stop(runner) == 0, procs.log(runner)
        assert "Traceback" not in procs.log(runner), procs.log(runner)

    records = procs.records("probe.record")
    fired_per_id = Counter(r["id"] for r in records)
    assert set(fired_per_id) == set(fire_at), "some wakes never reached their sink"
    assert [i for i, c in fired_per_id.items() if c != 1] == [], "a wake fired more than once"
    assert _state_counts() == Counter({State.FIRED: WAKES})
    assert set(Wake.objects.values_list("attempts", flat=True)) == {1}
    assert WakeAttempt.objects.filter(outcome=Outcome.FIRED).count() == WAKES
    assert WakeAttempt.objects.count() == WAKES

    by_lane: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        assert r["serial_key"] == lane_of[r["id"]]
        by_lane[r["serial_key"]].append(r)
    assert len(by_lane) == LANES
    overlaps, out_of_order = [], []
    for lane, rows in by_lane.items():
        rows.sort(key=lambda r: r["start"])
        for prev, cur in zip(rows, rows[1:], strict=False):
            if cur["start"] <= prev["end"]:
                overlaps.append((lane, prev["id"], prev["pid"], cur["id"], cur["pid"]))
        fired_order = [fire_at[r["id"]] for r in rows]
        if fired_order != sorted(fired_order):
            out_of_order.append(lane)
    assert overlaps == [], f"{len(overlaps)} overlapping firings within a lane, e.g. {overlaps[:5]}"
    assert out_of_order == [], f"lanes not fired earliest fire_at first: {out_of_order}"

    per_pid = Counter(r["pid"] for r in records)
    assert len(per_pid) > 1, f"only one runner fired anything: {per_pid}"
    print(f"\nfirings per runner pid: {dict(per_pid)}")


# --------------------------------------------------------------------------------------------------
# 2. Crash recovery: SIGKILL mid-sink, another runner re-drives with the persisted result
# --------------------------------------------------------------------------------------------------


def test_runner_killed_mid_sink_is_redriven_with_persisted_result(procs: Procs):
    wake = watch(workspace_id="mp-crash", event_key="build.done", kind="probe.block", serial_key="crash-lane")
    payload = {"build": 1234, "status": "green", "artifacts": ["a.whl", "b.tar.gz"]}
    assert deliver_event(workspace_id="mp-crash", event_key="build.done", payload=payload) == 1
    # A second wake in the same lane, due now: it must wait for the orphaned firing row.
    follower = schedule(workspace_id="mp-crash", kind="probe.record", serial_key="crash-lane", delay="0s")

    runner_a = procs.runner("runner-a", *FAST, WAKES_LEASE=LEASE, WAKES_PROBE_BLOCK="1")
    started = wait_for(lambda: procs.records("probe.block"), timeout=60, what="runner A to enter the blocking sink")
    assert started[0]["pid"] == runner_a.pid and started[0]["id"] == wake.pk
    wake.refresh_from_db()
    assert wake.state == State.FIRING and wake.claimed_by.split(":")[1] == str(runner_a.pid)
    runner_a.send_signal(signal.SIGKILL)
    assert runner_a.wait(timeout=30) == -signal.SIGKILL
    wake.refresh_from_db()
    assert wake.state == State.FIRING, "a SIGKILLed runner leaves its row firing"
    assert Wake.objects.get(pk=follower.pk).state == State.PENDING

    runner_b = procs.runner("runner-b", *FAST, WAKES_LEASE=LEASE)
    wait_for(
        lambda: (
            Wake.objects.filter(pk__in=[wake.pk, follower.pk], state=State.FIRED).count() == 2 or procs.alive(runner_b)
        ),
        timeout=90,
        what="runner B to re-drive the orphaned wake and then its lane follower",
    )
    assert procs.stop(runner_b) == 0, procs.log(runner_b)

    wake.refresh_from_db()
    # A died before the wake was guarded, so its attempt is not charged; the wake is guarded now
    assert wake.state == State.FIRED and wake.attempts == 1 and wake.last_error == "" and wake.guarded
    runs = sorted(procs.records("probe.block"), key=lambda r: r["start"])
    assert [r["pid"] for r in runs] == [runner_a.pid, runner_b.pid]
    expected = {"trigger": "on_event", "event_key": "build.done", "payload": payload}
    assert runs[0]["result"] == expected
    assert runs[1]["result"] == expected, "the re-drive must see the result persisted before the crash"
    attempts = list(WakeAttempt.objects.filter(wake=wake).order_by("id"))
    assert [(a.number, a.outcome) for a in attempts] == [(1, Outcome.ABANDONED), (1, Outcome.FIRED)]
    assert attempts[0].runner_id.split(":")[1] == str(runner_a.pid)
    assert attempts[1].runner_id.split(":")[1] == str(runner_b.pid)
    assert attempts[0].fence < attempts[1].fence, "the re-drive holds a larger fencing token"
    # The lane stayed single-file across the crash: the follower fired only after the re-drive.
    follower_run = procs.records("probe.record")
    assert [r["id"] for r in follower_run] == [follower.pk]
    assert follower_run[0]["start"] > runs[1]["start"]


# --------------------------------------------------------------------------------------------------
# 3. Fencing: a stalled runner's late settle cannot overwrite the new owner's outcome
# --------------------------------------------------------------------------------------------------


def test_stalled_runner_cannot_overwrite_the_takeover_outcome(procs: Procs):
    wake = schedule(workspace_id="mp-fence", kind="probe.block", serial_key="fence-lane", delay="0s")
    runner_a = procs.runner("runner-a", *FAST, WAKES_LEASE=LEASE, WAKES_PROBE_BLOCK="1", WAKES_PROBE_LATE_ERROR="1")
    wait_for(lambda: procs.records("probe.block"), timeout=60, what="runner A to enter the blocking sink")
    runner_a.send_signal(signal.SIGSTOP)
    try:
        wake.refresh_from_db()
        assert wake.state == State.FIRING
        lease_a = wake.lease_until
        # Let A's lease lapse while it is frozen, then bring in B.
        wait_for(
            lambda: datetime.now(UTC) > lease_a + timedelta(milliseconds=500),
            timeout=30,
            what="runner A's lease to lapse",
        )
        runner_b = procs.runner("runner-b", *FAST, WAKES_LEASE=LEASE)
        wait_for(
            lambda: Wake.objects.filter(pk=wake.pk, state=State.FIRED).exists() or procs.alive(runner_b),
            timeout=90,
            what="runner B to take over and settle",
        )
        assert procs.stop(runner_b) == 0, procs.log(runner_b)
        taken_over = Wake.objects.get(pk=wake.pk)
    finally:
        (procs.probe_dir / "release").touch()
        runner_a.send_signal(signal.SIGCONT)

    wait_for(
        lambda: "lease was taken over" in procs.log(runner_a) or procs.alive(runner_a),
        timeout=60,
        what="runner A's late settle to be fenced off (warning in its log)",
    )
    assert procs.stop(runner_a) == 0, procs.log(runner_a)
    assert "late finisher" in procs.log(runner_a), "A's sink really did finish late (and raised)"

    final = Wake.objects.get(pk=wake.pk)
    fields = ["state", "attempts", "last_error", "settled_at", "lease_until", "claim_token", "claimed_by", "lane_lock"]
    assert {f: getattr(final, f) for f in fields} == {f: getattr(taken_over, f) for f in fields}
    assert final.state == State.FIRED and final.last_error == "" and final.attempts == 1
    attempts = list(WakeAttempt.objects.filter(wake=wake).order_by("id"))
    assert [(a.number, a.outcome) for a in attempts] == [(1, Outcome.ABANDONED), (1, Outcome.FIRED)]
    assert attempts[0].runner_id.split(":")[1] == str(runner_a.pid)
    assert attempts[1].runner_id.split(":")[1] == str(runner_b.pid)
    runs = procs.records("probe.block")
    assert Counter(r["pid"] for r in runs if r["phase"] == "start") == {runner_a.pid: 1, runner_b.pid: 1}


# --------------------------------------------------------------------------------------------------
# 4. Concurrent creators and resolvers
# --------------------------------------------------------------------------------------------------

CREATORS = 6
ROUNDS = 15


def test_concurrent_idempotent_creates_return_one_wake(procs: Procs):
    keys = [f"idem-{k}" for k in range(ROUNDS)]
    with race(procs, "schedule_idempotent", [{"workspace": "mp-idem", "keys": keys}] * CREATORS) as results:
        pass
    assert len(results) == CREATORS
    for k, key in enumerate(keys):
        outcomes = [r["results"][k] for r in results]
        assert all("ok" in o for o in outcomes), f"{key}: {outcomes}"
        rows = list(Wake.objects.filter(workspace_id="mp-idem", idempotency_key=key).values_list("id", flat=True))
        assert len(rows) == 1
        assert {o["ok"] for o in outcomes} == {rows[0]}, f"{key}: creators got different wakes"
    assert Wake.objects.filter(workspace_id="mp-idem").count() == ROUNDS


def test_concurrent_coalescing_creates_keep_one_pending_wake_per_lane(procs: Procs):
    lanes = [f"coalesce-{k}" for k in range(ROUNDS)]
    with race(procs, "schedule_coalesce", [{"workspace": "mp-coalesce", "lanes": lanes}] * CREATORS) as results:
        pass
    for k, lane in enumerate(lanes):
        outcomes = [r["results"][k] for r in results]
        assert all("ok" in o for o in outcomes), f"{lane}: {outcomes}"
        rows = list(Wake.objects.filter(serial_key=lane, state=State.PENDING).values_list("id", flat=True))
        assert len(rows) == 1, f"{lane}: {len(rows)} pending wakes"
        assert {o["ok"] for o in outcomes} == {rows[0]}
    assert Wake.objects.filter(workspace_id="mp-coalesce").count() == ROUNDS


def test_concurrent_resolves_have_exactly_one_winner(procs: Procs):
    approvals = [
        request_approval(workspace_id="mp-approve", prompt=f"deploy {k}?", expires_in="1h", kind="probe.record")
        for k in range(ROUNDS)
    ]
    tokens = [a.token for a in approvals]
    with race(procs, "resolve", [{"tokens": tokens}] * CREATORS) as results:
        pass
    for k, approval in enumerate(approvals):
        outcomes = {r["n"]: r["results"][k] for r in results}
        winners = [n for n, o in outcomes.items() if "ok" in o]
        losers = [o for o in outcomes.values() if "ok" not in o]
        assert len(winners) == 1, f"approval {k}: {outcomes}"
        assert {o["error"] for o in losers} == {"ApprovalAlreadyResolved"}, losers
        wake = Wake.objects.get(pk=approval.wake.pk)
        assert outcomes[winners[0]]["ok"] == wake.pk
        assert wake.result == {"trigger": "on_approval", "answer": {"answer_by": winners[0]}, "resolved_by": "demo"}
        assert wake.state == State.PENDING and wake.fire_at is not None


# --------------------------------------------------------------------------------------------------
# 5. once(): concurrent callers, and a caller killed inside fn
# --------------------------------------------------------------------------------------------------

ONCE_CALLERS = 4
ONCE_KEYS = 5


def test_concurrent_once_runs_fn_exactly_once(procs: Procs):
    effects = procs.workdir / "once-effects.jsonl"
    keys = [f"charge-{k}" for k in range(ONCE_KEYS)]
    payload = {"session": "mp-once", "keys": keys, "effects": str(effects), "fn_seconds": 0.3}
    with race(procs, "once", [payload] * ONCE_CALLERS) as results:
        pass
    ran = [line for line in effects.read_text().splitlines() if line]
    ran_per_key = Counter(json.loads(line)["key"] for line in ran)
    assert ran_per_key == dict.fromkeys(keys, 1), f"fn ran {ran_per_key}"
    for k, key in enumerate(keys):
        outcomes = [r["results"][k] for r in results]
        assert all("ok" in o for o in outcomes), outcomes
        assert all(o["ok"] == outcomes[0]["ok"] for o in outcomes), f"{key}: callers saw different results {outcomes}"
        receipt = Receipt.objects.get(session_id="mp-once", key=key)
        assert receipt.state == ReceiptState.DONE and receipt.result == outcomes[0]["ok"]


def test_once_killed_inside_fn_is_interrupted_then_retry_runs_it_again(procs: Procs):
    effects = procs.workdir / "once-kill.jsonl"
    base = {"session": "mp-once-kill", "keys": ["refund"], "effects": str(effects), "once_lease": LEASE}
    victim = procs.child("once", {**base, "fn_seconds": 600}, name="once-victim")
    wait_for(
        lambda: (effects.exists() and effects.read_text().strip()) or procs.alive(victim),
        timeout=60,
        what="fn to start in the victim",
    )
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    receipt = Receipt.objects.get(session_id="mp-once-kill", key="refund")
    assert receipt.state == ReceiptState.RUNNING, "the receipt was committed before fn ran"

    # A later caller (after the victim's short lease lapses) is told the effect may have happened.
    later = procs.finish(procs.child("once", base, name="once-later"))
    assert later["results"][0]["error"] == "OnceInterrupted", later
    assert len(effects.read_text().splitlines()) == 1, "OnceInterrupted must not run fn"

    retry = procs.finish(procs.child("once", {**base, "on_interrupted": "retry"}, name="once-retry"))
    retried = retry["results"][0]["ok"]
    assert retried["ran_in"] == retry["pid"]
    assert len(effects.read_text().splitlines()) == 2

    replay = procs.finish(procs.child("once", base, name="once-replay"))
    assert replay["results"][0]["ok"] == retried, "a replay returns the stored result"
    assert len(effects.read_text().splitlines()) == 2
    receipt.refresh_from_db()
    assert receipt.state == ReceiptState.DONE and receipt.result == retried
