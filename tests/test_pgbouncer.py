"""Runners behind a real PgBouncer in transaction pooling, LISTENing on a direct connection.

The suite starts its own PgBouncer (Debian's ``pgbouncer``, installed by ``scripts/install-pgbouncer``)
on a free port in front of the test database's PostgreSQL, with a private configuration in a temporary
directory: ``pool_mode = transaction``, ``auth_type = trust`` and fewer server connections than the
runners open client connections, so the runners' transactions really share server connections. The
``runwakes`` processes get ``DATABASE_URL`` pointing at PgBouncer and ``WAKES_PUSH_DATABASE_URL``
pointing straight at PostgreSQL (``testproject/settings.py`` turns that into a second alias ``push``,
``WAKES["PUSH_DATABASE"] = "push"``, and server-side cursors off on ``default``), the set-up
``docs/operations.md`` recommends.

What it shows: claims, lane locks, heartbeats and batched settles all work through the pooler (about
200 wakes in 20 lanes fire exactly once, no lane overlaps), the runners' LISTEN sessions are direct
connections, not PgBouncer's, and a due-now wake created while the runners sleep on a 10 s polling
interval is fired by the push hint in well under that interval — whether its NOTIFY was sent directly
or through PgBouncer. The control: a runner without ``PUSH_DATABASE`` LISTENs through PgBouncer
without an error and never hears a hint; only its polling backstop fires the wake. Figures are
printed with ``pytest -s``.

A machine without PgBouncer (and no way to install it) skips with the reason; under ``CI=true`` that
fails instead.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import pytest
from django.db import connection

from django_wakes import schedule
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.models import Runner as RunnerRow
from tests.processes import ROOT, Procs, database_url, wait_for

pytestmark = [pytest.mark.pgbouncer, pytest.mark.multiprocess, pytest.mark.django_db(transaction=True)]

WS = "ws-pgbouncer"
KIND = "probe.record"
WAKES = 200
LANES = 20
#: Server connections PgBouncer may open to the test database: fewer than the runners' client connections.
POOL_SIZE = 2  # fewer than the runners hold: two main loops, their heartbeats, a settler
#: The runners' polling backstop: a wake fired much sooner than this was fired by a push hint.
INTERVAL = 10.0


def unavailable(reason: str) -> None:
    """Skip for want of PgBouncer, or fail under ``CI=true``, where the test is required."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (the PgBouncer test is required under CI=true; scripts/install-pgbouncer installs it)")
    pytest.skip(reason)


