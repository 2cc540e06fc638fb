"""The procrastinate peer: an App on its own PostgreSQL database, with its native ``async`` tasks.

``python -m benchmarks.peers.procrastinate_app enqueue N [TASK]`` empties the job table, defers N
jobs of ``TASK`` (``noop`` or ``io_wait``) and ``VACUUM ANALYZE``s the job tables, so the worker
starts from fresh statistics like every system in the benchmark.
``python -m benchmarks.peers.procrastinate_app latency N GAP`` defers ``stamp`` jobs one at a time
(GAP seconds ± 50 % apart) and prints when each defer returned (its INSERT committed).
The worker is procrastinate's own CLI (``procrastinate --app=benchmarks.peers.procrastinate_app.app
worker``). Every task is ``async def``, procrastinate's native kind and its cheapest path.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time

from procrastinate import App, PsycopgConnector

DSN = os.environ.get("PROCRASTINATE_DSN", "postgresql://postgres@127.0.0.1:5432/wakes_bench_procrastinate")
IO_SECONDS = float(os.environ.get("BENCH_IO_SECONDS", "0.1"))

app = App(connector=PsycopgConnector(conninfo=DSN))
_stamp_file = None


@app.task(name="noop")
async def noop() -> None:
    """Do nothing."""


@app.task(name="io_wait")
async def io_wait() -> None:
    """Wait ``IO_SECONDS`` (an I/O-bound job: a webhook, a model call)."""
    await asyncio.sleep(IO_SECONDS)


@app.task(name="stamp", pass_context=True)
async def stamp(context) -> None:  # type: ignore[no-untyped-def]
    """Append ``<job id> <time.time()>`` to ``$BENCH_STAMP_FILE`` the moment the job runs."""
    global _stamp_file
    now = time.time()
    if _stamp_file is None:
        _stamp_file = open(os.environ["BENCH_STAMP_FILE"], "a", buffering=1)  # noqa: SIM115
    _stamp_file.write(f"{context.job.id} {now:.6f}\n")


TASKS = {"noop": noop, "io_wait": io_wait}


def enqueue(n: int, task_name: str) -> None:
    import psycopg

    task = TASKS[task_name]
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("TRUNCATE procrastinate_jobs CASCADE")
    t0 = time.perf_counter()
    with app.open():
        for start in range(0, n, 1000):
            task.batch_defer(*({} for _ in range(min(1000, n - start))))
    enqueue_s = time.perf_counter() - t0
    with psycopg.connect(DSN, autocommit=True) as conn:
        for table in ("procrastinate_jobs", "procrastinate_events"):
            conn.execute(f"VACUUM ANALYZE {table}")
    print(json.dumps({"enqueued": n, "enqueue_s": enqueue_s}))


def latency(n: int, gap: float) -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("TRUNCATE procrastinate_jobs CASCADE")
        conn.execute("VACUUM ANALYZE procrastinate_jobs")
    rng = random.Random(1)
    commits: dict[int, float] = {}
    with app.open():
        for _ in range(n):
            job_id = stamp.defer()  # one autocommitted INSERT (and procrastinate's NOTIFY trigger)
            commits[job_id] = time.time()
            time.sleep(rng.uniform(gap * 0.5, gap * 1.5))
    print(json.dumps({"commits": commits}))


if __name__ == "__main__":
    if sys.argv[1] == "latency":
        latency(int(sys.argv[2]), float(sys.argv[3]))
    else:
        enqueue(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "noop")
