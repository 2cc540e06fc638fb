"""The benchmark steps that run inside a Django process (``python -m benchmarks.jobs STEP ...``).

``benchmarks.run`` starts one of these per step, with ``DATABASE_URL`` pointing at a benchmark
database and ``DJANGO_SETTINGS_MODULE=benchmarks.settings``; each step prints one JSON object on
its last stdout line. Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import threading
import time
from datetime import timedelta
from typing import Any


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()


# --------------------------------------------------------------------------------------------------
# Helpers (Django is set up by then)
# --------------------------------------------------------------------------------------------------


def vendor() -> str:
    from django.db import connection

    return connection.vendor


def reset() -> None:
    """Empty the wake tables of the benchmark database."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "TRUNCATE django_wakes_wakeattempt, django_wakes_wake, django_wakes_runner RESTART IDENTITY CASCADE"
            )
        else:
            for table in ("django_wakes_wakeattempt", "django_wakes_wake", "django_wakes_runner"):
                cursor.execute(f"DELETE FROM {table}")


def seed(n: int, *, lanes: int = 0, kind: str = "bench.noop", in_seconds: float = 0.0, lane_every: int = 1) -> None:
    """Insert ``n`` pending time wakes due ``in_seconds`` from now, spread over ``lanes`` lanes.

    ``lane_every=2`` puts only every other wake in a lane (the rest have none). The rows are what
    ``schedule(delay=...)`` would write, inserted with ``bulk_create`` for speed.
    """
    from django.db import transaction

    from django_wakes import clock
    from django_wakes.models import Wake

    now = clock.now()
    due = now + timedelta(seconds=in_seconds)
    chunk = 5000
    with transaction.atomic():
        for start in range(0, n, chunk):
            rows = []
            for i in range(start, min(n, start + chunk)):
                lane = f"lane-{i % lanes}" if lanes and i % lane_every == 0 else None
                rows.append(
                    Wake(
                        workspace_id="bench",
                        trigger_type="at",
                        kind=kind,
                        serial_key=lane,
                        state="pending",
                        fire_at=due,
                        due_at=due,
                        created_at=now,
                        updated_at=now,
                        max_attempts=5,
                    )
                )
            Wake.objects.bulk_create(rows, batch_size=1000)


def clone_sql(n: int, template: dict[str, Any], overrides: dict[str, str]) -> None:
    """Insert ``n`` copies of a wake built by the ORM from ``template`` with one SQL statement.

    Every column not in ``overrides`` (column name -> SQL expression of ``g``, the row number
    1..n) is copied from the template row, so columns other work adds to the model later (with
    Python-side defaults) are filled in as Django would. The template row is deleted afterwards.
    """
    from django.db import connection

    from django_wakes.models import Wake

    row = Wake.objects.create(**template)
    columns = [f.column for f in Wake._meta.concrete_fields if f.column != "id"]
    exprs = [overrides.get(c, f"t.{connection.ops.quote_name(c)}") for c in columns]
    names = ", ".join(connection.ops.quote_name(c) for c in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO django_wakes_wake ({names}) SELECT {', '.join(exprs)} "
                f"FROM django_wakes_wake t, generate_series(1, %s) AS g WHERE t.id = %s",
                [n, row.pk],
            )
        else:
            cursor.execute(
                f"INSERT INTO django_wakes_wake ({names}) "
                f"WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < %s) "
                f"SELECT {', '.join(exprs)} FROM django_wakes_wake t, s WHERE t.id = %s",
                [n, row.pk],
            )
    Wake.objects.filter(pk=row.pk).delete()


