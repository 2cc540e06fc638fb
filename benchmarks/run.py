"""``make bench``: every figure of the django-wakes benchmark, on SQLite and PostgreSQL, in one run.

Run it with the benchmark's own virtualenv (``benchmarks/.env``, which ``make bench`` creates)::

    benchmarks/.env/bin/python -m benchmarks.run

It orchestrates real processes: ``manage.py runwakes`` runners, the peers' workers
(django-tasks-db's ``db_worker``, procrastinate's ``worker``) and short Django steps
(``benchmarks.jobs``). It uses databases of its own (``wakes_bench*`` on the PostgreSQL server,
files under ``benchmarks/.env/data`` for SQLite). Knobs (environment variables) are listed in
``benchmarks/README.md``; ``BENCH_QUICK=1`` is a small smoke run.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent
WORK = ROOT / "benchmarks" / ".env"
DATA = WORK / "data"
LOGS = WORK / "logs"

QUICK = os.environ.get("BENCH_QUICK") == "1"


def knob(name: str, default: Any, quick: Any = None) -> Any:
    value = os.environ.get(name)
    if value is None:
        return quick if QUICK and quick is not None else default
    return type(default)(value)


N = knob("BENCH_N", 10_000, 1_000)
LANES = knob("BENCH_LANES", 100)
DBS = [d.strip() for d in knob("BENCH_DBS", "sqlite,postgres,mariadb").split(",") if d.strip()]
SECTIONS = "ceiling,throughput,create,peers,io,latency,big,claim,rss,fair"
ONLY = {s.strip() for s in knob("BENCH_ONLY", SECTIONS).split(",") if s.strip()}
PG = knob("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
MARIADB = knob("BENCH_MARIADB", "mysql://root@127.0.0.1:3306").rstrip("/")
LAT_N = knob("BENCH_LAT_N", 300, 50)
LAT_GAP = knob("BENCH_LAT_GAP", 0.03)
CLAIM_SMALL = knob("BENCH_CLAIM_SMALL", 10_000, 1_000)
CLAIM_LARGE = knob("BENCH_CLAIM_LARGE", 1_000_000, 100_000)
CLAIM_REPS = knob("BENCH_CLAIM_REPS", 15, 5)
CONCURRENCY = knob("BENCH_CONCURRENCY", 4)
CONCURRENCY_N = knob("BENCH_CONCURRENCY_N", N)
# (runner processes, lanes, --concurrency) of the fire-throughput runs
FIRE_CONFIGS = [(1, 0, 1), (2, 0, 1), (1, LANES, 1), (2, LANES, 1)]
if CONCURRENCY > 1:
    FIRE_CONFIGS += [(1, 0, CONCURRENCY), (1, LANES, CONCURRENCY)]
if os.environ.get("BENCH_FIRE"):  # e.g. "1x0x1,1x0x4": runners x lanes x concurrency (a few runs only)
    FIRE_CONFIGS = [tuple(int(v) for v in c.split("x")) for c in os.environ["BENCH_FIRE"].split(",")]  # type: ignore[misc]
RSS_N = knob("BENCH_RSS_N", 100_000, 5_000)
RSS_FIRST = knob("BENCH_RSS_FIRST", 1_000)
RSS_DB = knob("BENCH_RSS_DB", "postgres")
CEILING_S = knob("BENCH_CEILING_SECONDS", 5.0, 2.0)
PROCRASTINATE_SWEEP = [int(c) for c in knob("BENCH_PROCRASTINATE_SWEEP", "1,4,10").split(",") if c.strip()]
CREATE_N = knob("BENCH_CREATE_N", 5_000, 1_000)
IO_N = knob("BENCH_IO_N", 2_000, 1_000)
IO_CONCURRENCY = knob("BENCH_IO_CONCURRENCY", 50)
IO_SECONDS = knob("BENCH_IO_SECONDS", 0.1)
BIG_TERMINAL = knob("BENCH_BIG_TERMINAL", 1_000_000, 100_000)
BIG_DUE = knob("BENCH_BIG_DUE", 2_000, 1_000)
BIG_LANES = knob("BENCH_BIG_LANES", 100)
TIMEOUT = knob("BENCH_TIMEOUT", 900.0)
STALL = knob("BENCH_STALL", 60.0)
OUT = Path(knob("BENCH_OUT", str(WORK / "results.json")))
#: Extra runwakes options for every fire run, e.g. "--batch 50" (an experiment; the defaults are the figure).
RUNWAKES_ARGS = knob("BENCH_RUNWAKES_ARGS", "").split()

TARGETS = {  # the performance issue's targets (docs/performance.md says which are met)
    "ceiling_fraction": 0.40,
    "peer_ratio": 15.0,  # no-op throughput, django-wakes (best config) / best peer (best config)
    "io_fraction": 0.97,  # I/O-bound: wakes/s / (concurrency / sink seconds)
    "push_p50_ms": 1.5,
    "push_p99_ms": 3.0,
    "stale_ratio": 1.2,  # big table: fresh rate / stale rate
    "lanes_fraction": 0.80,  # 100 lanes with 2 runners / no lanes with 2 runners
    "schedule_alone": 2_000,  # schedule() alone, wakes/s on PostgreSQL
    "claim_ratio": 1.5,
    "rss_ratio": 1.1,
}

_live: list[subprocess.Popen[bytes]] = []


def say(text: str = "") -> None:
    print(text, flush=True)


def note(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# Databases
# --------------------------------------------------------------------------------------------------


class Db:
    """One benchmark database: its DATABASE_URL and a raw connection for polling counts."""

    def __init__(self, vendor: str, name: str) -> None:
        self.vendor = vendor
        self.name = name
        if vendor == "postgres":
            self.url = f"{PG}/{name}"
            self.dsn = self.url.replace("postgres://", "postgresql://", 1)
        elif vendor == "mariadb":
            self.url = f"{MARIADB}/{name}"
        else:
            self.path = DATA / f"{name}.sqlite3"
            self.url = f"sqlite:///{self.path}"
        self._conn: Any = None

    def recreate(self) -> None:
        self.close()
        if self.vendor == "postgres":
            pg_admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            pg_admin(f'CREATE DATABASE "{self.name}"')
        elif self.vendor == "mariadb":
            with mariadb_connect() as conn, conn.cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS `{self.name}`")
                cursor.execute(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        else:
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def conn(self) -> Any:
        if self._conn is None:
            if self.vendor == "postgres":
                import psycopg

                self._conn = psycopg.connect(self.dsn, autocommit=True)
            elif self.vendor == "mariadb":
                self._conn = mariadb_connect(self.name)
            else:
                self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        return self._conn

    def scalar(self, sql: str) -> Any:
        if self.vendor == "mariadb":
            with self.conn().cursor() as cur:
                cur.execute(sql)
                row = cur.fetchone()
        else:
            row = self.conn().execute(sql).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def mariadb_connect(name: str | None = None) -> Any:
    """A MariaDB connection (autocommit) to database ``name`` on ``BENCH_MARIADB`` (the server if ``None``)."""
    from urllib.parse import urlparse

    import MySQLdb

    url = urlparse(MARIADB)
    kwargs: dict[str, Any] = {"host": url.hostname or "127.0.0.1", "port": url.port or 3306, "user": url.username}
    if url.password:
        kwargs["password"] = url.password
    if name:
        kwargs["database"] = name
    conn = MySQLdb.connect(**kwargs, autocommit=True, charset="utf8mb4")
    return conn


def mariadb_reachable() -> str | None:
    """Why MariaDB cannot be benchmarked here (``None``: it can)."""
    try:
        mariadb_connect().close()
    except Exception as exc:  # noqa: BLE001 - no client library, no server: say so and go on
        return f"{type(exc).__name__}: {exc}"
    return None


def pg_admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG.replace('postgres://', 'postgresql://', 1)}/postgres", autocommit=True) as conn:
        conn.execute(sql)


# --------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------


def child_env(url: str, settings: str = "benchmarks.settings", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE=settings, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("DJANGO_DEBUG", None)
    env.update(extra)
    return env


def log_file(name: str) -> Any:
    LOGS.mkdir(parents=True, exist_ok=True)
    return open(LOGS / f"{name}.log", "ab")  # noqa: SIM115


def run_json(argv: list[str], env: dict[str, str], log: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Run a step to completion; return the JSON object on its last stdout line."""
    with log_file(log) as err:
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, timeout=timeout)
    if done.returncode != 0:
        tail = (LOGS / f"{log}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{tail}")
    lines = done.stdout.decode().strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def job(db: Db, *args: Any, log: str = "jobs") -> dict[str, Any]:
    return run_json([PY, "-m", "benchmarks.jobs", *map(str, args)], child_env(db.url), log)


