"""CPU cost per operation, client and server, counted rather than timed: for a shared, noisy machine.

Wall-clock rates move with whatever else the machine runs; the CPU time a process spends on an
operation moves much less. This step runs an operation ``n`` times in one Django process against
PostgreSQL and reports, per operation: wall time, this process's CPU time (user + system,
``time.process_time``), the CPU time of the PostgreSQL backend serving its connection (read from
``/proc/<backend pid>/stat``: the server runs on the same machine) and the round trips (statements
Django sent). Run it with the benchmark's virtualenv and settings::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wakes_bench \\
        benchmarks/.env/bin/python -m benchmarks.costs enqueue schedule tasks-db-enqueue claim-one

``tasks-db-enqueue`` needs ``DJANGO_SETTINGS_MODULE=benchmarks.peers.tasks_settings`` (its own database).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """User + system CPU seconds of the PostgreSQL backend ``pid`` (fields 14 and 15 of /proc/pid/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def measure(name: str, op: Callable[[], Any], n: int, warm: int = 100) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(warm):
        op()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    with CaptureQueriesContext(connection) as queries:
        op()
    trips = len(queries.captured_queries)
    server0, client0, wall0 = backend_cpu(pid), time.process_time(), time.perf_counter()
    for _ in range(n):
        op()
    wall, client, server = time.perf_counter() - wall0, time.process_time() - client0, backend_cpu(pid) - server0
    return {
        "op": name,
        "n": n,
        "per_s": n / wall,
        "wall_us": wall / n * 1e6,
        "client_cpu_us": client / n * 1e6,
        "server_cpu_us": server / n * 1e6,
        "round_trips": trips,
    }


def op_schedule() -> Callable[[], Any]:
    """A due-now wake: its NOTIFY goes out too."""
    from datetime import timedelta

    import django_wakes

    return lambda: django_wakes.schedule(workspace_id="bench", kind="bench.noop", delay=timedelta(0))


def op_schedule_later() -> Callable[[], Any]:
    """A wake due in an hour (what ``make bench``'s creating figures time): no NOTIFY."""
    import django_wakes

    return lambda: django_wakes.schedule(workspace_id="bench", kind="bench.noop", delay="1h")


def op_enqueue() -> Callable[[], Any]:
    from benchmarks.tasks_api import noop

    return noop.enqueue  # type: ignore[attr-defined]


def op_claim_one() -> Callable[[], Any]:
    """Seed one due wake, claim it (timed with the rest: seeding is one INSERT), fire it."""
    from django_wakes import engine

    def one() -> None:
        from benchmarks.jobs import seed

        seed(1, in_seconds=-0.001)
        (claim,) = engine.claim_batch(runner_id="bench-costs", limit=100)
        engine.fire(claim)

    return one


OPS = {
    "schedule": op_schedule,
    "schedule-later": op_schedule_later,
    "enqueue": op_enqueue,
    "tasks-db-enqueue": op_enqueue,
    "claim-one": op_claim_one,
}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    n = int(os.environ.get("BENCH_COSTS_N", "2000"))
    for name in sys.argv[1:]:
        print(json.dumps(measure(name, OPS[name](), n)), flush=True)


if __name__ == "__main__":
    main()
