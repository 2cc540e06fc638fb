"""Database servers a fault test owns and breaks, a TCP proxy that partitions, and a Django observer.

``tests/test_faults.py`` starts these itself; nothing here touches the shared servers the rest of the
suite runs on.

:class:`PostgresServer`
    A private PostgreSQL 15 cluster (``initdb``, ``pg_ctl``, run as the ``postgres`` user because
    the suite runs as root) on a free port of 127.0.0.1, trust authentication, ``fsync`` on.
:class:`MariaDBServer`
    A private MariaDB 10.11 instance (``mariadb-install-db``, ``mariadbd`` as a child process) on a
    free port of 127.0.0.1. The runners connect as ``wakes``, a user with every privilege on the test
    database but no global ones, so ``read_only`` really stops them (root would write through it).

Both offer the same faults: :meth:`~DatabaseServer.restart` (``"fast"``: a clean shutdown that
disconnects every client; ``"immediate"``: ``pg_ctl -m immediate`` / SIGKILL, then crash recovery),
:meth:`~DatabaseServer.outage` (stop, wait, start) and :meth:`~DatabaseServer.read_only` (writes
refused and every other client disconnected for a while). Each returns a :class:`Window` in
``time.monotonic_ns()``, the clock the probe sinks stamp their lines with.

:class:`TcpProxy`
    Forwards connections to a server (asyncio in a background thread); :meth:`~TcpProxy.pause`
    stops forwarding bytes both ways while keeping every connection open — a network partition as
    the client sees it — until :meth:`~TcpProxy.resume`.

:class:`Observer`
    A long-lived ``python -m tests.fault_servers observe`` child with Django set up against the
    private server: the test seeds wakes and reads states and attempt history through it, one JSON
    line each way. The fault tests use no pytest-django database at all; each request opens a fresh
    connection and closes it, so the observer outlives every fault it watches.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import pwd
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "wakes_faults"
PG_BIN = Path(os.environ.get("WAKES_FAULTS_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: A write that touches no row: refused by a read-only server all the same (tables exist after migrate).
WRITE_PROBE = "UPDATE django_wakes_wake SET attempts = attempts WHERE id < 0"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Window:
    """When a fault began and when the server was fully back, in ``time.monotonic_ns()``."""

    began: int
    ended: int

    @property
    def seconds(self) -> float:
        return (self.ended - self.began) / 1e9


_LIVE: list[DatabaseServer] = []


@atexit.register
def _destroy_leftovers() -> None:  # a crashed test session must not leave servers behind
    for server in list(_LIVE):
        server.destroy()


class DatabaseServer:
    """A database server this test session owns: set up, start, break, and destroy it."""

    vendor = ""
    label = ""

    def __init__(self) -> None:
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix=f"wakes-faults-{self.vendor}-"))
        _LIVE.append(self)

    @classmethod
    def missing(cls) -> str | None:
        """Why this server cannot be run on this machine (a tool or driver is missing); None if it can."""
        raise NotImplementedError

    # -- what each server implements -------------------------------------------------------------

    def setup(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, mode: str = "fast") -> None:
        raise NotImplementedError

    def running(self) -> bool:
        raise NotImplementedError

    def url(self, port: int | None = None) -> str:
        """The ``DATABASE_URL`` of the test database, through ``port`` (a proxy) if given."""
        raise NotImplementedError

    def create_database(self) -> None:
        raise NotImplementedError

    def set_read_only(self, on: bool) -> None:
        """Refuse (or again allow) writes; turning it on also disconnects every other client."""
        raise NotImplementedError

    # -- the faults ------------------------------------------------------------------------------

    def restart(self, mode: str = "fast") -> Window:
        """Stop (``fast`` or ``immediate``) and start again; return when it accepts connections."""
        began = time.monotonic_ns()
        self.stop(mode)
        self.start()
        return Window(began, time.monotonic_ns())

    def outage(self, seconds: float) -> Window:
        """Stop the server (fast), keep it down until ``seconds`` have passed, start it again."""
        began = time.monotonic_ns()
        self.stop("fast")
        time.sleep(max(0.0, seconds - (time.monotonic_ns() - began) / 1e9))
        self.start()
        return Window(began, time.monotonic_ns())

    def read_only(self, seconds: float) -> Window:
        """Refuse writes for ``seconds`` (every other client disconnected at the start), then allow them."""
        began = time.monotonic_ns()
        try:
            self.set_read_only(True)
            if not self.refuses_writes():
                raise RuntimeError(f"{self.label} still accepts the runners' writes after read_only was set")
            time.sleep(max(0.0, seconds - (time.monotonic_ns() - began) / 1e9))
        finally:
            self.set_read_only(False)
        return Window(began, time.monotonic_ns())

    def refuses_writes(self) -> bool:
        """Whether an UPDATE by the runners' user, over TCP as they connect, is refused right now."""
        raise NotImplementedError

    def heal(self) -> None:
        """Bring a server a failed test left broken back: running, writable."""
        if not self.running():
            self.start()
        self.set_read_only(False)

    def destroy(self) -> None:
        """Stop at once (nothing here is worth a clean shutdown) and delete every file."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.home, ignore_errors=True)
            if self in _LIVE:
                _LIVE.remove(self)

    def log_tail(self, chars: int = 3000) -> str:
        raise NotImplementedError


def _wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------------------------------


class PostgresServer(DatabaseServer):
    """A private PostgreSQL 15 cluster, run as the ``postgres`` user, trust auth on 127.0.0.1."""

    vendor = "postgresql"
    label = "PostgreSQL 15"

    def __init__(self) -> None:
        super().__init__()
        self.data = self.home / "data"
        self.logfile = self.home / "server.log"
        user = pwd.getpwnam("postgres")
        os.chown(self.home, user.pw_uid, user.pw_gid)

    @classmethod
    def missing(cls) -> str | None:
        for tool in ("initdb", "pg_ctl"):
            if not (PG_BIN / tool).exists():
                return f"{PG_BIN / tool} not found (Debian: apt-get install postgresql-15)"
        if shutil.which("runuser") is None:
            return "runuser not found (util-linux)"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no 'postgres' user to run the cluster as"
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg is not installed (pip install -e '.[postgres]')"
        return None

    def _as_postgres(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", *args],
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0 and args[-1] != "status":
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def setup(self) -> None:
        self._as_postgres(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
        )
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(
                f"\n# wakes fault suite\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.home}'\nfsync = on\nmax_connections = 100\n"
            )

    def start(self) -> None:
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "90", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        assert mode in ("fast", "immediate", "smart"), mode
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "90", "stop")

    def running(self) -> bool:
        return self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "status").returncode == 0

    def admin(self, dbname: str = "postgres") -> Any:
        import psycopg

        conn = psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True)
        # A session-level setting outranks the server-wide default a read-only period sets.
        conn.execute("SET default_transaction_read_only = off")
        return conn

    def url(self, port: int | None = None) -> str:
        return f"postgres://postgres@127.0.0.1:{port or self.port}/{DB_NAME}"

    def create_database(self) -> None:
        with self.admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
            conn.execute(f"CREATE DATABASE {DB_NAME}")

    def set_read_only(self, on: bool) -> None:
        with self.admin() as conn:
            if on:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")
            if on:  # sessions that began before the reload keep their (writable) snapshot of it: end them
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                )

    def refuses_writes(self) -> bool:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=DB_NAME, autocommit=True
        ) as conn:
            try:
                conn.execute(WRITE_PROBE)
            except psycopg.errors.ReadOnlySqlTransaction:
                return True
        return False

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.logfile.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""


# --------------------------------------------------------------------------------------------------
# MariaDB
# --------------------------------------------------------------------------------------------------


class MariaDBServer(DatabaseServer):
    """A private MariaDB 10.11 instance, a child ``mariadbd`` on 127.0.0.1 and a socket in its home."""

    vendor = "mysql"
    label = "MariaDB 10.11"
    USER = "wakes"

    def __init__(self) -> None:
        super().__init__()
        self.data = self.home / "data"
        self.socket = self.home / "mysqld.sock"
        self.logfile = self.home / "server.log"
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def _tool(name: str) -> str | None:
        return shutil.which(name) or next(
            (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
        )

    @classmethod
    def missing(cls) -> str | None:
        for tool in ("mariadb-install-db", "mariadbd"):
            if cls._tool(tool) is None:
                return f"{tool} not found (Debian: apt-get install mariadb-server)"
        try:
            import MySQLdb  # noqa: F401
        except ImportError:
            return "mysqlclient is not installed (pip install -e '.[mysql]')"
        return None

    def setup(self) -> None:
        done = subprocess.run(
            [
                str(self._tool("mariadb-install-db")),
                "--no-defaults",
                f"--datadir={self.data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"mariadb-install-db exited {done.returncode}:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        with self.logfile.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self._tool("mariadbd")),
                    "--no-defaults",
                    f"--datadir={self.data}",
                    f"--socket={self.socket}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    "--user=root",
                    f"--pid-file={self.home / 'mysqld.pid'}",
                    "--skip-name-resolve",
                    "--innodb-buffer-pool-size=64M",
                    "--innodb-flush-log-at-trx-commit=1",
                    "--max-connections=200",
                ],
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches pytest, which stops it in order
            )

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.admin().close()
            except Exception:  # noqa: BLE001 - not accepting connections yet
                return False
            return True

        _wait_until(up, timeout=120, what="mariadbd to accept connections")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: SIGTERM, a clean shutdown; ``immediate``: SIGKILL, InnoDB recovers on the next start."""
        assert mode in ("fast", "immediate"), mode
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM if mode == "fast" else signal.SIGKILL)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def admin(self) -> Any:
        import MySQLdb

        conn = MySQLdb.connect(unix_socket=str(self.socket), user="root", connect_timeout=5)
        conn.autocommit(True)
        return conn

    def _execute(self, *statements: str) -> list[tuple]:
        conn = self.admin()
        try:
            rows: list[tuple] = []
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
                    rows = list(cursor.fetchall() or [])
            return rows
        finally:
            conn.close()

    def url(self, port: int | None = None) -> str:
        return f"mysql://{self.USER}@127.0.0.1:{port or self.port}/{DB_NAME}"

    def create_database(self) -> None:
        self._execute(
            f"DROP DATABASE IF EXISTS {DB_NAME}",
            f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
            f"CREATE USER IF NOT EXISTS '{self.USER}'@'%'",
            # Every privilege on the test database and none global: READ ONLY ADMIN (or SUPER) would
            # let the runners write straight through read_only.
            f"GRANT ALL PRIVILEGES ON {DB_NAME}.* TO '{self.USER}'@'%'",
        )

    def set_read_only(self, on: bool) -> None:
        if not on:
            self._execute("SET GLOBAL read_only = 0")
            return
        import MySQLdb

        conn = self.admin()
        try:
            with conn.cursor() as cursor:
                # read_only = 1 takes the global read lock, which waits for open transactions; a client
                # whose next write queues behind that pending lock would stall both for as long as
                # lock_wait_timeout allows. So: disconnect everyone, then try briefly; again if need be.
                cursor.execute("SET SESSION lock_wait_timeout = 2")
                for attempt in range(1, 11):
                    self._disconnect_others(cursor)
                    try:
                        cursor.execute("SET GLOBAL read_only = 1")
                        break
                    except MySQLdb.OperationalError as exc:
                        if exc.args[0] != 1205 or attempt == 10:  # ER_LOCK_WAIT_TIMEOUT
                            raise
                self._disconnect_others(cursor)
        finally:
            conn.close()

    @staticmethod
    def _disconnect_others(cursor: Any) -> None:
        cursor.execute(
            "SELECT id FROM information_schema.processlist "
            "WHERE id <> CONNECTION_ID() AND user NOT IN ('system user', 'event_scheduler', '')"
        )
        for (thread_id,) in cursor.fetchall():
            with suppress(Exception):  # it may have hung up by itself meanwhile
                cursor.execute(f"KILL CONNECTION {int(thread_id)}")

    def refuses_writes(self) -> bool:
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", port=self.port, user=self.USER, database=DB_NAME)
        try:
            with conn.cursor() as cursor:
                cursor.execute(WRITE_PROBE)
        except MySQLdb.OperationalError as exc:
            return exc.args[0] == 1290  # ER_OPTION_PREVENTS_STATEMENT: running with --read-only
        finally:
            conn.rollback()
            conn.close()
        return False

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.logfile.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""


