"""Failover on a real Patroni cluster: nothing acknowledged is lost (marker ``ha``).

The module starts its own cluster (``tests/patroni_cluster.py``): one etcd, two PostgreSQL 15 nodes
under Patroni, ``synchronous_mode: true``, ttl 10 s, loop_wait 1 s, retry_timeout 4 s. Runners, the
steady creator (``tests/ha_load.py``) and the observer reach it as an application does without extra
components: libpq multi-host with ``target_session_attrs=read-write``.

The load, in every scenario: three ``runwakes`` runners (``--lease 3s --interval 30``: with a 30 s
poll, a wake created due-now fires by push or not at all until then), 1,000 seeded ``probe.ha`` wakes
coming due over 15 s on 50 lanes and a steady creator adding wakes due within a second (each
acknowledged create written down before the next); every 5th wake's effect runs inside ``once()``.
The sink reads the port of the node its connection is on, so each effect says which node claimed it.

Scenarios:

* ``switchover``: ``patronictl switchover`` once a third of the seeded wakes fired.
* ``failover``: the leader's WAL senders SIGSTOPped for 2 s (the standby falls behind; with
  synchronous replication commits wait meanwhile), then its Patroni and postmaster SIGKILLed, kept
  down 20 s and started again (Patroni rewinds it with ``pg_rewind``; it rejoins as the standby).
* ``asynchronous``: the same with ``synchronous_mode`` off (``patronictl edit-config``) and the old
  leader restarted at once: what asynchronous replication loses. Only what must hold whatever the
  replication is asserted there; the losses are printed.
* reads off the standby: ``WAKES["READ_DATABASE"]`` on the standby (``tests/ha_console.py`` drives the
  admin): the read-only pages query it and say its lag; an action posted from the list runs on the primary.

What must hold (with synchronous replication): every create that returned exists under its key and
fires; nothing is stranded (no lapsed ``firing`` row, no due ``pending`` row); no runner exits (each
then exits 0 on SIGTERM); every ``once()`` effect happened exactly once; after the fault a wake
created due-now fires by push (the listener reconnected to the new primary). Measured and printed
(``pytest -s``), recorded in docs/faults.md: the first claim on the new primary after the fault,
how long Patroni took to elect it, the push latency, duplicate effects, and in asynchronous mode what
was lost.

A missing tool (``patroni``, ``etcd``, PostgreSQL 15, psycopg) skips the module with the reason, except
under ``CI=true``, where it fails. ``scripts/install-patroni`` installs Debian's packages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fault_servers import Observer
from tests.ha_load import WS
from tests.patroni_cluster import Node, PatroniCluster, _children_of
from tests.processes import Procs, wait_for

pytestmark = pytest.mark.ha

DB = "wakes_ha"
RUNNERS = 3
LEASE = "3s"
INTERVAL = 30  # the poll: long, so that a due-now wake fires by push or not for 30 s
SEEDED = 1000
LANES = 50
SPREAD_MS = 15_000
DOWN_SECONDS = 20  # how long the killed leader stays down before it is started again
STALL_SECONDS = 2.0  # how long the leader's WAL senders are stopped before it is killed (the standby lags)
SETTLED = {"fired", "dead", "expired", "cancelled"}
CREATES_BEFORE = 30  # acknowledged creates the steady creator must have made before the fault
QUIET_SECONDS = 15  # after a lossy failover: how long nothing must settle before the verdict


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PatroniCluster]:
    why = PatroniCluster.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"HA suite: {why} (required under CI=true)")
        pytest.skip(f"HA suite: {why}")
    instance = PatroniCluster(synchronous=True)
    try:
        began = time.monotonic()
        instance.start()
        import psycopg

        with psycopg.connect(
            host=instance.hosts,
            port=instance.ports,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            target_session_attrs="read-write",
        ) as conn:
            conn.execute(f"CREATE DATABASE {DB}")
        migrate = Procs(instance.url(DB), tmp_path_factory.mktemp("ha-migrate")).manage("migrate", "--verbosity", "0")
        assert migrate.returncode == 0, f"migrate failed:\n{migrate.stdout}{migrate.stderr}"
        print(
            f"\n[Patroni] etcd + 2 PostgreSQL 15 nodes (ports {instance.ports}), synchronous_mode, ttl "
            f"{instance.ttl}s, loop_wait {instance.loop_wait}s: ready in {time.monotonic() - began:.1f}s"
        )
        yield instance
    finally:
        instance.destroy()


@dataclass
class Load:
    """One scenario's runners, creator and observer against the cluster, and the evidence they leave."""

    cluster: PatroniCluster
    procs: Procs
    observer: Observer
    workdir: Path
    runners: list[subprocess.Popen] = field(default_factory=list)
    creator: subprocess.Popen | None = None
    _settled_seen: int = -1
    _quiet_since: float = 0.0

    @property
    def acks_path(self) -> Path:
        return self.workdir / "acks.jsonl"

    def start_runners(self) -> None:
        self.runners = [
            self.procs.runner(f"runner-{n}", "--interval", str(INTERVAL), "--lease", LEASE, WAKES_LEASE=LEASE)
            for n in range(RUNNERS)
        ]
        wanted = {proc.pid for proc in self.runners}
        wait_for(
            lambda: wanted <= set(self.observer.poll("runners") or ()) or self.assert_alive("at start-up"),
            timeout=90,
            interval=0.2,
            what="the runners to register",
        )

    @property
    def run(self) -> str:
        """This scenario's name in the ``once()`` receipts' sessions (``ha:<run>:<wake id>``)."""
        return self.workdir.name

    def start_creator(self) -> None:
        args = {"acks": str(self.acks_path), "stop": str(self.workdir / "stop"), "pause": 0.02, "run": self.run}
        self.creator = self.procs.start(["-m", "tests.ha_load", json.dumps(args)], name="creator")

    def stop_creator(self) -> dict[str, Any]:
        (self.workdir / "stop").touch()
        creator, self.creator = self.creator, None  # it exits now: no longer watched by assert_alive
        assert creator is not None
        return dict(self.procs.finish(creator, timeout=120))

    def assert_alive(self, context: str) -> bool:
        for proc in [*self.runners, *([self.creator] if self.creator is not None else [])]:
            if proc.poll() is not None:
                tail = "\n".join(self.procs.log(proc).splitlines()[-30:])
                raise AssertionError(f"pid {proc.pid} exited {proc.returncode} {context}; its log ends:\n{tail}")
        return False

    def acks(self) -> list[dict[str, Any]]:
        if not self.acks_path.exists():
            return []
        return [json.loads(line) for line in self.acks_path.read_text().splitlines() if line.strip()]

    def ledger(self) -> list[dict[str, Any]]:
        return self.procs.records("probe.ha")

    def quiet(self, context: str) -> bool:
        """True once no wake has settled for :data:`QUIET_SECONDS` and none is due and unclaimed."""
        self.assert_alive(context)
        snap = self.observer.poll("snapshot", workspace=WS)
        if snap is None:
            return False
        settled = sum(1 for w in snap["wakes"].values() if w["state"] in SETTLED)
        if settled != self._settled_seen or any(snap["stranded"].values()):
            self._settled_seen, self._quiet_since = settled, time.monotonic()
            return False
        return time.monotonic() - self._quiet_since >= QUIET_SECONDS

    def settled(self, count: int, context: str) -> bool:
        self.assert_alive(context)
        states = self.observer.poll("states", workspace=WS)
        return states is not None and sum(n for s, n in states.items() if s in SETTLED) >= count


