"""Settings of the benchmark's own processes: the test project plus the benchmark's sinks.

The database comes from ``DATABASE_URL`` exactly as in ``testproject.settings``; the benchmark
points it at databases of its own (``wakes_bench`` on PostgreSQL, a file under ``benchmarks/.env``
for SQLite) so it never touches the test suites' databases.
"""

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