SERVERS: dict[str, type[DatabaseServer]] = {"postgres": PostgresServer, "mariadb": MariaDBServer}


# --------------------------------------------------------------------------------------------------
# The partitioning proxy
# --------------------------------------------------------------------------------------------------


class TcpProxy:
    """A TCP forwarder on a free port of 127.0.0.1 whose traffic can be frozen and thawed, or cut.

    :meth:`pause` is a partition: connections stay open (no FIN, no RST), but no byte moves in
    either direction, and new connections are accepted but not connected through, until
    :meth:`resume`. What a client sent meanwhile arrives afterwards, as over a healed network.
    :meth:`cut` is a server going away: every connection is reset, and new ones are reset as soon
    as they are accepted, until :meth:`heal`.
    """

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.connections = 0
        self._refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._flowing: asyncio.Event | None = None
        self._done: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{self.port}", daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def _call(self, fn: Callable[[], None]) -> None:
        async def apply() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(timeout=10)

    def pause(self) -> None:
        """Stop forwarding, both ways, on every connection (and hold new ones) until :meth:`resume`."""
        self._call(lambda: self._flowing.clear())  # type: ignore[union-attr]

    def resume(self) -> None:
        self._call(lambda: self._flowing.set())  # type: ignore[union-attr]

    def cut(self) -> None:
        """Close every connection now and refuse new ones (accepted, then closed at once) until :meth:`heal`.

        What a client sees when its server goes away: the connection it had breaks, and so does each
        new one, as during a restart or a failover.
        """

        def apply() -> None:
            self._refusing = True
            for writer in list(self._writers):
                writer.transport.abort()  # an RST: no goodbye, as when a server dies

        self._call(apply)

    def heal(self) -> None:
        """Accept and connect through new connections again (after :meth:`cut`)."""

        def apply() -> None:
            self._refusing = False

        self._call(apply)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(lambda: (self._flowing.set(), self._done.set()))  # type: ignore[union-attr,func-returns-value]
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._flowing, self._done = asyncio.Event(), asyncio.Event()
        self._flowing.set()
        tasks: set[asyncio.Task] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await self._connect_through(reader, writer)
            except asyncio.CancelledError:
                pass  # stop() ends the connections still open; asyncio would log a cancelled handler
            finally:
                tasks.discard(task)

        server = await asyncio.start_server(handle, "127.0.0.1", self.port)
        self._ready.set()
        await self._done.wait()
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connect_through(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        await self._flowing.wait()
        if self._refusing:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self.connections += 1
        self._writers.update((client_writer, upstream_writer))
        try:
            await asyncio.gather(
                self._pump(client_reader, upstream_writer),
                self._pump(upstream_reader, client_writer),
                return_exceptions=True,
            )
        finally:
            self._writers.difference_update((client_writer, upstream_writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()  # a partition: hold what was read until it heals
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


# --------------------------------------------------------------------------------------------------
# The observer: Django against the private server, in a child process
# --------------------------------------------------------------------------------------------------


class ObserverError(RuntimeError):
    """The observer's request failed in the database (the server is down, read-only, ...)."""


class Observer:
    """Parent side of ``python -m tests.fault_servers observe``: one request, one JSON answer."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.fault_servers", "observe"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="fault-observer-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._answers.put(line)
        self._answers.put(None)

    def call(self, action: str, *, timeout: float = 120, **args: Any) -> Any:
        """Run ``action`` in the observer; raise :class:`ObserverError` if the database refused it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"action": action, "args": args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"observer gave no answer to {action} in {timeout:.0f}s") from None
        if line is None:
            log = self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise RuntimeError(f"observer exited {self.proc.wait()}:\n{log}")
        answer = json.loads(line)
        if "error" in answer:
            raise ObserverError(f"{action}: {answer['error']}: {answer['message']}")
        return answer["ok"]

    def poll(self, action: str, **args: Any) -> Any:
        """Like :meth:`call`, but None while the database is unavailable."""
        try:
            return self.call(action, **args)
        except ObserverError:
            return None

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# Child side ----------------------------------------------------------------------------------------


def _reset(args: dict[str, Any]) -> int:
    """Delete every wake, attempt and runner row: each test starts from empty tables."""
    from django.db import transaction

    from django_wakes.models import Runner, Wake, WakeAttempt

    with transaction.atomic():
        return sum(model.objects.all().delete()[0] for model in (WakeAttempt, Wake, Runner))


def _seed(args: dict[str, Any]) -> list[int]:
    """Schedule ``args["wakes"]`` (kind, lane, in_ms, intent, max_attempts) in one transaction; return ids."""
    from datetime import timedelta

    from django.db import transaction

    from django_wakes import clock, schedule

    now = clock.now()
    with transaction.atomic():
        return [
            schedule(
                workspace_id=args["workspace"],
                kind=spec["kind"],
                at=now + timedelta(milliseconds=spec.get("in_ms", 0)),
                serial_key=spec.get("lane"),
                intent=spec.get("intent"),
                max_attempts=spec.get("max_attempts"),
            ).pk
            for spec in args["wakes"]
        ]


def _states(args: dict[str, Any]) -> dict[str, int]:
    """How many wakes of the workspace are in each state."""
    from django.db.models import Count

    from django_wakes.models import Wake

    rows = Wake.objects.filter(workspace_id=args["workspace"]).values("state").annotate(n=Count("id"))
    return {row["state"]: row["n"] for row in rows}


def _runners(args: dict[str, Any]) -> list[int]:
    """The pids of the registered runners."""
    from django_wakes.models import Runner

    return sorted(Runner.objects.values_list("pid", flat=True))


def _snapshot(args: dict[str, Any]) -> dict[str, Any]:
    """Every wake of the workspace, every attempt row, and what is stranded in the whole table."""
    from django_wakes import clock
    from django_wakes.models import Wake, WakeAttempt

    def epoch(moment: Any) -> float | None:
        return moment.timestamp() if moment is not None else None

    now = clock.now()
    wakes = Wake.objects.filter(workspace_id=args["workspace"])
    return {
        "wakes": {
            str(pk): {
                "state": state,
                "attempts": attempts,
                "lane": lane,
                "kind": kind,
                "fire_at": epoch(fire_at),
                "error": error[-300:],
            }
            for pk, state, attempts, lane, kind, fire_at, error in wakes.values_list(
                "pk", "state", "attempts", "serial_key", "kind", "fire_at", "last_error"
            )
        },
        "attempts": [
            {
                "wake": wake_id,
                "number": number,
                "outcome": outcome,
                "pid": int(runner_id.split(":")[1]) if runner_id.count(":") >= 2 else None,
                "started": epoch(started),
                "finished": epoch(finished),
            }
            for wake_id, number, outcome, runner_id, started, finished in WakeAttempt.objects.filter(
                wake__workspace_id=args["workspace"]
            )
            .order_by("wake_id", "number", "id")
            .values_list("wake_id", "number", "outcome", "runner_id", "started_at", "finished_at")
        ],
        "stranded": {
            "lapsed_firing": Wake.objects.lapsed(now).count(),
            "due_pending": Wake.objects.due(now).count(),
        },
    }


def _keys(args: dict[str, Any]) -> dict[str, list[Any]]:
    """``idempotency_key -> [id, state, attempts]`` of every wake of the workspace that has a key."""
    from django_wakes.models import Wake

    rows = Wake.objects.filter(workspace_id=args["workspace"], idempotency_key__isnull=False)
    return {
        key: [pk, state, attempts]
        for key, pk, state, attempts in rows.values_list("idempotency_key", "pk", "state", "attempts")
    }


def _receipts(args: dict[str, Any]) -> dict[str, int]:
    """How many ``once()`` receipts whose session starts with ``args["prefix"]`` are in each state."""
    from django.db.models import Count

    from django_wakes.models import Receipt

    rows = Receipt.objects.filter(session_id__startswith=args["prefix"]).values("state").annotate(n=Count("id"))
    return {row["state"]: row["n"] for row in rows}


ACTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "ping": lambda args: True,
    "keys": _keys,
    "receipts": _receipts,
    "reset": _reset,
    "seed": _seed,
    "states": _states,
    "runners": _runners,
    "snapshot": _snapshot,
}


def observe() -> None:
    """Answer one JSON request per stdin line with one JSON line on stdout, until stdin closes."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    from django.db import connections

    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = {"ok": ACTIONS[request["action"]](request.get("args", {}))}
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which judges it
            answer = {"error": type(exc).__name__, "message": str(exc)[:500]}
        finally:
            connections.close_all()  # a fresh connection per request survives every restart
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] != ["observe"]:
        raise SystemExit("usage: python -m tests.fault_servers observe")
    observe()
