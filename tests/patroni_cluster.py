"""A real PostgreSQL HA cluster the HA tests own: one etcd, Patroni, two PostgreSQL 15 nodes.

``tests/test_ha.py`` starts it itself, breaks it (``patronictl switchover``; the leader's Patroni and
postmaster SIGKILLed, kept down, restarted to rejoin with ``pg_rewind``) and deletes it at the end,
like the fault suite's private servers (``tests/fault_servers.py``). Nothing here touches the shared
servers the rest of the suite runs on.

- etcd (Debian ``etcd-server``) on two free ports of 127.0.0.1, its data in the cluster's directory.
- Patroni (Debian ``patroni``, 3.0) per node, run as the ``postgres`` user (PostgreSQL refuses to run
  as root; the suite runs as root), with its REST API and PostgreSQL on free ports of 127.0.0.1,
  ``trust`` authentication, ``use_pg_rewind``, and ``synchronous_mode`` on or off.
- Clients reach it the way an application does without extra components: libpq multi-host,
  ``HOST "127.0.0.1,127.0.0.1"``, ``PORT "p1,p2"``, ``target_session_attrs=read-write``
  (:meth:`PatroniCluster.url`), so a new connection lands on whichever node is the primary.

The timings are Patroni's: ``ttl`` (how long the leader key outlives a silent leader: what bounds a
failover), ``loop_wait`` (how often each Patroni runs its loop) and ``retry_timeout`` (how long DCS and
PostgreSQL operations are retried before a leader demotes itself). Patroni wants
``loop_wait + 2 * retry_timeout <= ttl``.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fault_servers import PG_BIN, Window, free_port

SCOPE = "wakes-ha"
PATRONI = os.environ.get("WAKES_HA_PATRONI", "/usr/bin/patroni")
PATRONICTL = os.environ.get("WAKES_HA_PATRONICTL", "/usr/bin/patronictl")
ETCD = os.environ.get("WAKES_HA_ETCD", "/usr/bin/etcd")

_LIVE: list[PatroniCluster] = []


def _wait_until(predicate: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _get_json(url: str, timeout: float = 2.0) -> Any:
    """GET a Patroni REST endpoint; its JSON whatever the status (Patroni answers 503 with a body too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - 127.0.0.1 only
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"null")