@pytest.fixture
def load(cluster: PatroniCluster, tmp_path: Path) -> Iterator[Load]:
    cluster.wait_healthy(timeout=180)  # a scenario before may have left a node rejoining
    procs = Procs(cluster.url(DB), tmp_path)
    observer = Observer(procs.env(), tmp_path / "observer.log")
    try:
        observer.call("reset")
        yield Load(cluster, procs, observer, tmp_path)
    finally:
        procs.cleanup()
        observer.close()
        for node in cluster.nodes:  # a scenario that failed mid-fault leaves every node running
            if node.proc is None or node.proc.poll() is not None:
                cluster.start_node(node)


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """When the fault began, when a new leader ran, when the cluster was whole again; who leads now."""

    began: int
    elected: int
    healed: int
    old: Node
    new: Node

    def seconds(self, moment: int) -> float:
        return (moment - self.began) / 1e9


def switchover(cluster: PatroniCluster) -> Fault:
    window, old, new = cluster.switchover()
    elected = time.monotonic_ns()
    cluster.wait_healthy(timeout=120)
    return Fault(window.began, elected, time.monotonic_ns(), old, new)


def kill_leader(cluster: PatroniCluster, *, down: float = DOWN_SECONDS, stall_wal: float = 0.0) -> Fault:
    """SIGKILL the leader's Patroni and postmaster, keep it down ``down`` s, start it again to rejoin.

    With ``stall_wal``, the leader's WAL senders are SIGSTOPped that long first: the standby falls
    behind, as over a slow link; with synchronous replication, commits wait meanwhile.
    """
    old = cluster.leader()
    assert old is not None
    senders = wal_senders(old) if stall_wal else []
    if stall_wal:
        assert senders, f"no WAL sender on the leader {old.name}"
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(stall_wal)
    began = cluster.kill(old, also=senders)  # a stopped WAL sender would never notice its postmaster died
    new = cluster.wait_leader(other_than=old)
    elected = time.monotonic_ns()
    time.sleep(max(0.0, down - (time.monotonic_ns() - began) / 1e9))
    cluster.start_node(old)
    cluster.wait_healthy(timeout=180)
    return Fault(began, elected, time.monotonic_ns(), old, new)


