"""Settings of the benchmark's own processes: the test project plus the benchmark's sinks.

The database comes from ``DATABASE_URL`` exactly as in ``testproject.settings``; the benchmark
points it at databases of its own (``wakes_bench`` on PostgreSQL, a file under ``benchmarks/.env``
for SQLite) so it never touches the test suites' databases.
"""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import WAKES

WAKES = {
    **WAKES,
    "SINKS": {
        **WAKES.get("SINKS", {}),
        "bench.noop": "benchmarks.sinks.noop",
        "bench.stamp": "benchmarks.sinks.stamp",
    },
}

# BENCH_CONN_MAX_AGE=None|<seconds> overrides the test project's CONN_MAX_AGE (0, Django's default),
# to measure what per-pass reconnection costs the runner (see docs/performance.md).
if "BENCH_CONN_MAX_AGE" in os.environ:
    _age = os.environ["BENCH_CONN_MAX_AGE"]
    DATABASES["default"]["CONN_MAX_AGE"] = None if _age.lower() == "none" else int(_age)  # noqa: F405