@dataclass
class Node:
    """One Patroni-managed PostgreSQL: its ports, its directory, its Patroni process."""

    name: str
    home: Path
    pg_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    @property
    def log(self) -> Path:
        return self.home / "patroni.log"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def status(self) -> dict[str, Any] | None:
        """Patroni's own view of this node (``GET /patroni``), None while its REST API does not answer."""
        try:
            answer = _get_json(f"{self.api}/patroni")
        except (OSError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""


class PatroniCluster:
    """etcd + Patroni + two PostgreSQL 15 nodes on 127.0.0.1, set up, broken and destroyed by a test."""

    def __init__(
        self,
        *,
        synchronous: bool = True,
        nodes: int = 2,
        ttl: int = 10,
        loop_wait: int = 1,
        retry_timeout: int = 4,
    ) -> None:
        self.synchronous = synchronous
        self.ttl, self.loop_wait, self.retry_timeout = ttl, loop_wait, retry_timeout
        self.home = Path(tempfile.mkdtemp(prefix="wakes-ha-"))
        postgres = pwd.getpwnam("postgres")
        self._uid, self._gid = postgres.pw_uid, postgres.pw_gid
        os.chown(self.home, self._uid, self._gid)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen | None = None
        self.nodes = [Node(f"node{n + 1}", self.home / f"node{n + 1}") for n in range(nodes)]
        _LIVE.append(self)

    @classmethod
    def missing(cls) -> str | None:
        """Why the cluster cannot run on this machine (a tool, a user or a driver is missing); None if it can."""
        for tool, package in ((PATRONI, "patroni"), (PATRONICTL, "patroni"), (ETCD, "etcd-server")):
            if not Path(tool).exists():
                return f"{tool} not found (Debian: apt-get install {package}; scripts/install-patroni)"
        for tool in ("initdb", "pg_ctl", "pg_rewind"):
            if not (PG_BIN / tool).exists():
                return f"{PG_BIN / tool} not found (Debian: apt-get install postgresql-15)"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no 'postgres' user to run PostgreSQL as"
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return "psycopg is not installed (pip install -e '.[postgres]')"
        return None

    # -- addresses --------------------------------------------------------------------------------

    @property
    def hosts(self) -> str:
        return ",".join("127.0.0.1" for _ in self.nodes)

    @property
    def ports(self) -> str:
        return ",".join(str(node.pg_port) for node in self.nodes)

    def url(self, dbname: str, **options: str) -> str:
        """A multi-host ``DATABASE_URL``: every node, and only a read-write one is connected to."""
        query = "&".join(f"{k}={v}" for k, v in {"target_session_attrs": "read-write", **options}.items())
        netloc = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        return f"postgres://postgres@{netloc}/{dbname}?{query}"

    def node_url(self, node: Node, dbname: str) -> str:
        """A ``DATABASE_URL`` of one node only (a standby to read from, say)."""
        return f"postgres://postgres@127.0.0.1:{node.pg_port}/{dbname}"

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start etcd, then the first node (which bootstraps and leads), then the others as its standbys."""
        self._start_etcd()
        for node in self.nodes:
            node.home.mkdir()
            os.chown(node.home, self._uid, self._gid)
            node.config.write_text(self._config(node))
        first, *others = self.nodes
        self.start_node(first)
        _wait_until(lambda: self.leader() is first, timeout=120, what=f"{first.name} to bootstrap and lead")
        for node in others:
            self.start_node(node)
        self.wait_healthy(timeout=180)

    def _start_etcd(self) -> None:
        log = (self.home / "etcd.log").open("ab")
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = subprocess.Popen(
            [
                ETCD,
                "--name",
                "wakes-ha-etcd",
                "--data-dir",
                str(self.home / "etcd"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"wakes-ha-etcd={peer}",
                "--initial-cluster-state",
                "new",
            ],
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

        def healthy() -> bool:
            if self.etcd is not None and self.etcd.poll() is not None:
                raise RuntimeError(f"etcd exited {self.etcd.returncode}:\n{self._tail(self.home / 'etcd.log')}")
            try:
                return bool(_get_json(f"{client}/health").get("health") == "true")
            except (OSError, ValueError, AttributeError):
                return False

        _wait_until(healthy, timeout=60, what="etcd to be healthy")

    def _config(self, node: Node) -> str:
        """The node's Patroni configuration (YAML is a superset of JSON: written as JSON)."""
        config = {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": self.ttl,
                    "loop_wait": self.loop_wait,
                    "retry_timeout": self.retry_timeout,
                    "maximum_lag_on_failover": 1024 * 1024 * 1024,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "max_connections": 200,
                            "wal_keep_size": "256MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
                "parameters": {"unix_socket_directories": str(node.home), "fsync": "on"},
            },
        }
        return json.dumps(config, indent=2)

    def start_node(self, node: Node) -> None:
        """Start the node's Patroni (as ``postgres``); it starts, bootstraps, follows or rewinds its PostgreSQL."""
        log = node.log.open("ab")
        node.proc = subprocess.Popen(
            [PATRONI, str(node.config)],
            cwd=node.home,
            user=self._uid,
            group=self._gid,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.home), "LANG": "C.UTF-8"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def members(self) -> list[dict[str, Any]]:
        """The cluster as Patroni's REST API tells it (``GET /cluster`` of the first node that answers)."""
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                continue
            with suppress(OSError, ValueError):
                answer = _get_json(f"{node.api}/cluster")
                if isinstance(answer, dict):
                    return list(answer.get("members", []))
        return []

    def leader(self) -> Node | None:
        """The node that leads and runs as a primary, if one does right now."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return next((n for n in self.nodes if n.name == member["name"]), None)
        return None

    def healthy(self) -> bool:
        """A leader, and every other node streaming from it (as its synchronous standby in synchronous mode)."""
        members = {m["name"]: m for m in self.members()}
        if len(members) != len(self.nodes):
            return False
        leaders = [m for m in members.values() if m.get("role") == "leader" and m.get("state") == "running"]
        wanted = "sync_standby" if self.synchronous else "replica"
        followers = [
            m for m in members.values() if m.get("role") == wanted and m.get("state") in ("streaming", "running")
        ]
        return (
            len(leaders) == 1
            and len(followers) == len(self.nodes) - 1
            and all(
                m.get("lag", 0) in (0, "0") or isinstance(m.get("lag"), int) and m["lag"] < 1024 * 1024
                for m in followers
            )
        )

    def wait_healthy(self, *, timeout: float = 120) -> None:
        try:
            _wait_until(self.healthy, timeout=timeout, what="the cluster to be healthy", interval=0.25)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {self.members()}\n{self.logs()}") from None

    def standby(self) -> Node:
        leader = self.leader()
        return next(node for node in self.nodes if node is not leader)

    # -- faults -----------------------------------------------------------------------------------

    def _patronictl(self, node: Node, *args: str) -> str:
        done = subprocess.run(
            [PATRONICTL, "-c", str(node.config), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            user=self._uid,
            group=self._gid,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.home), "LANG": "C.UTF-8"},
        )
        if done.returncode != 0:
            raise RuntimeError(f"patronictl {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def set_synchronous(self, on: bool) -> None:
        """Turn ``synchronous_mode`` on or off (``patronictl edit-config``); return once the cluster follows."""
        node = self.leader() or self.nodes[0]
        self._patronictl(node, "edit-config", "--force", "--set", f"synchronous_mode={'true' if on else 'false'}")
        self.synchronous = on
        self.wait_healthy(timeout=120)

    def maintenance(self, on: bool) -> None:
        """``patronictl pause`` / ``resume``: Patroni leaves PostgreSQL alone (no failover, and on PostgreSQL
        14+ no resuming of a WAL replay someone paused on a standby, which it otherwise does every loop)."""
        node = self.leader() or self.nodes[0]
        self._patronictl(node, "pause" if on else "resume", "--wait")

    def switchover(self) -> tuple[Window, Node, Node]:
        """``patronictl switchover`` from the leader to the other node; return when the new leader runs."""
        old = self.leader()
        assert old is not None, "no leader to switch over from"
        new = next(node for node in self.nodes if node is not old)
        began = time.monotonic_ns()
        self._patronictl(old, "switchover", "--leader", old.name, "--candidate", new.name, "--force")
        _wait_until(lambda: self.leader() is new, timeout=60, what=f"{new.name} to lead after the switchover")
        return Window(began, time.monotonic_ns()), old, new

    def kill(self, node: Node, *, also: list[int] | tuple[int, ...] = ()) -> int:
        """SIGKILL the node's Patroni and postmaster (no goodbye to anyone); return ``monotonic_ns`` after.

        Its backends notice the postmaster's death and exit by themselves, except a stopped one
        (``SIGSTOP``): pass those in ``also`` to kill them with it, as a dying machine would.
        """
        postmaster = node.postmaster_pid()
        children = _children_of(postmaster) if postmaster is not None else []
        assert node.proc is not None
        with suppress(ProcessLookupError):
            os.kill(node.proc.pid, signal.SIGKILL)
        for pid in (postmaster, *also) if postmaster is not None else also:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.proc.wait(timeout=30)
        killed = time.monotonic_ns()
        # Its backends notice the postmaster's death and exit by themselves (closing their clients' sockets).
        gone = [postmaster, *children] if postmaster is not None else []
        _wait_until(
            lambda: not any(_alive(pid) for pid in gone), timeout=30, what="the postmaster and backends to exit"
        )
        return killed

    def wait_leader(self, *, other_than: Node, timeout: float = 90) -> Node:
        def elected() -> Node | None:
            leader = self.leader()
            return leader if leader is not None and leader is not other_than else None

        try:
            return _wait_until(elected, timeout=timeout, what="a new leader", interval=0.05)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {self.members()}\n{self.logs()}") from None

    # -- teardown ---------------------------------------------------------------------------------

    def logs(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {node.name} ---\n{node.log_tail(chars)}" for node in self.nodes)

    @staticmethod
    def _tail(path: Path, chars: int = 3000) -> str:
        try:
            return path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def destroy(self) -> None:
        """Kill everything at once (nothing here is worth a clean shutdown) and delete every file."""
        try:
            for node in self.nodes:
                postmaster = node.postmaster_pid()
                if node.proc is not None and node.proc.poll() is None:
                    node.proc.kill()
                    node.proc.wait(timeout=30)
                if postmaster is not None and _alive(postmaster):
                    gone = [postmaster, *_children_of(postmaster)]
                    for pid in gone:
                        with suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    with suppress(RuntimeError):
                        _wait_until(lambda g=gone: not any(_alive(p) for p in g), timeout=30, what="postgres to exit")
            if self.etcd is not None and self.etcd.poll() is None:
                self.etcd.kill()
                self.etcd.wait(timeout=30)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)
            if self in _LIVE:
                _LIVE.remove(self)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children_of(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError, IndexError):
            fields = (entry / "stat").read_text().split(")")[-1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                children.append(int(entry.name))
    return children


@atexit.register
def _destroy_leftovers() -> None:  # a crashed test session must not leave a cluster behind
    for cluster in list(_LIVE):
        cluster.destroy()