def wal_senders(node: Node) -> list[int]:
    postmaster = node.postmaster_pid()
    assert postmaster is not None
    found = []
    for pid in _children_of(postmaster):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "walsender" in title:
            found.append(pid)
    return found


# --------------------------------------------------------------------------------------------------
# The scenario and its evidence
# --------------------------------------------------------------------------------------------------


def wall(monotonic_ns: int) -> float:
    return time.time() - (time.monotonic_ns() - monotonic_ns) / 1e9


def seeded_workload(run: str) -> list[dict[str, Any]]:
    return [
        {
            "kind": "probe.ha",
            "lane": f"lane-{i % LANES:02d}" if i % 2 else None,
            "in_ms": 500 + SPREAD_MS * i // SEEDED,
            "intent": {"i": -1 - i, "once": i % 5 == 0, "run": run},
            "max_attempts": 10,
        }
        for i in range(SEEDED)
    ]


def push_latencies(load: Load, count: int = 3) -> list[float]:
    """Create ``count`` due-now wakes one at a time, each once the runners sleep; seconds until claimed."""
    latencies = []
    for n in range(count):
        time.sleep(1.0)  # the runners are idle: nothing due, each asleep for up to INTERVAL
        before = time.time()
        (pk,) = load.observer.call(
            "seed", workspace=WS, wakes=[{"kind": "probe.ha", "in_ms": 0, "intent": {"i": -100_000 - n}}]
        )
        line = wait_for(
            lambda pk=pk: next((line for line in load.ledger() if line["id"] == pk), None),
            timeout=INTERVAL * 2,
            interval=0.02,
            what=f"push probe wake {pk} to fire",
        )
        latencies.append(line["claimed_at"] - before)
    return latencies


@dataclass
class Verdict:
    acked: int
    lost: list[int]  # acknowledged creates whose wake is gone (or another wake holds its key)
    not_fired: dict[str, int]
    once_twice: int  # once() effects that ran more than once for a wake
    extra_effects: int
    stranded: dict[str, int]
    attempts: Counter
    receipts: dict[str, int]
    first_claim_on_new: float | None
    claim_gap: float | None
    push: list[float]
    creator: dict[str, Any]