def migrate(db: Db, settings: str = "benchmarks.settings") -> None:
    run_json([PY, "manage.py", "migrate", "--verbosity", "0"], child_env(db.url, settings), "migrate")


def start(argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    with log_file(log) as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _live.append(proc)
    return proc


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process we started (by pid), then SIGKILL any that outlives 30 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc in _live:
            _live.remove(proc)


TICK = os.sysconf("SC_CLK_TCK")
#: CPU seconds of the last drain: the worker processes (every thread) and their PostgreSQL backends.
LAST_CPU: dict[str, float | None] = {}


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def backends_cpu(db: Db) -> float:
    """CPU seconds of the PostgreSQL backends connected to ``db`` (but the orchestrator's own)."""
    pids = db.conn().execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [db.name]
    )
    return sum(proc_cpu(pid) for (pid,) in pids.fetchall())


def drain(
    starter: Callable[[], list[subprocess.Popen[bytes]]],
    done: Callable[[], int],
    n: int,
    poll: float,
    cpu_db: Db | None = None,
) -> tuple[float, int]:
    """Start the workers and poll ``done()`` until it reaches ``n``; return (seconds from start, count).

    Before stopping them, the CPU they used (start-up included) and, on PostgreSQL, the CPU of their
    backends go to :data:`LAST_CPU`: on a shared machine the CPU a run costs moves much less than
    its wall time.
    """
    LAST_CPU.clear()
    t0 = time.perf_counter()
    procs = starter()
    count, last_count, last_progress = 0, -1, t0
    try:
        while True:
            count = done()
            if count >= n:
                break
            now = time.perf_counter()
            if count != last_count:
                last_count, last_progress = count, now
            if now - t0 > TIMEOUT or now - last_progress > STALL:
                note(f"gave up after {now - t0:.0f}s with {count}/{n} done (see {LOGS})")
                break
            if all(p.poll() is not None for p in procs):
                raise RuntimeError(f"every worker exited with {count}/{n} done (see {LOGS})")
            time.sleep(poll)
        elapsed = time.perf_counter() - t0
        LAST_CPU["workers_s"] = sum(proc_cpu(p.pid) for p in procs)
        LAST_CPU["server_s"] = backends_cpu(cpu_db) if cpu_db is not None and cpu_db.vendor == "postgres" else None
    finally:
        stop(procs)
    return elapsed, count


# --------------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------------


