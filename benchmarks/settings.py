"""Settings of the benchmark's own processes: the test project plus the benchmark's sinks.

Connections persist (``CONN_MAX_AGE = None``), as they do for the peers: a runner keeps its
connection anyway, and the benchmark's short steps should not pay a reconnect per request either.

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
        "bench.io": "benchmarks.sinks.io_wait",
    },
}

for _alias in DATABASES.values():  # noqa: F405
    _alias["CONN_MAX_AGE"] = None