def run_scenario(
    load: Load, fault: Callable[[PatroniCluster], Fault], label: str, *, lossy: bool = False
) -> tuple[Fault, Verdict]:
    """Run the load through ``fault``; wait until every acknowledged wake settled (``lossy``: until it is quiet).

    After a lossy failover some acknowledged wakes no longer exist, and ``once()`` receipts whose done
    was lost stay ``running`` until their lease lapses (5 min): their wakes wait in retry meanwhile. So
    a lossy run waits until no wake has settled for :data:`QUIET_SECONDS` and none is due and unclaimed.
    """
    load.start_runners()
    seeded = load.observer.call("seed", workspace=WS, wakes=seeded_workload(load.run))
    load.start_creator()
    wait_for(  # the fault must find acknowledged creates to lose, not a creator still starting up
        lambda: len(load.acks()) >= CREATES_BEFORE or load.assert_alive("before"),
        timeout=180,
        interval=0.2,
        what=f"{CREATES_BEFORE} acknowledged creates before the fault",
    )
    wait_for(
        lambda: len({line["id"] for line in load.ledger()}) >= len(seeded) // 3 or load.assert_alive("before"),
        timeout=180,
        interval=0.2,
        what="a third of the seeded wakes to fire before the fault",
    )
    happened = fault(load.cluster)
    time.sleep(5)  # the creator keeps creating on the new primary for a while
    creator = load.stop_creator()
    acks = load.acks()
    total = len(seeded) + len(acks)
    if lossy:
        wait_for(lambda: load.quiet(f"after the {label}"), timeout=300, interval=0.5, what=f"quiet after the {label}")
    else:
        wait_for(
            lambda: load.settled(total, f"after the {label}"),
            timeout=300,
            interval=0.5,
            what=f"{total} wakes to settle after the {label} ({load.observer.poll('states', workspace=WS)})",
        )
    push = push_latencies(load)
    load.assert_alive(f"after the {label}")
    for proc in load.runners:
        assert load.procs.stop(proc) == 0, f"runner {proc.pid} did not exit 0:\n{load.procs.log(proc)[-3000:]}"

    keys = load.observer.call("keys", workspace=WS)
    lost = [a["i"] for a in acks if keys.get(f"ha-{a['i']}", [None])[0] != a["id"]]
    snap = load.observer.call("snapshot", workspace=WS)
    states = Counter(w["state"] for w in snap["wakes"].values())
    ledger = load.ledger()
    # A wake is (id, i): after an asynchronous failover the id sequence may hand a lost wake's id out again.
    effects = Counter((line["id"], line["i"]) for line in ledger)
    once_ids = {(line["id"], line["i"]) for line in ledger if line["once"]}
    effect_ids = {pk for pk, _ in effects}
    new_port = happened.new.pg_port
    on_new = [
        line["claimed_at"] for line in ledger if line["port"] == new_port and line["claimed_at"] > wall(happened.began)
    ]
    on_old = [line["claimed_at"] for line in ledger if line["port"] == happened.old.pg_port]
    # The claim gap: from the last claim on the old primary to the first on the new one.
    gap = (min(on_new) - max(on_old)) if on_new and on_old else None
    never = [int(pk) for pk, w in snap["wakes"].items() if w["state"] == "fired" and int(pk) not in effect_ids]
    assert not never, f"wakes fired without an effect on record: {never[:10]}"
    verdict = Verdict(
        acked=len(acks),
        lost=lost,
        not_fired={s: n for s, n in states.items() if s != "fired"},
        once_twice=sum(1 for pk in once_ids if effects[pk] > 1),
        extra_effects=sum(n - 1 for n in effects.values() if n > 1),
        stranded=snap["stranded"],
        attempts=Counter(a["outcome"] for a in snap["attempts"]),
        receipts=load.observer.call("receipts", prefix=f"ha:{load.run}:"),
        first_claim_on_new=(min(on_new) - wall(happened.began)) if on_new else None,
        claim_gap=gap,
        push=push,
        creator=creator,
    )
    first = "none" if verdict.first_claim_on_new is None else f"{verdict.first_claim_on_new:.1f}s"
    print(
        f"\n[Patroni, {label}] {happened.old.name} -> {happened.new.name}: new leader running "
        f"{happened.seconds(happened.elected):.1f}s after the fault began, cluster whole again after "
        f"{happened.seconds(happened.healed):.1f}s; first claim on the new primary "
        f"{first} after (no claim for {'-' if gap is None else f'{gap:.1f}s'}); "
        f"{len(seeded)} seeded + {verdict.acked} acknowledged creates ({creator}); lost "
        f"{len(verdict.lost)}; not fired {verdict.not_fired}; stranded {verdict.stranded}; duplicate effects "
        f"{verdict.extra_effects}, once() effects twice {verdict.once_twice}; receipts {verdict.receipts}; "
        f"attempts {dict(verdict.attempts)}; push after: {', '.join(f'{s * 1000:.0f} ms' for s in push)}; "
        f"0 runner exits"
    )
    return happened, verdict


def assert_nothing_lost(verdict: Verdict) -> None:
    assert not verdict.lost, f"{len(verdict.lost)} acknowledged creates are gone: {verdict.lost[:20]}"
    assert not verdict.not_fired, f"wakes that did not fire: {verdict.not_fired}"
    assert verdict.stranded == {"lapsed_firing": 0, "due_pending": 0}, f"stranded: {verdict.stranded}"
    assert verdict.once_twice == 0, f"{verdict.once_twice} once() effects ran twice"
    assert verdict.receipts.get("running", 0) == 0, f"once() receipts left running: {verdict.receipts}"
    assert verdict.first_claim_on_new is not None, "no wake was claimed on the new primary"
    # Push, not the 30 s poll: each probe fired within a third of the poll interval.
    assert max(verdict.push) < INTERVAL / 3, f"after the fault a due-now wake waited {verdict.push}: it was the poll"