def ceiling(db: Db, seconds: float) -> float:
    """Raw single-row UPDATE commits/s from one Python process, on the same database."""
    rows = 1000
    if db.vendor == "postgres":
        import psycopg

        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
            conn.execute(
                "INSERT INTO bench_ceiling (id) SELECT g FROM generate_series(1, %s) g ON CONFLICT DO NOTHING", [rows]
            )
            return _update_loop(
                lambda i: conn.execute("UPDATE bench_ceiling SET n = n + 1 WHERE id = %s", [i]), rows, seconds
            )
    if db.vendor == "mariadb":
        conn = mariadb_connect(db.name)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "CREATE TABLE IF NOT EXISTS bench_ceiling (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)"
                )
                cur.execute(
                    "INSERT IGNORE INTO bench_ceiling (id) WITH RECURSIVE g(i) AS "
                    "(SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %s) SELECT i FROM g",
                    [rows],
                )
                return _update_loop(
                    lambda i: cur.execute("UPDATE bench_ceiling SET n = n + 1 WHERE id = %s", [i]), rows, seconds
                )
        finally:
            conn.close()
    # SQLite: the file Django uses, with its journal settings (rollback journal, synchronous=FULL
    # unless the file says otherwise); autocommit, so each UPDATE is its own committed transaction.
    conn = sqlite3.connect(db.path, timeout=30, isolation_level=None)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_ceiling (id integer PRIMARY KEY, n integer NOT NULL DEFAULT 0)")
        conn.execute(
            "INSERT OR IGNORE INTO bench_ceiling (id) WITH RECURSIVE g(i) AS "
            "(SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?) SELECT i FROM g",
            [rows],
        )
        return _update_loop(
            lambda i: conn.execute("UPDATE bench_ceiling SET n = n + 1 WHERE id = ?", [i]), rows, seconds
        )
    finally:
        conn.close()


def _update_loop(update: Callable[[int], Any], rows: int, seconds: float) -> float:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        update(n % rows + 1)
        n += 1
    return n / (time.perf_counter() - t0)


def throughput(
    db: Db, runners: int, lanes: int, concurrency: int = 1, *, n: int | None = None, kind: str = "bench.noop"
) -> dict[str, Any]:
    """Seed ``n`` due wakes (VACUUM ANALYZEd), start ``runners`` runwakes processes, time until all are fired."""
    n = n or (N if concurrency == 1 else CONCURRENCY_N)
    job(db, "prepare", "--n", n, "--lanes", lanes, "--kind", kind)
    db.close()
    return drain_runwakes(
        db, runners, lanes, concurrency, n, f"{kind.split('.')[-1]}-{runners}r-{lanes}l-c{concurrency}"
    )


def drain_runwakes(
    db: Db,
    runners: int,
    lanes: int,
    concurrency: int,
    n: int,
    label: str,
    fired_sql: str = "SELECT count(*) FROM django_wakes_wake WHERE state = 'fired'",
    base: int = 0,
) -> dict[str, Any]:
    """Start ``runners`` runwakes processes and time them until ``fired_sql`` counts ``base + n``."""
    tag = f"runwakes-{db.vendor}-{label}"
    log = LOGS / f"{tag}.log"
    log_from = log.stat().st_size if log.exists() else 0
    argv = [PY, "manage.py", "runwakes"] + (["--concurrency", str(concurrency)] if concurrency > 1 else [])
    argv += RUNWAKES_ARGS

    def starter() -> list[subprocess.Popen[bytes]]:
        return [start(argv, child_env(db.url), tag) for _ in range(runners)]

    elapsed, count = drain(
        starter,
        lambda: db.scalar(fired_sql) - base,
        n,
        {"postgres": 0.02, "mariadb": 0.05}.get(db.vendor, 0.2),
        cpu_db=db,
    )
    cpu = dict(LAST_CPU)
    span = job(db, "span", "--workspace", "bench")
    with open(log, "rb") as fh:  # what the runners logged in this run only (the log is appended to)
        fh.seek(log_from)
        lines = fh.read().decode(errors="replace").splitlines()
    return {
        "fenced_lines": sum(("taken over" in ln or "fenced" in ln) for ln in lines),
        "rolled_back_lines": sum("rolled back" in ln for ln in lines),
        "error_lines": sum(("ERROR" in ln or "Traceback" in ln or "WARNING" in ln) for ln in lines),
        "db": db.vendor,
        "runners": runners,
        "lanes": lanes,
        "concurrency": concurrency,
        "n": n,
        "fired": count,
        "wall_s": elapsed,
        "rate": count / elapsed,
        "span_s": span["span_s"],
        "span_rate": count / span["span_s"] if span["span_s"] else None,
        "states": span["states"],
        "attempts": span["attempts"],
        "attempted_wakes": span["attempted_wakes"],
        "claims": span["claims"],
        "by_runner": span.get("by_runner"),
        "cpu_workers_s": cpu.get("workers_s"),
        "cpu_server_s": cpu.get("server_s"),
    }


def peer_tasks_db() -> dict[str, Any]:
    """django-tasks-db: enqueue N no-op tasks (VACUUM ANALYZE), then time one ``db_worker`` draining them.

    Its best configuration: persistent connections (``CONN_MAX_AGE=None`` in its settings) and
    ``--no-startup-delay``. Only one worker: ``db_worker`` runs one task at a time, and a second
    process on 2 cores fights the first for the CPU (measured: no faster).
    """
    db = Db("postgres", "wakes_bench_tasks")
    db.recreate()
    settings = "benchmarks.peers.tasks_settings"
    migrate(db, settings)
    enq = run_json([PY, "-m", "benchmarks.peers.tasks_jobs", str(N)], child_env(db.url, settings), "tasks-db")
    argv = [PY, "manage.py", "db_worker", "--no-startup-delay", "--interval", "0.1"]
    elapsed, count = drain(
        lambda: [start(argv, child_env(db.url, settings), "tasks-db")],
        lambda: db.scalar(f"SELECT count(*) FROM {enq['table']} WHERE status = 'SUCCESSFUL'"),
        N,
        0.02,
        cpu_db=db,
    )
    cpu = dict(LAST_CPU)
    db.close()
    return {
        "peer": "django-tasks-db db_worker",
        "cpu_workers_s": cpu.get("workers_s"),
        "cpu_server_s": cpu.get("server_s"),
        "n": N,
        "done": count,
        "wall_s": elapsed,
        "rate": count / elapsed,
        "enqueue_s": enq["enqueue_s"],
    }