def pgbouncer_binary() -> str | None:
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None)
    if found is None:
        subprocess.run([str(ROOT / "scripts" / "install-pgbouncer")], check=False, timeout=600)
        found = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Bouncer:
    """A private PgBouncer: where it listens, its admin console, its log."""

    port: int
    proc: subprocess.Popen
    workdir: Path

    def url(self, settings_dict: dict[str, Any]) -> str:
        url = database_url({**settings_dict, "HOST": "127.0.0.1", "PORT": str(self.port)})
        assert url is not None
        return url

    def log(self) -> str:
        return (self.workdir / "pgbouncer.log").read_text(encoding="utf-8", errors="replace")

    def admin(self, command: str) -> list[dict[str, Any]]:
        """Run ``SHOW ...`` on PgBouncer's admin console (simple query protocol: a client-side cursor)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            dbname="pgbouncer",
            user="postgres",
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
        ) as conn:
            cursor = conn.execute(command)
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.fixture(scope="module")
def bouncer() -> Iterator[Bouncer]:
    """Start PgBouncer in transaction pooling in front of the test database's server; stop it after."""
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections: run this on the postgres pass")
    binary = pgbouncer_binary()
    if binary is None:
        unavailable("pgbouncer is not installed and scripts/install-pgbouncer could not install it")
    settings_dict = connection.settings_dict
    user = settings_dict.get("USER") or "postgres"
    server = f"host={settings_dict.get('HOST') or '127.0.0.1'} port={settings_dict.get('PORT') or 5432}"
    if settings_dict.get("PASSWORD"):
        server += f" password={settings_dict['PASSWORD']}"
    workdir = Path(tempfile.mkdtemp(prefix="wakes-pgbouncer-"))
    port = free_port()
    (workdir / "users.txt").write_text(f'"{user}" ""\n', encoding="utf-8")
    (workdir / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = {server}",  # any database name, passed through: the test database included
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {workdir / 'users.txt'}",
                f"admin_users = {user}",
                "pool_mode = transaction",
                f"default_pool_size = {POOL_SIZE}",
                "max_client_conn = 100",
                "ignore_startup_parameters = extra_float_digits",
                f"logfile = {workdir / 'pgbouncer.log'}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        account = next(
            (entry for name in ("postgres", "nobody") for entry in pwd.getpwall() if entry.pw_name == name), None
        )
        if account is None:
            unavailable("running as root and there is neither a 'postgres' nor a 'nobody' account to run pgbouncer")
        for path in [workdir, *workdir.iterdir()]:
            os.chown(path, account.pw_uid, account.pw_gid)
        run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    with (workdir / "stdout.log").open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own config, a binary found on PATH
            [binary, str(workdir / "pgbouncer.ini")], stdout=out, stderr=subprocess.STDOUT, **run_as
        )
    running = Bouncer(port, proc, workdir)

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited with {proc.returncode}:\n{running.log()}")
        try:
            running.admin("SHOW VERSION")
        except Exception:  # noqa: BLE001 - not listening yet
            return False
        return True

    try:
        wait_for(answers, timeout=15, what="pgbouncer to accept connections")
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # immediate shutdown: its server connections close
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def listening_backends() -> set[int]:
    """PIDs of the test database's backends whose last statement was the runners' LISTEN."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %%'")
        return {row[0] for row in cursor.fetchall()}


def fired(*ids: int) -> bool:
    return Wake.objects.filter(pk__in=ids, state=State.FIRED).count() == len(ids)


def push_latency_ms(wake_id: int) -> float:
    wake = Wake.objects.get(pk=wake_id)
    attempt = WakeAttempt.objects.get(wake_id=wake_id)
    return (attempt.started_at - wake.created_at).total_seconds() * 1000


def test_runners_behind_pgbouncer_fire_every_wake_once_and_hear_push_on_a_direct_connection(
    procs: Procs, bouncer: Bouncer
):
    direct = procs.db_url
    pooled = bouncer.url(connection.settings_dict)
    behind_bouncer = {"DATABASE_URL": pooled, "WAKES_PUSH_DATABASE_URL": direct, "WAKES_LEASE": "15s"}
    runners = [
        procs.runner("runner-a", "--interval", str(INTERVAL), **behind_bouncer),
        procs.runner("runner-b", "--interval", str(INTERVAL), "--concurrency", "2", **behind_bouncer),
    ]
    wait_for(
        lambda: RunnerRow.objects.count() == len(runners) or procs.alive(*runners),
        timeout=30,
        what="both runners to register through PgBouncer",
    )
    wait_for(
        lambda: len(listening_backends()) == len(runners) or procs.alive(*runners),
        timeout=30,
        what="both runners' LISTEN connections",
    )
    pooled_backends = {row["remote_pid"] for row in bouncer.admin("SHOW SERVERS")}
    assert not listening_backends() & pooled_backends, "LISTEN must be on the direct PUSH_DATABASE connection"

    # 1. A burst of due-now wakes in LANES lanes, claimed and settled through pooled connections.
    started = time.monotonic()
    ids = [
        schedule(workspace_id=WS, kind=KIND, delay="0s", serial_key=f"lane-{n % LANES}" if n % 4 else None).pk
        for n in range(WAKES)
    ]
    # The pooling is sampled during the burst: how many client connections the runners held at
    # most, and on how many server connections (a connection a runner thread opens and closes
    # between two samples may be missed, never invented).
    clients = servers = 0

    def burst_done() -> bool:
        nonlocal clients, servers
        pools = [row for row in bouncer.admin("SHOW POOLS") if row["database"] == connection.settings_dict["NAME"]]
        clients = max(clients, sum(row["cl_active"] + row["cl_waiting"] for row in pools))
        servers = max(
            servers,
            sum(
                sum(row.get(k, 0) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
                for row in pools
            ),
        )
        return fired(*ids) or procs.alive(*runners)

    wait_for(burst_done, timeout=40, what=f"{WAKES} wakes to fire through PgBouncer", interval=0.02)
    burst_s = time.monotonic() - started

    records = [r for r in procs.records(KIND) if r["id"] in set(ids)]
    runs = Counter(r["id"] for r in records)
    assert sorted(runs) == sorted(ids), "every wake fired"
    assert max(runs.values()) == 1, f"fired more than once: {[i for i, n in runs.items() if n > 1]}"
    attempts = Counter(WakeAttempt.objects.filter(wake_id__in=ids).values_list("outcome", flat=True))
    assert attempts == {Outcome.FIRED: WAKES}, attempts
    by_lane: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        if r["serial_key"] is not None:
            by_lane[r["serial_key"]].append((r["start"], r["end"]))
    for lane, spans in by_lane.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), f"lane {lane} overlapped"
    assert len({r["pid"] for r in records}) == len(runners), "both runners took part"
    assert 0 < servers <= POOL_SIZE < clients, f"{clients} client connections on {servers} server connections"

    # 2. Push: the runners sleep on a 10 s backstop; a due-now wake must wake them at once.
    time.sleep(1.0)  # let the last passes finish and the runners go to sleep
    direct_ms = []
    for _ in range(5):
        wake = schedule(workspace_id=WS, kind=KIND, delay="0s")  # committed and NOTIFYed on a direct connection
        wait_for(lambda w=wake: fired(w.pk) or procs.alive(*runners), timeout=INTERVAL * 2, what="a pushed wake")
        direct_ms.append(push_latency_ms(wake.pk))
        time.sleep(0.3)
    created = procs.manage(
        "shell",
        "-c",
        f"from django_wakes import schedule; print(schedule(workspace_id={WS!r}, kind={KIND!r}, delay='0s').pk)",
        DATABASE_URL=pooled,  # this NOTIFY goes through PgBouncer
    )
    assert created.returncode == 0, created.stderr
    pooled_id = int(created.stdout.strip().splitlines()[-1])
    wait_for(
        lambda: fired(pooled_id) or procs.alive(*runners), timeout=INTERVAL * 2, what="a wake created via PgBouncer"
    )
    pooled_ms = push_latency_ms(pooled_id)

    print(
        f"\nPgBouncer (transaction pooling, {servers} server / {clients} client connections): "
        f"{WAKES} wakes in {LANES} lanes fired once each in {burst_s:.2f} s by {len(runners)} runners"
        f"\npush through the direct PUSH_DATABASE alias, --interval {INTERVAL:.0f}: created-to-started ms "
        f"{', '.join(f'{ms:.0f}' for ms in direct_ms)} (NOTIFY sent directly), {pooled_ms:.0f} (NOTIFY via PgBouncer)"
    )
    assert max(direct_ms) < 3000, f"push did not wake the runners: {direct_ms} ms (the backstop is {INTERVAL} s)"
    assert median(direct_ms) < 1000, direct_ms
    assert pooled_ms < 3000, f"a NOTIFY sent through PgBouncer did not wake the runners: {pooled_ms:.0f} ms"

    for runner in runners:
        assert procs.stop(runner) == 0
        log = procs.log(runner)
        assert "Traceback" not in log, log[-4000:]
        assert "database unavailable" not in log, log[-4000:]


def test_without_push_database_listen_through_pgbouncer_hears_nothing_and_polling_covers(
    procs: Procs, bouncer: Bouncer
):
    """The control: LISTEN through transaction pooling silently hears nothing; the backstop fires the wake."""
    runner = procs.runner(
        "runner", "--interval", str(INTERVAL), DATABASE_URL=bouncer.url(connection.settings_dict), WAKES_LEASE="15s"
    )
    canary = schedule(workspace_id=WS, kind=KIND, delay="0s")
    wait_for(lambda: fired(canary.pk) or procs.alive(runner), timeout=30, what="the runner to fire a canary wake")
    time.sleep(0.5)  # the runner has fired the canary and sleeps INTERVAL seconds unless a hint wakes it
    wake = schedule(workspace_id=WS, kind=KIND, delay="0s")
    wait_for(lambda: fired(wake.pk) or procs.alive(runner), timeout=INTERVAL * 2, what="the polling backstop")
    latency = push_latency_ms(wake.pk)
    print(
        f"\nno PUSH_DATABASE, LISTEN through PgBouncer, --interval {INTERVAL:.0f}: created-to-started {latency:.0f} ms"
    )
    assert latency > INTERVAL * 1000 / 2, (
        f"a NOTIFY reached a LISTEN made through PgBouncer's transaction pooling ({latency:.0f} ms): "
        "docs/operations.md says it cannot; revisit the PgBouncer section"
    )
    assert procs.stop(runner) == 0
    assert "database unavailable" not in procs.log(runner), "silently: nothing is logged"