def seed_future_sql(n: int) -> None:
    """Insert ``n`` pending wakes due in 1-2 days with one SQL statement (fast for 1,000,000 rows).

    Half of them are in one of 100 lanes, like :func:`seed` with ``lanes=100, lane_every=2``.
    """
    from django.db import connection

    from django_wakes import clock

    now = clock.now()
    lane = "CASE WHEN g %% 2 = 0 THEN 'lane-' || (g %% 100) END"
    if connection.vendor == "postgresql":
        due = "t.due_at + g * interval '1 millisecond'"
    else:
        due = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', t.due_at, '+' || (g / 1000.0) || ' seconds')"
    template = _wake_fields(now, now + timedelta(days=1), "pending")
    clone_sql(n, template, {"serial_key": lane, "due_at": due, "fire_at": due})


def _wake_fields(now: Any, due: Any, state: str, **extra: Any) -> dict[str, Any]:
    return {
        "workspace_id": "bench",
        "trigger_type": "at",
        "kind": "bench.noop",
        "state": state,
        "fire_at": due,
        "due_at": due,
        "created_at": now,
        "updated_at": now,
        "max_attempts": 5,
        **extra,
    }


def seed_terminal_sql(n: int) -> None:
    """Insert ``n`` ``fired`` wakes (workspace ``bench-old``) with one SQL statement: a table's history."""
    from django_wakes import clock

    now = clock.now()
    old = now - timedelta(days=10)
    template = _wake_fields(
        old,
        old,
        "fired",
        workspace_id="bench-old",
        claimed_by="old-runner",
        attempts=1,
        result={"trigger": "at"},
        settled_at=old,
    )
    template["due_at"] = None
    clone_sql(
        n,
        template,
        {
            "serial_key": "CASE WHEN g %% 2 = 0 THEN 'lane-' || (g %% 100) END",
            "fire_at": "t.fire_at + g * interval '1 millisecond'",
            "updated_at": "t.updated_at + g * interval '1 millisecond'",
            "settled_at": "t.settled_at + g * interval '1 millisecond'",
            "fence": "g",
        },
    )


def analyze(vacuum: bool = False) -> None:
    """Fresh planner statistics (``vacuum``: ``VACUUM ANALYZE`` on PostgreSQL, what the peers get too)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"{'VACUUM ' if vacuum else ''}ANALYZE django_wakes_wake")
        elif connection.vendor == "mysql":
            cursor.execute("ANALYZE TABLE django_wakes_wake")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")


def vm_rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def count_state(state: str) -> int:
    from django_wakes.models import Wake

    return Wake.objects.filter(state=state).count()


# --------------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------------


def step_prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Empty the tables and insert ``n`` due-now wakes (for the throughput runs).

    On PostgreSQL the table is then ANALYZEd: otherwise the planner works from whatever statistics
    autovacuum last took (often of the previous run's all-``fired`` table), and a run's figure would
    depend on when autovacuum happens to wake up. That stale-statistics case is measured on its own
    by ``lane-backlog``.
    """
    reset()
    seed(args.n, lanes=args.lanes, kind=args.kind)
    if vendor() in ("postgresql", "mysql"):
        analyze(vacuum=True)
    return {"seeded": args.n, "lanes": args.lanes, "kind": args.kind}


def step_big_seed(args: argparse.Namespace) -> dict[str, Any]:
    """Empty the tables and insert ``terminal`` fired wakes: the history gc keeps (30 days) in production."""
    reset()
    t0 = time.perf_counter()
    seed_terminal_sql(args.terminal)
    analyze(vacuum=True)
    return {"terminal": args.terminal, "seed_s": time.perf_counter() - t0}


def step_big_due(args: argparse.Namespace) -> dict[str, Any]:
    """Replace the big table's live wakes by ``n`` due-now wakes in ``lanes`` lanes, with fresh or stale statistics.

    Stale: the table is ``ANALYZE``d while it holds only terminal rows (what autovacuum usually last
    saw: a burst arrives between two of its runs), then the due wakes are inserted, and autovacuum
    is switched off for the table so it cannot refresh them during the run (``--autovacuum on``
    switches it back). Fresh: ``VACUUM ANALYZE`` after the insert.
    """
    from django_wakes.models import Wake, WakeAttempt

    WakeAttempt.objects.filter(wake__workspace_id="bench").delete()
    Wake.objects.filter(workspace_id="bench").delete()
    if args.stats == "stale":
        _autovacuum(False)
        analyze()
        seed(args.n, lanes=args.lanes)
    else:
        _autovacuum(True)
        seed(args.n, lanes=args.lanes)
        analyze(vacuum=True)
    return {"n": args.n, "lanes": args.lanes, "stats": args.stats, "terminal": count_state("fired")}