# --------------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------------


def test_switchover_loses_nothing(load: Load) -> None:
    _, verdict = run_scenario(load, switchover, "switchover")
    assert_nothing_lost(verdict)


def test_failover_of_a_killed_leader_behind_a_lagging_standby_loses_nothing(load: Load) -> None:
    """The standby lags 2 s (the leader's WAL senders stopped), then the leader dies and stays down 20 s.

    With synchronous replication the commits of those 2 s waited for the standby: none was
    acknowledged, so none can be lost.
    """
    _, verdict = run_scenario(
        load,
        lambda cluster: kill_leader(cluster, stall_wal=STALL_SECONDS),
        f"failover (WAL stalled {STALL_SECONDS:.0f}s, leader SIGKILLed, down {DOWN_SECONDS}s)",
    )
    assert_nothing_lost(verdict)


def test_asynchronous_replication_loses_what_the_standby_had_not_received(load: Load) -> None:
    """The same failover with ``synchronous_mode`` off (the old leader restarted at once): what is lost.

    Creates the application was told succeeded, settles (their wakes fire again), ``once()`` receipts
    (their effects run again, or stay ``running`` until their lease lapses, then read as interrupted).
    Measured and printed; the test holds this run only to what still must hold: no runner exits, and
    nothing stranded (no wake due and unclaimed, no lapsed lease).
    """
    load.cluster.set_synchronous(False)
    try:
        _, verdict = run_scenario(
            load,
            lambda cluster: kill_leader(cluster, down=0, stall_wal=STALL_SECONDS),
            f"failover, asynchronous replication (WAL stalled {STALL_SECONDS:.0f}s, leader SIGKILLed)",
            lossy=True,
        )
    finally:
        load.cluster.set_synchronous(True)
    assert verdict.stranded == {"lapsed_firing": 0, "due_pending": 0}, f"stranded: {verdict.stranded}"


# --------------------------------------------------------------------------------------------------
# Reads off the standby
# --------------------------------------------------------------------------------------------------


def test_the_console_reads_off_the_standby_and_acts_on_the_primary(load: Load) -> None:
    """``WAKES["READ_DATABASE"]`` on the Patroni standby (a real streaming replica).

    The wake list, the dashboard and the metrics query wakes on the standby only, and say how far behind
    it is. With replay paused on the standby, a wake created on the primary is missing from the list,
    the list says the replica is behind, and an action posted from the list still finds the wake and
    cancels it: actions read and write on the primary.
    """
    standby = load.cluster.standby()
    load.cluster.maintenance(True)  # or Patroni resumes the replay the child pauses on the standby
    try:
        child = load.procs.start(
            ["-m", "tests.ha_console"], name="console", WAKES_READ_DATABASE_URL=load.cluster.node_url(standby, DB)
        )
        result = load.procs.finish(child, timeout=240)
    finally:
        load.cluster.maintenance(False)
    pages, paused = result["pages"], result["paused"]
    print(f"\n[Patroni, reads off the standby] {json.dumps(result)}")
    for name, page in pages.items():
        assert page["status"] == 200, f"{name}: {page}"
        assert page["wake_queries_replica"] > 0, f"{name} read no wake on the replica: {page}"
        assert page["wake_queries_primary"] == 0, f"{name} read wakes on the primary: {page}"
    assert any("Read from replica:" in line and "behind" in line for line in pages["list"]["says"]), pages["list"]
    assert any("Read from replica:" in line and "behind" in line for line in pages["dashboard"]["says"]), pages
    assert any(
        line.startswith('django_wakes_read_database_lag_seconds{database="replica"}')
        for line in pages["metrics"]["says"]
    )
    assert not paused["listed_while_paused"], "the list showed a wake the paused replica cannot have"
    (line,) = paused["lag_line"]
    behind = float(line.split("replica:")[1].split("s behind")[0])
    assert behind >= 1.0, f"the list did not say the paused replica is behind: {line}"
    assert paused["action_status"] == 302 and paused["late_state_on_primary"] == "cancelled", paused
    assert paused["wake_queries_on_replica_during_action"] == 0, paused
