"""The procrastinate peer: an App on its own PostgreSQL database with one no-op task.

``python -m benchmarks.peers.procrastinate_app N`` empties the job table and defers N jobs; the
worker is procrastinate's own CLI (``procrastinate --app=benchmarks.peers.procrastinate_app.app worker``).
The task is ``async`` (procrastinate's native kind, its cheapest path), so the comparison gives
procrastinate its best case.
"""

from __future__ import annotations

import json
import os
import sys
import time

from procrastinate import App, PsycopgConnector

DSN = os.environ.get("PROCRASTINATE_DSN", "postgresql://postgres@127.0.0.1:5432/wakes_bench_procrastinate")

app = App(connector=PsycopgConnector(conninfo=DSN))


@app.task(name="noop")
async def noop() -> None:
    """Do nothing."""


def main() -> None:
    import psycopg

    n = int(sys.argv[1])
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("TRUNCATE procrastinate_jobs CASCADE")
    t0 = time.perf_counter()
    with app.open():
        for start in range(0, n, 1000):
            noop.batch_defer(*({} for _ in range(min(1000, n - start))))
    print(json.dumps({"enqueued": n, "enqueue_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