def step_reset(args: argparse.Namespace) -> dict[str, Any]:
    reset()
    return {}


def step_span(args: argparse.Namespace) -> dict[str, Any]:
    """First claim to last settle, as recorded by the runners themselves, and a state census."""
    from django.db.models import Count, Max, Min, Sum

    from django_wakes.models import Wake, WakeAttempt

    wakes = Wake.objects.filter(workspace_id=args.workspace)
    tries = WakeAttempt.objects.filter(wake__workspace_id=args.workspace)
    agg = wakes.aggregate(first=Min("claimed_at"), last=Max("settled_at"), claims=Sum("attempts"))
    states = dict(wakes.values_list("state").annotate(n=Count("id")).order_by())
    attempts = tries.count()
    attempted_wakes = tries.values("wake_id").distinct().count()
    by_runner = sorted(n for _runner, n in tries.values_list("runner_id").annotate(n=Count("id")).order_by())
    span = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else None
    # claims: Wake.attempts summed (one per claim; a re-drive after a lapsed lease would add one)
    return {
        "span_s": span,
        "states": states,
        "attempts": attempts,
        "attempted_wakes": attempted_wakes,
        "claims": agg["claims"] or 0,
        "by_runner": by_runner,
    }


def _time_claim_passes(reps: int, due_per_rep: int) -> dict[str, float]:
    """Median wall time of ``claim_batch`` and of a whole ``run_due`` over ``due_per_rep`` due rows."""
    from django_wakes import engine

    claim_times, pass_times = [], []
    for i in range(reps):
        seed(due_per_rep, lanes=5, lane_every=2, in_seconds=-1)
        t0 = time.perf_counter()
        claims = engine.claim_batch(runner_id="bench-claim", limit=100)
        claim_times.append(time.perf_counter() - t0)
        assert len(claims) == due_per_rep, (i, len(claims))
        for claim in claims:
            engine.fire(claim)
        seed(due_per_rep, lanes=5, lane_every=2, in_seconds=-1)
        t0 = time.perf_counter()
        report = engine.run_due(runner_id="bench-claim", limit=100)
        pass_times.append(time.perf_counter() - t0)
        assert report.fired == due_per_rep, (i, report)
    return {
        "claim_ms": statistics.median(claim_times) * 1000,
        "claim_ms_min": min(claim_times) * 1000,
        "run_due_ms": statistics.median(pass_times) * 1000,
        "run_due_ms_min": min(pass_times) * 1000,
    }


