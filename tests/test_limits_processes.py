"""Limits per key held by the database across real ``runwakes`` processes (PostgreSQL, MariaDB).

Four runners, each firing two wakes at a time, share a backlog of three keys: ``mailer`` (at most 3
firing at once), ``burst`` (at most 4 started per second) and wakes with no limit. What the sinks
record (``testproject/probe_sinks.py``, ``probe.intent``: a ``start`` and an ``end`` line with
``time.monotonic_ns()``, system-wide on Linux) is the evidence: the overlap of ``mailer``'s
intervals never exceeds 3, and no window of one second holds more than 4 of ``burst``'s starts.
Without the slots the runners would start ``burst`` (claimed first: a higher priority) 8 at once and
run up to 8 ``mailer`` wakes together.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from django_wakes import schedule
from django_wakes.models import LimitSlot, Outcome, Runner, State, Wake, WakeAttempt
from tests.processes import Procs, wait_for

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        connection.vendor not in {"postgresql", "mysql"},
        reason=f"real runners racing need a server database (PostgreSQL or MariaDB); this run uses {connection.vendor}",
    ),
    pytest.mark.django_db(transaction=True),
]

LIMITS = {"mailer": {"concurrency": 3}, "burst": {"rate": "4/1s"}}
MAILER, BURST, FREE = 18, 12, 16
SECOND = 1_000_000_000


def _max_overlap(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one moment (an end and a start at the same instant do not overlap)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def _most_in_a_window(starts: list[int], window: int) -> int:
    """The most starts in any half-open window ``[t, t + window)``."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, t in enumerate(starts):
        while t - starts[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_four_runners_keep_a_keys_concurrency_and_rate(procs: Procs):
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip(f"{connection.display_name} lacks SELECT ... FOR UPDATE SKIP LOCKED")
    env = {"WAKES_TEST_LIMITS": json.dumps(LIMITS)}
    runners = [
        procs.runner(f"runner-{n}", "--interval", "0.2", "--concurrency", "2", "--batch", "2", **env) for n in range(4)
    ]
    wait_for(
        lambda: Runner.objects.count() == 4 or any(procs.alive(r) for r in runners),
        timeout=60,
        what="four runners to register",
    )
    t0 = time.monotonic()
    due = datetime.now(UTC) - timedelta(seconds=5)
    with transaction.atomic():  # all at once: every runner sees the whole backlog
        for i in range(MAILER):
            schedule(
                workspace_id="lim", kind="probe.intent", at=due, limit_key="mailer", intent={"sleep": 0.25, "i": i}
            )
        for i in range(BURST):
            schedule(workspace_id="lim", kind="probe.intent", at=due, limit_key="burst", intent={"i": i}, priority=1)
        for i in range(FREE):
            schedule(workspace_id="lim", kind="probe.intent", at=due, intent={"sleep": 0.25, "i": i})
    key_of = dict(Wake.objects.values_list("id", "limit_key"))
    total = MAILER + BURST + FREE
    wait_for(
        lambda: Wake.objects.filter(state=State.FIRED).count() == total or any(procs.alive(r) for r in runners),
        timeout=60,
        interval=0.3,
        what=f"all {total} wakes to fire (states: {Counter(Wake.objects.values_list('state', flat=True))})",
    )
    print(f"\nfired all in {time.monotonic() - t0:.1f}s")
    for runner in runners:
        assert procs.stop(runner) == 0, procs.log(runner)
        assert "Traceback" not in procs.log(runner), procs.log(runner)

    lines = procs.records("probe.intent")
    starts = {r["id"]: r["t"] for r in lines if r["phase"] == "start"}
    ends = {r["id"]: r["t"] for r in lines if r["phase"] == "end"}
    pids = {r["id"]: r["pid"] for r in lines if r["phase"] == "start"}
    assert Counter(r["id"] for r in lines if r["phase"] == "start") == Counter(dict.fromkeys(key_of, 1))
    by_key: dict[str | None, list[int]] = {}
    for wake_id, key in key_of.items():
        by_key.setdefault(key, []).append(wake_id)

    mailer = _max_overlap([(starts[i], ends[i]) for i in by_key["mailer"]])
    free = _max_overlap([(starts[i], ends[i]) for i in by_key[None]])
    assert mailer <= 3, f"{mailer} 'mailer' wakes ran at once; its limit is 3"
    # The runners could run as many at once as the limit (and usually more: 4-8 seen), so it is what holds 'mailer'.
    assert free >= 3, f"the runners never ran more than {free} unlimited wakes at once: the test shows nothing"
    assert mailer >= 2, f"'mailer' never ran two at once ({mailer}): the runners did not press on its limit"

    burst = [starts[i] for i in by_key["burst"]]
    print(
        f"\nmax at once: mailer {mailer}, unlimited {free}; burst starts over {(max(burst) - min(burst)) / SECOND:.2f}s"
    )
    shown = sorted((starts[i], i) for i in by_key["burst"])
    timeline = [(round((t - shown[0][0]) / 1e6), i, pids[i]) for t, i in shown]
    assert _most_in_a_window(burst, SECOND) <= 4, f"more than 4 'burst' wakes started within one second: {timeline}"
    assert _most_in_a_window(burst, SECOND) == 4, "'burst' never reached its rate: the test shows nothing"
    assert max(burst) - min(burst) >= 2 * SECOND, "12 starts at 4 a second take at least 2 seconds"

    # Held back is not an attempt: every wake fired on its first, and only, attempt.
    assert set(Wake.objects.values_list("attempts", flat=True)) == {1}
    assert WakeAttempt.objects.count() == total
    assert set(WakeAttempt.objects.values_list("outcome", flat=True)) == {Outcome.FIRED}
    assert LimitSlot.objects.filter(name="mailer").count() == 3
    assert LimitSlot.objects.filter(name="burst").count() == 4