def procrastinate_db() -> tuple[Db, dict[str, str], str, str]:
    db = Db("postgres", "wakes_bench_procrastinate")
    db.recreate()
    env = child_env(db.url, PROCRASTINATE_DSN=db.dsn, BENCH_IO_SECONDS=str(IO_SECONDS))
    app = "--app=benchmarks.peers.procrastinate_app.app"
    cli = str(BIN / "procrastinate")
    run_json([cli, app, "schema", "--apply"], env, "procrastinate")
    return db, env, app, cli


def procrastinate_drain(
    db: Db, env: dict[str, str], app: str, cli: str, n: int, task: str, conc: int
) -> dict[str, Any]:
    """Defer ``n`` jobs of ``task`` (VACUUM ANALYZEd), then time one worker with ``--concurrency conc``."""
    enq = run_json([PY, "-m", "benchmarks.peers.procrastinate_app", "enqueue", str(n), task], env, "procrastinate")
    argv = [cli, app, "worker", "--concurrency", str(conc)]
    elapsed, count = drain(
        lambda: [start(argv, env, "procrastinate")],
        lambda: db.scalar("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"),
        n,
        0.02,
        cpu_db=db,
    )
    cpu = dict(LAST_CPU)
    span = db.scalar(
        "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded') "
        "- min(at) FILTER (WHERE type = 'started')) FROM procrastinate_events"
    )
    return {
        "peer": f"procrastinate worker -c {conc}",
        "cpu_workers_s": cpu.get("workers_s"),
        "cpu_server_s": cpu.get("server_s"),
        "task": task,
        "concurrency": conc,
        "n": n,
        "done": count,
        "wall_s": elapsed,
        "rate": count / elapsed,
        "span_s": float(span) if span else None,
        "span_rate": count / float(span) if span else None,
        "enqueue_s": enq["enqueue_s"],
    }


def peer_procrastinate() -> list[dict[str, Any]]:
    """procrastinate: N no-op jobs per run, one worker, over the concurrency sweep (its native async task)."""
    db, env, app, cli = procrastinate_db()
    results = [procrastinate_drain(db, env, app, cli, N, "noop", conc) for conc in PROCRASTINATE_SWEEP]
    db.close()
    return results


def peer_procrastinate_io() -> dict[str, Any]:
    """procrastinate: IO_N jobs that each await ``IO_SECONDS``, one worker ``--concurrency IO_CONCURRENCY``."""
    db, env, app, cli = procrastinate_db()
    result = procrastinate_drain(db, env, app, cli, IO_N, "io_wait", IO_CONCURRENCY)
    db.close()
    return result


def latency_procrastinate() -> dict[str, Any]:
    """procrastinate's push latency: jobs deferred one at a time by another process, an idle worker listening."""
    db, env, app, cli = procrastinate_db()
    stamps = DATA / "stamps-procrastinate.txt"
    stamps.unlink(missing_ok=True)
    env = {**env, "BENCH_STAMP_FILE": str(stamps)}
    worker = start([cli, app, "worker"], env, "procrastinate-latency")
    try:
        time.sleep(2.0)  # let it start and LISTEN
        if worker.poll() is not None:
            raise RuntimeError(f"the procrastinate worker did not start (see {LOGS})")
        created = run_json(
            [PY, "-m", "benchmarks.peers.procrastinate_app", "latency", str(LAT_N), str(LAT_GAP)],
            env,
            "procrastinate-latency",
        )["commits"]
        result = collect_latency({int(k): v for k, v in created.items()}, stamps, "procrastinate push")
    finally:
        stop([worker])
        db.close()
    return result


def collect_latency(commits: dict[int, float], stamps: Path, mode: str) -> dict[str, Any]:
    """Wait for every created item's stamp; latency = sink stamp - commit stamp."""
    fired: dict[int, float] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if stamps.exists():
            for line in stamps.read_text().splitlines():
                item, at = line.split()
                fired.setdefault(int(item), float(at))
        if all(k in fired for k in commits):
            break
        time.sleep(0.1)
    lat = [(fired[k] - commits[k]) * 1000 for k in commits if k in fired]
    return {
        "mode": mode,
        "n": len(commits),
        "fired": len(lat),
        "p50_ms": percentile(lat, 0.50),
        "p90_ms": percentile(lat, 0.90),
        "p99_ms": percentile(lat, 0.99),
        "max_ms": max(lat),
        "mean_ms": sum(lat) / len(lat),
    }