def time_candidates(reps: int, limit: int = 100) -> float:
    """Median time (ms) of claim_batch's candidate query: the ids of up to ``limit`` claimable wakes."""
    from django_wakes import clock
    from django_wakes.models import Wake
    from django_wakes.sinks import registry

    times = []
    for _ in range(reps):
        qs = Wake.objects.claimable(clock.now(), registry.kinds()).values_list("id", flat=True)[:limit]
        t0 = time.perf_counter()
        list(qs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _candidates(due: int, reps: int) -> float:
    """The candidate query alone over ``due`` due rows (then fired, to clear them)."""
    from django_wakes import engine

    seed(due, lanes=5, lane_every=2, in_seconds=-1)
    ms = time_candidates(reps)
    engine.run_due(runner_id="bench-claim", limit=100)
    return ms


def _explain(due: int) -> str:
    """The plan of claim_batch's candidate query, with ``due`` rows due (then fired, to clear them)."""
    from django_wakes import clock, engine
    from django_wakes.models import Wake
    from django_wakes.sinks import registry

    seed(due, lanes=5, lane_every=2, in_seconds=-1)
    qs = Wake.objects.claimable(clock.now(), registry.kinds()).values_list("id", flat=True)[:100]
    plan = qs.explain(analyze=True, buffers=True) if vendor() == "postgresql" else qs.explain()
    engine.run_due(runner_id="bench-claim", limit=100)
    return plan


def step_claim(args: argparse.Namespace) -> dict[str, Any]:
    """Claim-pass time over a few due rows with ``small`` and then ``large`` pending future rows."""
    reset()
    out: dict[str, Any] = {"small": args.small, "large": args.large, "due_per_pass": args.due}
    t0 = time.perf_counter()
    seed_future_sql(args.small)
    analyze()
    out["insert_small_s"] = time.perf_counter() - t0
    _time_claim_passes(2, args.due)  # warm up connections, caches and the sink registry
    out["at_small"] = _time_claim_passes(args.reps, args.due)
    out["candidates_small"] = _candidates(args.due, args.reps)
    out["explain_small"] = _explain(args.due)
    t0 = time.perf_counter()
    seed_future_sql(args.large - args.small)
    analyze()
    out["insert_large_s"] = time.perf_counter() - t0
    _time_claim_passes(2, args.due)
    out["at_large"] = _time_claim_passes(args.reps, args.due)
    out["candidates_large"] = _candidates(args.due, args.reps)
    out["explain_large"] = _explain(args.due)
    out["pending_future"] = count_state("pending")
    return out


def step_claim_one(args: argparse.Namespace) -> dict[str, Any]:
    """Median time of ``claim_batch`` when exactly one wake is due (the push path's claim)."""
    from django_wakes import engine

    reset()
    times = []
    for i in range(args.reps + 3):
        seed(1, in_seconds=-0.001)
        t0 = time.perf_counter()
        claims = engine.claim_batch(runner_id="bench-claim-one", limit=100)
        elapsed = time.perf_counter() - t0
        assert len(claims) == 1, (i, len(claims))
        engine.fire(claims[0])
        if i >= 3:  # warm-up
            times.append(elapsed)
    return {"reps": args.reps, "claim_ms": statistics.median(times) * 1000, "claim_ms_min": min(times) * 1000}


def _busy_lanes(k: int) -> None:
    """Put the head of ``k`` lanes in hand (``firing``, lane locked), as a runner's in-flight wakes are."""
    from django_wakes.models import Wake

    heads = Wake.objects.filter(serial_key__isnull=False).order_by("due_at", "id").values_list("id", "serial_key")
    for pk, lane in heads[:k]:
        Wake.objects.filter(pk=pk).update(state="firing", lane_lock=lane)


def _autovacuum(on: bool) -> None:
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            if on:
                cursor.execute("ALTER TABLE django_wakes_wake RESET (autovacuum_enabled)")
            else:
                cursor.execute("ALTER TABLE django_wakes_wake SET (autovacuum_enabled = false)")


def step_lane_backlog(args: argparse.Namespace) -> dict[str, Any]:
    """The candidate query over ``n`` due wakes spread over ``lanes`` lanes (a due backlog).

    Four cases: every lane free, or ``busy`` lanes in hand (fewer lane heads than the limit of 100
    are claimable, so the query cannot stop early: what a ``--concurrency`` runner meets on every
    pass); each with fresh statistics (ANALYZE after the insert) and with stale ones (ANALYZE while
    the same rows were all ``fired``, as autovacuum typically leaves a table between bursts; the
    table's autovacuum is off meanwhile so it cannot refresh them under the measurement).
    """
    from django_wakes.models import Wake

    out: dict[str, Any] = {"n": args.n, "lanes": args.lanes, "busy": args.busy}
    reset()
    seed(args.n, lanes=args.lanes)
    analyze()
    out["fresh_free_ms"] = time_candidates(args.reps)
    _busy_lanes(args.busy)
    out["fresh_busy_ms"] = time_candidates(args.reps)
    _autovacuum(False)
    try:
        reset()
        seed(args.n, lanes=args.lanes)
        Wake.objects.update(state="fired")
        analyze()
        reset()
        seed(args.n, lanes=args.lanes)
        out["stale_free_ms"] = time_candidates(args.stale_reps)
        _busy_lanes(args.busy)
        out["stale_busy_ms"] = time_candidates(args.stale_reps)
    finally:
        reset()
        _autovacuum(True)
    return out


def step_pass_stats(args: argparse.Namespace) -> dict[str, Any]:
    """Whole in-process runner passes (``Sweeper.run_once``, a batch each) over ``n`` due wakes, no lanes.

    Once with fresh statistics and once with stale ones (ANALYZEd while the same rows were all
    ``fired``, autovacuum off meanwhile), like the stale case of ``lane-backlog``.
    """
    import logging

    from django_wakes.models import Wake
    from django_wakes.runner import Sweeper

    logging.getLogger("django_wakes").setLevel(logging.WARNING)  # 2 x reps x 100 INFO lines otherwise
    out: dict[str, Any] = {"n": args.n, "reps": args.reps}
    _autovacuum(False)
    try:
        for stats in ("fresh", "stale"):
            reset()
            if stats == "stale":
                seed(args.n)
                Wake.objects.update(state="fired")
                analyze()
                reset()
            seed(args.n)
            if stats == "fresh":
                analyze()
            runner = Sweeper(interval=1.0, listen=False, gc_every=None)
            runner.run_once()  # warm-up
            times = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                runner.run_once()
                times.append(time.perf_counter() - t0)
            out[f"{stats}_pass_ms"] = statistics.median(times) * 1000
            out[f"{stats}_batch"] = runner.batch
    finally:
        reset()
        _autovacuum(True)
    return out


def step_rss(args: argparse.Namespace) -> dict[str, Any]:
    """Fire ``n`` wakes with an in-process :class:`Sweeper` loop; VmRSS after ``first`` and after ``n``."""
    from django.db import connections

    from django_wakes.runner import Sweeper

    reset()
    seed(args.n)
    if vendor() == "postgresql":
        analyze()  # as in step_prepare: fresh statistics, not autovacuum's timing (see step_pass_stats)
    connections.close_all()
    runner = Sweeper(interval=1.0, listen=False, gc_every=None)
    thread = threading.Thread(target=runner.run, name="bench-runner", daemon=True)
    rss_before = vm_rss_kib()
    t0 = time.perf_counter()
    thread.start()
    rss_first = None
    samples = []
    next_sample = 0
    while runner.fired < args.n:
        if rss_first is None and runner.fired >= args.first:
            rss_first = vm_rss_kib()
            t_first = time.perf_counter()
        if runner.fired >= next_sample:
            samples.append((runner.fired, vm_rss_kib()))
            next_sample += max(args.n // 20, 1)
        if not thread.is_alive():
            raise SystemExit(f"runner thread died after {runner.fired} fires")
        time.sleep(0.01)
    elapsed = time.perf_counter() - t0
    rss_last = vm_rss_kib()
    runner.stop()
    thread.join(30)
    return {
        "n": args.n,
        "first": args.first,
        "rss_before_kib": rss_before,
        "rss_first_kib": rss_first,
        "rss_last_kib": rss_last,
        "ratio": rss_last / rss_first if rss_first else None,
        "elapsed_s": elapsed,
        "rate_after_first": (args.n - args.first) / (elapsed - (t_first - t0)) if rss_first else None,
        "samples": samples,
    }


def step_create_rate(args: argparse.Namespace) -> dict[str, Any]:
    """Wakes created per second through the public API: ``schedule()`` alone, in a transaction of 1,000, and
    ``schedule_many()`` of 1,000 items (due in an hour: nothing fires meanwhile)."""
    from django.db import transaction

    import django_wakes

    def timed(create: Any) -> float:
        reset()
        t0 = time.perf_counter()
        create()
        return args.n / (time.perf_counter() - t0)

    def alone() -> None:
        for _ in range(args.n):
            django_wakes.schedule(workspace_id="bench", kind="bench.noop", delay="1h")

    def in_transactions() -> None:
        for start in range(0, args.n, 1000):
            with transaction.atomic():
                for _ in range(min(1000, args.n - start)):
                    django_wakes.schedule(workspace_id="bench", kind="bench.noop", delay="1h")

    def many() -> None:
        for start in range(0, args.n, 1000):
            django_wakes.schedule_many(
                [{"intent": {"i": i}} for i in range(start, min(args.n, start + 1000))],
                workspace_id="bench",
                kind="bench.noop",
                delay="1h",
            )

    alone_rate = timed(alone)
    out = {
        "n": args.n,
        "schedule": alone_rate,
        "schedule_in_transaction": timed(in_transactions),
        "schedule_many": timed(many),
    }
    reset()
    return out


def step_create_one_at_a_time(args: argparse.Namespace) -> dict[str, Any]:
    """Create ``n`` due-now wakes one at a time through the public API; stamp each commit.

    The stamp is an ``on_commit`` callback registered before ``schedule()`` runs, so it runs right
    after COMMIT returns and before the push hint that ``schedule()`` sends on commit.
    """
    from django.db import transaction

    import django_wakes

    stamps: dict[int, float] = {}
    rng = random.Random(args.seed)
    for _ in range(args.n):
        box: list[float] = []
        with transaction.atomic():
            transaction.on_commit(lambda box=box: box.append(time.time()))
            wake = django_wakes.schedule(workspace_id="bench", delay=timedelta(0), kind="bench.stamp")
        stamps[wake.pk] = box[0]
        time.sleep(rng.uniform(args.gap * 0.5, args.gap * 1.5))
    return {"commits": stamps}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.jobs")
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--lanes", type=int, default=0)
    p.add_argument("--kind", default="bench.noop")
    p = sub.add_parser("big-seed")
    p.add_argument("--terminal", type=int, default=1_000_000)
    p = sub.add_parser("big-due")
    p.add_argument("--n", type=int, default=2_000)
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--stats", choices=["fresh", "stale"], required=True)
    sub.add_parser("autovacuum-on")
    sub.add_parser("reset")
    p = sub.add_parser("span")
    p.add_argument("--workspace", default="bench")
    p = sub.add_parser("claim")
    p.add_argument("--small", type=int, default=10_000)
    p.add_argument("--large", type=int, default=1_000_000)
    p.add_argument("--due", type=int, default=10)
    p.add_argument("--reps", type=int, default=15)
    p = sub.add_parser("pass-stats")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=20)
    p = sub.add_parser("rss")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--first", type=int, default=1_000)
    p = sub.add_parser("claim-one")
    p.add_argument("--reps", type=int, default=30)
    p = sub.add_parser("lane-backlog")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--lanes", type=int, default=100)
    p.add_argument("--busy", type=int, default=3)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--stale-reps", type=int, default=3)
    p = sub.add_parser("create-rate")
    p.add_argument("--n", type=int, default=5_000)
    p = sub.add_parser("create")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--gap", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    setup()
    step = {
        "claim-one": step_claim_one,
        "lane-backlog": step_lane_backlog,
        "pass-stats": step_pass_stats,
        "prepare": step_prepare,
        "big-seed": step_big_seed,
        "big-due": step_big_due,
        "autovacuum-on": lambda args: _autovacuum(True) or {},
        "reset": step_reset,
        "span": step_span,
        "claim": step_claim,
        "rss": step_rss,
        "create": step_create_one_at_a_time,
        "create-rate": step_create_rate,
    }[args.step]
    result = step(args)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