def big_table(db: Db) -> dict[str, Any]:
    """BIG_TERMINAL fired rows + BIG_DUE due wakes on BIG_LANES lanes: one runner, stale then fresh statistics."""
    job(db, "big-seed", "--terminal", BIG_TERMINAL, log="big")
    out: dict[str, Any] = {"terminal": BIG_TERMINAL, "due": BIG_DUE, "lanes": BIG_LANES}
    try:
        for stats in ("stale", "fresh"):
            job(db, "big-due", "--n", BIG_DUE, "--lanes", BIG_LANES, "--stats", stats, log="big")
            db.close()
            out[stats] = drain_runwakes(
                db,
                1,
                BIG_LANES,
                1,
                BIG_DUE,
                f"big-{stats}",
                fired_sql="SELECT count(*) FROM django_wakes_wake WHERE workspace_id = 'bench' AND state = 'fired'",
            )
    finally:
        job(db, "autovacuum-on", log="big")
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def latency(db: Db, listen: bool) -> dict[str, Any]:
    """Due-to-fire latency of due-now wakes created one at a time by another process."""
    job(db, "reset")
    db.close()
    mode = "push" if listen else "poll"
    stamps = DATA / f"stamps-{mode}.txt"
    stamps.unlink(missing_ok=True)
    env = child_env(db.url, BENCH_STAMP_FILE=str(stamps))
    argv = [PY, "manage.py", "runwakes"] + ([] if listen else ["--no-listen"])
    runner = start(argv, env, f"latency-{mode}")
    try:
        deadline = time.monotonic() + 60
        while not db.scalar("SELECT count(*) FROM django_wakes_runner"):
            if time.monotonic() > deadline or runner.poll() is not None:
                raise RuntimeError(f"the latency runner did not start (see {LOGS})")
            time.sleep(0.05)
        time.sleep(1.0)  # let its LISTEN connection settle
        created = job(db, "create", "--n", LAT_N, "--gap", LAT_GAP, log=f"latency-{mode}")["commits"]
        result = collect_latency({int(k): v for k, v in created.items()}, stamps, mode)
    finally:
        stop([runner])
    return result


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "nproc": os.cpu_count()}
    try:
        meminfo = Path("/proc/meminfo").read_text().split("\n")[0]
        info["ram_gib"] = round(int(meminfo.split()[1]) / 1024 / 1024, 1)
        model = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")]
        info["cpu"] = model[0].split(":", 1)[1].strip() if model else platform.processor()
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        pass
    info["python"] = platform.python_version()
    info["sqlite"] = sqlite3.sqlite_version
    try:
        import django
        import psycopg

        info["django"] = django.get_version()
        info["psycopg"] = psycopg.__version__
        with psycopg.connect(f"{PG.replace('postgres://', 'postgresql://', 1)}/postgres") as conn:
            info["postgresql"] = conn.execute("SHOW server_version").fetchone()[0]
            info["pg_synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]
            info["pg_fsync"] = conn.execute("SHOW fsync").fetchone()[0]
    except Exception as exc:  # noqa: BLE001
        info["postgresql"] = f"unreachable: {exc}"
    tool = shutil.which("mariadb") or shutil.which("mysql")
    if tool:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip()
        info["mariadb_client"] = out
    try:
        from importlib.metadata import version

        info["peers"] = {p: version(p) for p in ("django-tasks-db", "django-tasks", "procrastinate")}
    except Exception:  # noqa: BLE001
        info["peers"] = "not installed"
    try:
        info["git"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "django_wakes"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        info["django_wakes_dirty"] = bool(dirty)
    except OSError:
        pass
    return info


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("MET" if ok else "MISSED")


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def fire_line(r: dict[str, Any], label: str) -> str:
    """One fire run as printed, with the exactly-once check and what the runners' log says."""
    exact = (
        r["states"] == {"fired": r["n"]} and r["attempts"] == r["attempted_wakes"] == r["n"] and r["claims"] == r["n"]
    )
    r["exactly_once"] = exact
    check = (
        ""
        if exact
        else (
            f"  (!) states={r['states']} attempts={r['attempts']} "
            f"(for {r['attempted_wakes']} wakes) claims={r['claims']}"
        )
    )
    noisy = {k: r[k] for k in ("fenced_lines", "rolled_back_lines", "error_lines") if r[k]}
    if noisy:
        check += f"  (!) runner log: {noisy}"
    span = f"{r['span_rate']:,.0f}/s" if r.get("span_rate") else "?"
    split = ""
    if r.get("runners", 1) > 1 and r.get("by_runner"):  # how the wakes were shared out between the runners
        split = f"; fired per runner {'/'.join(f'{n:,}' for n in r['by_runner'])}"
    return (
        f"  {label}: {r['rate']:7,.0f} wakes/s  ({r['n']:,} in {r['wall_s']:.2f}s from launch; "
        f"{span} first claim→last settle; {cpu_text(r)}{split}){check}"
    )


def cpu_text(r: dict[str, Any]) -> str:
    """CPU per 1,000 items: the worker processes (start-up included) + their PostgreSQL backends."""
    n = r.get("n") or r.get("done") or 0
    if not n or r.get("cpu_workers_s") is None:
        return "CPU ?"
    text = f"CPU/1,000: {r['cpu_workers_s'] / n * 1e6:,.0f} ms"
    if r.get("cpu_server_s") is not None:
        text += f" + {r['cpu_server_s'] / n * 1e6:,.0f} ms server"
    return text


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupted)  # so the finally below stops every worker we started
    DATA.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "machine": machine(),
        "knobs": {
            "N": N,
            "lanes": LANES,
            "dbs": DBS,
            "only": sorted(ONLY),
            "lat_n": LAT_N,
            "claim_small": CLAIM_SMALL,
            "claim_large": CLAIM_LARGE,
            "concurrency": CONCURRENCY,
            "concurrency_n": CONCURRENCY_N,
            "rss_n": RSS_N,
            "rss_first": RSS_FIRST,
            "rss_db": RSS_DB,
            "procrastinate_sweep": PROCRASTINATE_SWEEP,
            "io_n": IO_N,
            "io_concurrency": IO_CONCURRENCY,
            "io_seconds": IO_SECONDS,
            "big_terminal": BIG_TERMINAL,
            "big_due": BIG_DUE,
            "big_lanes": BIG_LANES,
            "create_n": CREATE_N,
        },
    }
    m = results["machine"]
    say("django-wakes benchmark")
    say(
        f"  machine: {m.get('nproc')} cpu ({m.get('cpu', '?')}), {m.get('ram_gib', '?')} GiB RAM, "
        f"load {' '.join(m.get('loadavg_start', []))} at start"
    )
    say(
        f"  Python {m['python']}, Django {m.get('django')}, psycopg {m.get('psycopg')}, SQLite {m['sqlite']}, "
        f"PostgreSQL {m.get('postgresql')} "
        f"(synchronous_commit={m.get('pg_synchronous_commit')}, fsync={m.get('pg_fsync')})"
    )
    say(
        f"  peers: {m.get('peers')}; {m['date']}; git {m.get('git')}"
        f"{' + uncommitted django_wakes changes' if m.get('django_wakes_dirty') else ''}"
    )
    say(
        f"  N={N} lanes={LANES} dbs={','.join(DBS)} sections={','.join(s for s in SECTIONS.split(',') if s in ONLY)}"
        + (f" runwakes {' '.join(RUNWAKES_ARGS)}" if RUNWAKES_ARGS else "")
    )
    say("  every queue table is VACUUM ANALYZEd after seeding; every worker keeps its connections")
    t_start = time.perf_counter()
    results["ceiling"], results["throughput"], results["claim"] = {}, [], {}
    try:
        for vendor in DBS:
            if vendor == "mariadb" and (why := mariadb_reachable()) is not None:
                say()
                say(f"== mariadb == skipped: {why}")
                continue
            db = Db(vendor, "wakes_bench")
            db.recreate()
            migrate(db)
            say()
            say(f"== {vendor} ==")
            if "ceiling" in ONLY:
                c = ceiling(db, CEILING_S)
                results["ceiling"][vendor] = [c]
                say(f"  ceiling (raw single-row UPDATE commits/s, one process): {c:,.0f}/s")
            if "throughput" in ONLY:
                for runners, lanes, conc in FIRE_CONFIGS:
                    note(f"{vendor}: {runners} runner(s), {lanes or 'no'} lanes, concurrency {conc}")
                    r = throughput(db, runners, lanes, conc)
                    results["throughput"].append(r)
                    lanes_txt = f"{lanes} lanes" if lanes else "no lanes"
                    conc_txt = f" --concurrency {conc}" if conc > 1 else ""
                    say(fire_line(r, f"fire {runners} runner{'s' if runners > 1 else ' '} {lanes_txt:>9}{conc_txt}"))
            if "ceiling" in ONLY:
                c = ceiling(db, CEILING_S)
                results["ceiling"].setdefault(vendor, []).append(c)
                say(f"  ceiling again after the fire runs: {c:,.0f}/s")
            if "create" in ONLY:
                note(f"{vendor}: creating {CREATE_N:,} wakes three ways")
                cr = job(db, "create-rate", "--n", CREATE_N, log="create")
                results.setdefault("create", {})[vendor] = cr
                say(
                    f"  creating wakes: schedule() {cr['schedule']:,.0f}/s alone, "
                    f"{cr['schedule_in_transaction']:,.0f}/s in transactions of 1,000; "
                    f"schedule_many() of 1,000 {cr['schedule_many']:,.0f}/s"
                )
            if vendor == "postgres" and "io" in ONLY:
                note(f"I/O-bound: {IO_N:,} async sinks of {IO_SECONDS:g}s, --concurrency {IO_CONCURRENCY}")
                r = throughput(db, 1, 0, IO_CONCURRENCY, n=IO_N, kind="bench.io")
                ideal = IO_CONCURRENCY / IO_SECONDS
                r["ideal"] = ideal
                results["io"] = {"ours": r}
                say(
                    fire_line(
                        r, f"I/O-bound (async sinks awaiting {IO_SECONDS * 1000:.0f} ms) --concurrency {IO_CONCURRENCY}"
                    )
                    + f"; ideal {ideal:,.0f}/s: {r['rate'] / ideal:.1%} from launch, "
                    f"{(r['span_rate'] or 0) / ideal:.1%} first claim→last settle"
                )
            if "claim" in ONLY and vendor != "mariadb":  # its seeding SQL is PostgreSQL's and SQLite's
                claim_section(db, vendor, results)
            if vendor in ("postgres", "mariadb") and "latency" in ONLY:
                if vendor == "postgres":
                    results["latency"] = []
                for listen in (True, False) if vendor == "postgres" else (False,):
                    note(f"latency, {'push (LISTEN/NOTIFY)' if listen else 'poll only (--no-listen)'}")
                    lat = latency(db, listen)
                    lat["db"] = vendor
                    results.setdefault("latency", []).append(lat)
                    label = "push (LISTEN/NOTIFY)" if listen else "poll only (--no-listen, 1s interval)"
                    if vendor == "mariadb":
                        label = "poll (no push on MariaDB, 1s interval)"
                    say(
                        f"  due-to-fire latency, {label}: p50 {lat['p50_ms']:.2f} ms, p90 {lat['p90_ms']:.2f} ms, "
                        f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.1f} ms ({lat['fired']}/{lat['n']} wakes)"
                    )
            if vendor == "postgres" and "big" in ONLY:
                note(f"big table: {BIG_TERMINAL:,} terminal rows + {BIG_DUE:,} due on {BIG_LANES} lanes")
                big = big_table(db)
                results["big"] = big
                for stats in ("stale", "fresh"):
                    say(
                        fire_line(
                            big[stats],
                            f"{BIG_TERMINAL:,} fired rows + {BIG_DUE:,} due on {BIG_LANES} lanes, {stats} statistics",
                        )
                    )
                big["ratio"] = big["fresh"]["rate"] / big["stale"]["rate"]
                big["span_ratio"] = (big["fresh"]["span_rate"] or 0) / (big["stale"]["span_rate"] or float("nan"))
                say(
                    f"  ...fresh / stale: {big['ratio']:.2f} from launch, "
                    f"{big['span_ratio']:.2f} first claim→last settle"
                )
            if vendor == RSS_DB and "rss" in ONLY:
                note(f"{vendor}: runner RSS over {RSS_N:,} fires (in-process Sweeper loop)")
                rss = job(db, "rss", "--n", RSS_N, "--first", RSS_FIRST, log="rss")
                rss["db"] = vendor
                results["rss"] = rss
                say(
                    f"  runner RSS ({vendor}, in-process Sweeper): {rss['rss_first_kib'] / 1024:.1f} MiB after "
                    f"{RSS_FIRST:,} fires, {rss['rss_last_kib'] / 1024:.1f} MiB after {RSS_N:,}: "
                    f"ratio {rss['ratio']:.3f} ({rss['rate_after_first']:,.0f} fires/s in-process)"
                )
            db.close()
        if "postgres" in DBS and ONLY & {"peers", "io", "latency"}:
            say()
            say("== peers (PostgreSQL, same server, same run; queue tables VACUUM ANALYZEd, persistent connections) ==")
        if "postgres" in DBS and "peers" in ONLY:
            results["peers"] = []
            note("django-tasks-db")
            results["peers"].append(peer_tasks_db())
            note("procrastinate")
            results["peers"].extend(peer_procrastinate())
            for p in results["peers"]:
                say(
                    f"  no-op: {p['peer']:<30} {p['rate']:7,.0f} jobs/s ({N:,} in {p['wall_s']:.2f}s from launch"
                    + (f"; {p['span_rate']:,.0f}/s first start→last success" if p.get("span_rate") else "")
                    + f"; {cpu_text(p)})"
                )
        if "postgres" in DBS and "io" in ONLY:
            note("procrastinate, I/O-bound")
            p = peer_procrastinate_io()
            results.setdefault("io", {})["procrastinate"] = p
            say(
                f"  I/O-bound: {p['peer']:<26} {p['rate']:7,.0f} jobs/s ({IO_N:,} in {p['wall_s']:.2f}s from launch; "
                f"{p['span_rate'] or 0:,.0f}/s first start→last success; {cpu_text(p)}); "
                f"ideal {IO_CONCURRENCY / IO_SECONDS:,.0f}/s"
            )
        if "postgres" in DBS and "latency" in ONLY:
            note("procrastinate, push latency")
            lat = latency_procrastinate()
            results["latency_procrastinate"] = lat
            say(
                f"  push latency: procrastinate worker (LISTEN/NOTIFY): p50 {lat['p50_ms']:.2f} ms, "
                f"p90 {lat['p90_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.1f} ms "
                f"({lat['fired']}/{lat['n']} jobs)"
            )
        if "fair" in ONLY:  # the noisy neighbour, fair share across workspaces (benchmarks/fairness.py)
            from benchmarks import fairness

            say()
            say("== fair share across workspaces (noisy neighbour; ratios in the same run) ==")
            results["fair"] = fairness.section([v for v in ("postgres", "mariadb", "sqlite") if v in DBS])
    finally:
        stop(list(_live))
    results["elapsed_s"] = time.perf_counter() - t_start
    results["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    summary(results)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2, default=str))
    say(
        f"\n  results: {OUT}  (logs: {LOGS}); took {results['elapsed_s'] / 60:.1f} min; "
        f"load {' '.join(results['machine']['loadavg_end'])} at the end"
    )
    return 0


def claim_section(db: Db, vendor: str, results: dict[str, Any]) -> None:
    """The claim-pass figures: 10k vs 1M pending future rows, one due wake, a lane backlog, stale statistics."""
    cdb = Db(vendor, "wakes_bench_claim")
    cdb.recreate()
    migrate(cdb)
    note(f"{vendor}: claim pass with {CLAIM_SMALL:,} then {CLAIM_LARGE:,} pending future rows")
    cl = job(cdb, "claim", "--small", CLAIM_SMALL, "--large", CLAIM_LARGE, "--reps", CLAIM_REPS, log="claim")
    if vendor == "postgres":  # the 1M-row database is big: drop it once measured
        pg_admin('DROP DATABASE IF EXISTS "wakes_bench_claim" WITH (FORCE)')
    else:
        cdb.recreate()
    cl["ratio"] = cl["at_large"]["claim_ms"] / cl["at_small"]["claim_ms"]
    cl["run_due_ratio"] = cl["at_large"]["run_due_ms"] / cl["at_small"]["run_due_ms"]
    results["claim"][vendor] = cl
    say(
        f"  claim_batch over {cl['due_per_pass']} due rows: {cl['at_small']['claim_ms']:.2f} ms with "
        f"{CLAIM_SMALL:,} pending future rows, {cl['at_large']['claim_ms']:.2f} ms with "
        f"{CLAIM_LARGE:,}: ratio {cl['ratio']:.2f}"
    )
    say(
        f"  whole run_due pass:            {cl['at_small']['run_due_ms']:.2f} ms vs "
        f"{cl['at_large']['run_due_ms']:.2f} ms: ratio {cl['run_due_ratio']:.2f}"
    )
    cs, cg = cl["candidates_small"], cl["candidates_large"]
    cl["candidates_ratio"] = cg / cs
    say(f"  candidate query alone:         {cs:.2f} ms vs {cg:.2f} ms: ratio {cl['candidates_ratio']:.2f}")
    say(f"  claim query plan with {CLAIM_LARGE:,} pending future rows:")
    for line in cl["explain_large"].splitlines():
        say(f"    {line}")
    one = job(db, "claim-one", log="claim")
    cl["claim_one"] = one
    say(f"  claim_batch with exactly one due wake (the push path): {one['claim_ms']:.2f} ms (median of {one['reps']})")
    busy = max(CONCURRENCY - 1, 1)
    backlog = job(db, "lane-backlog", "--n", N, "--lanes", LANES, "--busy", busy, log="claim")
    cl["lane_backlog"] = backlog
    say(
        f"  candidate query over a due backlog of {N:,} wakes in {LANES} lanes, fresh statistics: "
        f"{backlog['fresh_free_ms']:.2f} ms; with {busy} lanes in hand: {backlog['fresh_busy_ms']:.2f} ms"
    )
    say(
        f"  ...the same with stale statistics (ANALYZEd while all fired): "
        f"{backlog['stale_free_ms']:.2f} ms; with {busy} lanes in hand: {backlog['stale_busy_ms']:.2f} ms"
    )
    ps = job(db, "pass-stats", "--n", RSS_N, log="claim")
    cl["pass_stats"] = ps
    say(
        f"  in-process runner pass ({ps['fresh_batch']} wakes, no lanes) over {RSS_N:,} due wakes: "
        f"{ps['fresh_pass_ms']:.1f} ms with fresh statistics, {ps['stale_pass_ms']:.1f} ms with stale ones"
    )


def _ours(vendor: str, runners: int, lanes: int, results: dict[str, Any]) -> float | None:
    for r in results.get("throughput", []):
        if r["db"] == vendor and r["runners"] == runners and r["lanes"] == lanes and r["concurrency"] == 1:
            return r["rate"]
    return None


def summary(results: dict[str, Any]) -> None:
    say()
    say("== targets ==")
    for vendor in DBS:
        ceil = max(results["ceiling"].get(vendor) or [0]) or None
        ours1 = _ours(vendor, 1, 0, results)
        best = max((r["rate"] for r in results["throughput"] if r["db"] == vendor), default=None)
        if ceil and ours1:
            frac1, fracb = ours1 / ceil, (best or 0) / ceil
            results.setdefault("fractions", {})[vendor] = {"one_runner": frac1, "best": fracb}
            ok = frac1 >= TARGETS["ceiling_fraction"] if vendor == "postgres" else None
            say(
                f"  {vendor}: fire throughput / ceiling ({ceil:,.0f}/s): 1 runner {frac1:.1%}, best config "
                f"{fracb:.1%}  [target ≥ 40 % on PostgreSQL: {verdict(ok)}]"
            )
    for vendor in DBS:
        two, two_lanes = _ours(vendor, 2, 0, results), _ours(vendor, 2, LANES, results)
        if two and two_lanes:
            ratio, wanted = two_lanes / two, TARGETS["lanes_fraction"]
            say(
                f"  {vendor}: {LANES} lanes, 2 runners / no lanes, 2 runners = {two_lanes:,.0f} / {two:,.0f} = "
                f"{ratio:.0%}  [target ≥ {wanted:.0%}: {verdict(ratio >= wanted)}]"
            )
        plain = _ours(vendor, 1, 0, results)
        concurrent = next(
            (
                r["rate"]
                for r in results.get("throughput", [])
                if r["db"] == vendor and r["runners"] == 1 and not r["lanes"] and r["concurrency"] > 1
            ),
            None,
        )
        if plain and concurrent:
            ratio = concurrent / plain
            say(
                f"  {vendor}: --concurrency {CONCURRENCY} / one plain runner (no-op, no lanes) = "
                f"{concurrent:,.0f} / {plain:,.0f} = {ratio:.2f}x  [target ≥ 1: {verdict(ratio >= 1)}]"
            )
        created = results.get("create", {}).get(vendor)
        if created:
            alone = created["schedule"]
            ok = alone >= TARGETS["schedule_alone"] if vendor == "postgres" else None
            say(
                f"  {vendor}: schedule() alone {alone:,.0f}/s  "
                f"[target ≥ {TARGETS['schedule_alone']:,}/s on PostgreSQL: {verdict(ok)}]"
            )
    peers = results.get("peers", [])
    ours = [
        r for r in results.get("throughput", []) if r["db"] == "postgres" and r["concurrency"] == 1 and not r["lanes"]
    ]
    if peers and ours:
        best_ours = max(ours, key=lambda r: r["rate"])
        best_peer = max(peers, key=lambda p: p["rate"])
        ratio = best_ours["rate"] / best_peer["rate"]
        results["peer_ratio"] = ratio
        say(
            f"  no-op throughput: django-wakes {best_ours['rate']:,.0f}/s ({best_ours['runners']} runner(s)) "
            f"/ best peer "
            f"{best_peer['peer']} {best_peer['rate']:,.0f}/s = {ratio:.2f}x  "
            f"[target ≥ {TARGETS['peer_ratio']:g}x: {verdict(ratio >= TARGETS['peer_ratio'])}]"
        )
        for p in peers:
            say(f"    vs {p['peer']}: {best_ours['rate'] / p['rate']:.2f}x")
    io = results.get("io", {})
    if "ours" in io:
        r = io["ours"]
        frac = r["rate"] / r["ideal"]
        line = (
            f"  I/O-bound: django-wakes {r['rate']:,.0f}/s = {frac:.1%} of ideal {r['ideal']:,.0f}/s "
            f"[target ≥ {TARGETS['io_fraction']:.0%}: {verdict(frac >= TARGETS['io_fraction'])}]"
        )
        if "procrastinate" in io:
            p = io["procrastinate"]
            ratio = r["rate"] / p["rate"]
            line += f"; procrastinate {p['rate']:,.0f}/s: ratio {ratio:.2f}x [ahead: {verdict(ratio > 1)}]"
        say(line)
    for lat in results.get("latency", []):
        if lat["mode"] == "push":
            line = (
                f"  push latency p50 {lat['p50_ms']:.2f} ms [target ≤ {TARGETS['push_p50_ms']}: "
                f"{verdict(lat['p50_ms'] <= TARGETS['push_p50_ms'])}], p99 {lat['p99_ms']:.2f} ms "
                f"[target ≤ {TARGETS['push_p99_ms']}: {verdict(lat['p99_ms'] <= TARGETS['push_p99_ms'])}]"
            )
            if "latency_procrastinate" in results:
                pl = results["latency_procrastinate"]
                at_most = lat["p50_ms"] <= pl["p50_ms"] and lat["p99_ms"] <= pl["p99_ms"]
                line += (
                    f"; procrastinate p50 {pl['p50_ms']:.2f} ms, p99 {pl['p99_ms']:.2f} ms "
                    f"[at or below procrastinate's: {verdict(at_most)}]"
                )
            say(line)
    if "big" in results:
        b = results["big"]
        say(
            f"  {b['terminal']:,} terminal rows + {b['due']:,} due: fresh / stale = {b['ratio']:.2f} from launch, "
            f"{b['span_ratio']:.2f} by the rows [target ≤ {TARGETS['stale_ratio']}: "
            f"{verdict(b['ratio'] <= TARGETS['stale_ratio'])}]"
        )
    for vendor, cl in results.get("claim", {}).items():
        say(f"  {vendor}: claim ratio {cl['ratio']:.2f} [target < 1.5: {verdict(cl['ratio'] < 1.5)}]")
    if "rss" in results:
        r = results["rss"]
        say(
            f"  RSS ratio {r['ratio']:.3f} ({r['db']}, {r['n']:,} vs {r['first']:,} fires) "
            f"[target < 1.1: {verdict(r['ratio'] < 1.1)}]"
        )


if __name__ == "__main__":
    sys.exit(main())
