"""Faults: real database servers broken under running ``runwakes`` processes (marker ``faults``).

Each test runs against a private PostgreSQL 15 cluster and a private MariaDB 10.11 instance that
the module starts itself (``tests/fault_servers.py``): created, migrated, restarted, stopped,
made read-only and partitioned by the test, and deleted at the end. The shared servers the rest
of the suite uses are never touched, and pytest-django's test database is not used: the runners,
and the test's own seeding and reading (through an observer child process with Django set up),
point at the private server with ``DATABASE_URL``.

The workload is ``probe.ledger`` (``testproject/probe_sinks.py``): each firing appends one fsynced
line — the effect — with the wake id, attempt number, claim token, the claim's time and the
moment the sink started. The ledger, the wakes' states and their ``WakeAttempt`` history are the
three records every verdict is drawn from.

Scenarios, each on both servers:

* ``restart-fast``, ``restart-immediate``, ``outage-20s``, ``read-only-10s``: three runners
  (lease 3 s) fire 1,500 wakes on 50 lanes coming due over 12 s; once a third has fired the server
  is restarted (``pg_ctl -m fast`` / SIGTERM; ``pg_ctl -m immediate`` / SIGKILL), stopped for
  20 s, or made read-only for 10 s with every client disconnected. Then no runner may have exited,
  every wake must be ``fired`` with its effect in the ledger, and nothing may be stranded (no
  ``firing`` wake with a lapsed lease, no due ``pending`` wake).
* partition: one of the three runners reaches the database through a :class:`TcpProxy` that is
  frozen for 10 s (lease 2 s); the others take over its claims. No sink may start, anywhere, for
  a claim that had already been taken over when it started.
* poison: a wake whose sink SIGKILLs its own runner, in one batch with 50 ordinary wakes,
  ``max_attempts`` 3; a supervisor loop replaces the runner each time it dies. The poisoned wake must end
  ``dead`` after its own three charged attempts; all 50 batch-mates must fire.
* kill: SIGKILL a runner holding claims; another must re-drive them within the recovery time the
  docs promise, lease + poll interval.
* held outcome: every runner reaches the database through its own :class:`TcpProxy`; all are cut
  for longer than the lease while one holds a finished outcome, a fourth runner boots during the
  outage, and the holder's route heals last. No sink may run twice: the others hold takeovers back
  until the holder has renewed and settled (``django_wakes/runner/reconnect.py``).

Measured figures are printed (``pytest -s``) and recorded in ``docs/faults.md``. Run::

    .venv/bin/python -m pytest tests/test_faults.py -s -p no:cacheprovider

A server whose tools are missing (``initdb``/``pg_ctl``, ``mariadb-install-db``/``mariadbd``, or its
Python driver) is skipped with the reason, except under ``CI=true``, where that fails.
``scripts/run-tests`` runs this module once, after the per-database passes (which leave it out).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fault_servers import SERVERS, DatabaseServer, Observer, TcpProxy, Window
from tests.processes import Procs, wait_for

pytestmark = pytest.mark.faults

WS = "ws-faults"
RUNNERS = 3
INTERVAL = 0.5  # seconds: every runner's --interval (the polling backstop)
WAKES = 1500
LANES = 50
SPREAD_MS = 12_000  # the workload comes due over this long, so there is work before, during and after a fault
SETTLED = {"fired", "dead", "expired", "cancelled"}
TAKEN_OVER = {"interrupted", "abandoned"}  # attempt outcomes recorded when another runner took the claim


# --------------------------------------------------------------------------------------------------
# Fixtures: one private server per database for the module, a clean rig per test
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseServer]:
    """Set up, start, create and migrate a private server; destroy it after the module's tests."""
    name: str = request.param
    kind = SERVERS[name]
    why = kind.missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"fault suite on {kind.label}: {why} (required under CI=true)")
        pytest.skip(f"fault suite on {kind.label}: {why}")
    instance = kind()
    try:
        began = time.monotonic()
        instance.setup()
        instance.start()
        instance.create_database()
        migrate = Procs(instance.url(), tmp_path_factory.mktemp(f"migrate-{name}")).manage(
            "migrate", "--verbosity", "0"
        )
        assert migrate.returncode == 0, f"migrate on {kind.label} failed:\n{migrate.stdout}{migrate.stderr}"
        print(f"\n[{kind.label}] private server on 127.0.0.1:{instance.port} ready in {time.monotonic() - began:.1f}s")
        yield instance
    finally:
        instance.destroy()


@dataclass
class Rig:
    """One test's runners, observer and evidence, against the module's private server."""

    server: DatabaseServer
    procs: Procs
    observer: Observer
    runners: dict[str, subprocess.Popen] = field(default_factory=dict)
    killed: set[int] = field(default_factory=set)

    @property
    def label(self) -> str:
        return self.server.label

    def runner(self, name: str, *, lease: str, **env: str) -> subprocess.Popen:
        """Start ``runwakes --interval INTERVAL --lease LEASE`` (and ``WAKES_LEASE``) with ``env``."""
        proc = self.procs.runner(name, "--interval", str(INTERVAL), "--lease", lease, WAKES_LEASE=lease, **env)
        self.runners[name] = proc
        return proc

    def kill(self, proc: subprocess.Popen) -> int:
        self.killed.add(proc.pid)
        return self.procs.kill(proc)

    def assert_alive(self, context: str, procs: list[subprocess.Popen] | None = None) -> bool:
        """Fail, with the log's end, if a runner (not one the test killed) has exited; else False."""
        for name, proc in self.runners.items():
            if procs is not None and proc not in procs:
                continue
            if proc.pid in self.killed or proc.poll() is None:
                continue
            lines = self.procs.log(proc).splitlines()
            last = next((line for line in reversed(lines) if line and not line[0].isspace()), "(empty log)")
            tail = "\n".join(lines[-25:])
            raise AssertionError(
                f"runner {name} (pid {proc.pid}) exited with status {proc.returncode} {context} "
                f"on {self.label}: {last}\nits log ends:\n{tail}"
            )
        return False

    def wait_registered(self, *procs: subprocess.Popen) -> None:
        wanted = {proc.pid for proc in procs}
        wait_for(
            lambda: wanted <= set(self.observer.poll("runners") or ()) or self.assert_alive("at start-up", list(procs)),
            timeout=60,
            interval=0.2,
            what=f"{len(procs)} runner(s) to register",
        )

    def seed(self, wakes: list[dict[str, Any]]) -> list[int]:
        return list(self.observer.call("seed", workspace=WS, wakes=wakes))

    def ledger(self) -> list[dict[str, Any]]:
        return self.procs.records("probe.ledger")

    def settle(self, count: int, *, timeout: float, context: str, check_alive: bool = True) -> None:
        """Wait until ``count`` wakes of the workspace are settled; fail at once if a runner exits."""

        def settled() -> bool:
            if check_alive:
                self.assert_alive(context)
            states = self.observer.poll("states", workspace=WS)
            return states is not None and sum(n for s, n in states.items() if s in SETTLED) >= count

        wait_for(
            settled,
            timeout=timeout,
            interval=0.5,
            what=f"{count} wakes to settle {context} (states: {self.observer.poll('states', workspace=WS)})",
        )

    def snapshot(self) -> dict[str, Any]:
        return dict(self.observer.call("snapshot", workspace=WS))

    def stop_all(self) -> None:
        """SIGTERM every live runner; each must finish what it holds and exit 0."""
        for name, proc in self.runners.items():
            if proc.pid not in self.killed and proc.poll() is None:
                assert self.procs.stop(proc) == 0, f"runner {name} did not shut down cleanly:\n{self.procs.log(proc)}"


@pytest.fixture
def rig(server: DatabaseServer, tmp_path: Path) -> Iterator[Rig]:
    procs = Procs(server.url(), tmp_path)
    observer = Observer(procs.env(), tmp_path / "observer.log")
    try:
        observer.call("reset")
        yield Rig(server, procs, observer)
    finally:
        procs.cleanup()
        observer.close()
        server.heal()  # a test that failed mid-fault leaves the server up and writable for the next


# --------------------------------------------------------------------------------------------------
# Workload and evidence
# --------------------------------------------------------------------------------------------------


def spread_workload(*, count: int = WAKES, sleep: float = 0.0, max_attempts: int = 10) -> list[dict[str, Any]]:
    """``count`` ledger wakes on LANES lanes, coming due evenly over SPREAD_MS from half a second on.

    ``max_attempts`` is generous: how attempts are charged is the poison test's business, not these.
    """
    return [
        {
            "kind": "probe.ledger",
            "lane": f"lane-{i % LANES:02d}",
            "in_ms": 500 + SPREAD_MS * i // count,
            "intent": {"i": i, "sleep": sleep} if sleep else {"i": i},
            "max_attempts": max_attempts,
        }
        for i in range(count)
    ]


def wall(monotonic_ns: int) -> float:
    """The ``time.time()`` of a ``time.monotonic_ns()`` moment (comparable with the ledger's ``wall``)."""
    return time.time() - (time.monotonic_ns() - monotonic_ns) / 1e9


def duplicates(ledger: list[dict[str, Any]]) -> tuple[int, int]:
    """(extra effects, wakes with more than one effect): the price of at-least-once."""
    counts = Counter(line["id"] for line in ledger)
    extra = [n - 1 for n in counts.values() if n > 1]
    return sum(extra), len(extra)


def assert_everything_fired(rig: Rig, ids: list[int], snap: dict[str, Any], ledger: list[dict[str, Any]]) -> None:
    states = Counter(w["state"] for w in snap["wakes"].values())
    assert states == {"fired": len(ids)}, f"not every wake fired on {rig.label}: {dict(states)}"
    missing = set(ids) - {line["id"] for line in ledger}
    assert not missing, f"{len(missing)} fired wakes have no effect in the ledger, e.g. {sorted(missing)[:10]}"
    assert snap["stranded"] == {"lapsed_firing": 0, "due_pending": 0}, f"stranded rows: {snap['stranded']}"


def attempts_by_outcome(snap: dict[str, Any]) -> Counter:
    return Counter(a["outcome"] for a in snap["attempts"])


# --------------------------------------------------------------------------------------------------
# a-d: restarts, an outage, a read-only period
# --------------------------------------------------------------------------------------------------

FAULTS: dict[str, Callable[[DatabaseServer], Window]] = {
    "restart-fast": lambda server: server.restart("fast"),
    "restart-immediate": lambda server: server.restart("immediate"),
    "outage-20s": lambda server: server.outage(20),
    "read-only-10s": lambda server: server.read_only(10),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_runners_outlive_the_fault_and_fire_every_wake(rig: Rig, fault: str) -> None:
    runners = [rig.runner(f"runner-{n}", lease="3s") for n in range(RUNNERS)]
    rig.wait_registered(*runners)
    ids = rig.seed(spread_workload())
    wait_for(
        lambda: len({line["id"] for line in rig.ledger()}) >= len(ids) // 3 or rig.assert_alive("before the fault"),
        timeout=120,
        interval=0.2,
        what="a third of the wakes to fire before the fault",
    )
    before = len({line["id"] for line in rig.ledger()})

    window = FAULTS[fault](rig.server)
    rig.settle(len(ids), timeout=240, context=f"through the {fault}")
    rig.assert_alive(f"after the {fault}")  # 0 runner exits: every runner still running
    rig.stop_all()

    snap, ledger = rig.snapshot(), rig.ledger()
    assert_everything_fired(rig, ids, snap, ledger)
    back = wall(window.ended)
    first_claim = min(line["claimed_at"] for line in ledger if line["claimed_at"] > back) - back
    effect_at: dict[int, float] = {}
    for line in ledger:
        effect_at[line["id"]] = min(effect_at.get(line["id"], line["wall"]), line["wall"])
    fire_at = {int(pk): w["fire_at"] for pk, w in snap["wakes"].items()}
    backlog = [pk for pk, at in fire_at.items() if at <= back and effect_at[pk] > wall(window.began)]
    caught_up = max(effect_at[pk] for pk in backlog) - back
    worst_late = max(effect_at[pk] - fire_at[pk] for pk in ids)
    extra, twice = duplicates(ledger)
    print(
        f"\n[{rig.label}] {fault}: fault lasted {window.seconds:.1f}s ({before} of {len(ids)} wakes fired before it); "
        f"first claim {first_claim:.2f}s after the server was back; the {len(backlog)} wakes that came due "
        f"meanwhile all fired within {caught_up:.1f}s; worst lateness {worst_late:.1f}s; "
        f"{extra} duplicate effects on {twice} wakes; attempts {dict(attempts_by_outcome(snap))}; 0 runner exits"
    )


# --------------------------------------------------------------------------------------------------
# e: a partitioned runner
# --------------------------------------------------------------------------------------------------

PARTITION = 10.0
PARTITION_WAKES = 900
SINK_SECONDS = 0.05  # each sink of the partition test: long enough to catch the proxied runner inside one


def test_a_partitioned_runner_starts_no_sink_for_a_claim_already_taken_over(rig: Rig) -> None:
    """One runner behind a proxy frozen for 10 s with a 2 s lease: its claims lapse and are taken over.

    When the network heals, the runner still has the rest of its batch in hand. Starting any of those
    sinks would run an effect for a claim another runner now holds (and will run itself). Evidence:
    a ledger line of runner R for claim (wake, ``claimed_at``) whose ``wall`` start is later than
    the moment another runner took that claim over (the ``interrupted``/``abandoned`` attempt row R's
    claim left behind: its ``finished`` time is the takeover).
    """
    proxy = TcpProxy(rig.server.port).start()
    try:
        direct = [rig.runner(f"direct-{n}", lease="2s") for n in range(RUNNERS - 1)]
        cut = rig.runner("partitioned", lease="2s", DATABASE_URL=rig.server.url(port=proxy.port))
        rig.wait_registered(*direct, cut)
        ids = rig.seed(spread_workload(count=PARTITION_WAKES, sleep=SINK_SECONDS))
        mine = rig.procs.probe_dir / f"probe.ledger-{cut.pid}.jsonl"

        def in_a_sink() -> bool:  # its latest sink started under half a sink ago: it holds that claim
            rig.assert_alive("before the partition")
            lines = mine.read_bytes().splitlines() if mine.exists() else []
            return len(lines) >= 30 and time.monotonic_ns() - json.loads(lines[-1])["t"] < SINK_SECONDS * 1e9 / 2

        wait_for(in_a_sink, timeout=120, interval=0.002, what="the proxied runner to be inside a sink")
        began = time.monotonic_ns()
        proxy.pause()
        time.sleep(PARTITION)
        proxy.resume()
        healed = time.monotonic_ns()
        rig.settle(len(ids), timeout=240, context="after the partition", check_alive=False)
        rig.assert_alive("after the partition")
        rig.stop_all()
    finally:
        proxy.stop()

    snap, ledger = rig.snapshot(), rig.ledger()
    taken: dict[tuple[int, int | None], list[float]] = defaultdict(list)
    for a in snap["attempts"]:
        if a["outcome"] in TAKEN_OVER:
            taken[(a["wake"], a["pid"])].append(a["finished"])
    late = [
        (line, finished)
        for line in ledger
        for finished in taken.get((line["id"], line["pid"]), ())
        if line["claimed_at"] < finished <= line["wall"]
    ]
    lost = sum(len(v) for (_, pid), v in taken.items() if pid == cut.pid)
    extra, twice = duplicates(ledger)
    print(
        f"\n[{rig.label}] partition of one runner for {(healed - began) / 1e9:.1f}s (lease 2s): "
        f"{lost} of its claims taken over, {len(late)} sinks started after their claim was taken over "
        f"({Counter(line['pid'] == cut.pid for line, _ in late)[True]} by the partitioned runner), "
        f"{extra} duplicate effects on {twice} wakes; attempts {dict(attempts_by_outcome(snap))}"
    )
    assert lost, "the partition cost the proxied runner no claim: it held none when the proxy froze"
    examples = [
        f"wake {line['id']} (attempt {line['attempt']}, pid {line['pid']}): sink started "
        f"{line['wall'] - finished:.2f}s after another runner took the claim over"
        for line, finished in late[:5]
    ]
    assert not late, f"{len(late)} sinks started for claims their runner no longer held: {examples}"
    assert_everything_fired(rig, ids, snap, ledger)


# --------------------------------------------------------------------------------------------------
# f: a poisoned wake
# --------------------------------------------------------------------------------------------------


def test_a_poisoned_wake_dies_after_its_own_attempts_and_its_batch_mates_fire(rig: Rig) -> None:
    """The poisoned wake comes due first, with 50 others at the same moment: one claim takes them all.

    Every runner that fires it dies with its whole batch in hand; the supervisor starts a new one,
    whose boot recovery takes the lapsed batch over, poisoned wake first (the lowest id of one lease
    expiry), and dies too. Only attempts whose sink started may be charged, so the poisoned wake
    alone burns its three attempts and goes dead; then its batch-mates fire. The supervisor keeps one
    runner at a time: with several, racing claims and takeovers (SKIP LOCKED) split the batch at
    random, and whether a batch-mate stays with the poisoned wake would be luck, not the runner.
    """
    due_ms, max_attempts = 3000, 3
    wakes = [{"kind": "probe.poison", "in_ms": due_ms, "max_attempts": max_attempts, "intent": {"poison": True}}]
    wakes += [
        {"kind": "probe.ledger", "in_ms": due_ms, "max_attempts": max_attempts, "intent": {"i": i}} for i in range(50)
    ]
    serial = iter(range(1, 1000))

    def start() -> subprocess.Popen:
        return rig.runner(f"runner-{next(serial)}", lease="2s")

    live = [start()]
    rig.wait_registered(*live)
    ids = rig.seed(wakes)  # the poisoned wake first: the lowest id of the same due time
    poison, mates = ids[0], ids[1:]
    began = time.monotonic()
    deaths: list[tuple[int, int | None, float]] = []
    while True:
        for proc in list(live):
            if proc.poll() is not None:  # the supervisor: note the death, start a replacement
                deaths.append((proc.pid, proc.returncode, time.monotonic() - began))
                rig.killed.add(proc.pid)
                live.remove(proc)
                live.append(start())
        states = rig.observer.poll("states", workspace=WS) or {}
        if sum(n for s, n in states.items() if s in SETTLED) == len(ids):
            break
        assert time.monotonic() - began < 180, f"not settled after 180s: {states}, {len(deaths)} runner deaths"
        time.sleep(0.25)
    elapsed = time.monotonic() - began
    rig.stop_all()

    snap, ledger = rig.snapshot(), rig.ledger()
    poison_starts = [line for line in ledger if line["id"] == poison]
    charged = [a for a in snap["attempts"] if a["wake"] == poison and a["outcome"] == "interrupted"]
    mates_fired = [pk for pk in mates if snap["wakes"][str(pk)]["state"] == "fired"]
    print(
        f"\n[{rig.label}] poison: {len(deaths)} runner deaths (all SIGKILL by the poisoned sink: "
        f"{all(rc == -signal.SIGKILL for _, rc, _ in deaths)}), poisoned wake "
        f"{snap['wakes'][str(poison)]['state']} after {len(poison_starts)} starts / {len(charged)} charged attempts; "
        f"{len(mates_fired)} of {len(mates)} batch-mates fired; settled in {elapsed:.1f}s"
    )
    assert {pid for pid, _, _ in deaths} <= {line["pid"] for line in poison_starts}, "a runner died of something else"
    assert all(rc == -signal.SIGKILL for _, rc, _ in deaths), deaths
    assert snap["wakes"][str(poison)]["state"] == "dead", snap["wakes"][str(poison)]
    assert len(charged) == max_attempts, f"the poisoned wake was charged {len(charged)} attempts, not {max_attempts}"
    assert len(poison_starts) >= max_attempts
    started = {line["id"] for line in ledger}
    unfired = [pk for pk in mates if pk not in mates_fired]
    examples = [
        f"wake {pk}: {snap['wakes'][str(pk)]['state']}, attempts "
        f"{[a['outcome'] for a in snap['attempts'] if a['wake'] == pk]}, its sink "
        f"{'started' if pk in started else 'never started'}"
        for pk in unfired[:3]
    ]
    assert not unfired, f"{len(unfired)} of {len(mates)} batch-mates of the poisoned wake did not fire: {examples}"
    assert set(mates) <= started


# --------------------------------------------------------------------------------------------------
# g: a runner killed holding claims
# --------------------------------------------------------------------------------------------------


def test_a_killed_runners_claims_are_redriven_within_lease_plus_poll_interval(rig: Rig) -> None:
    """A runner SIGKILLed mid-batch: its claims are taken over within LEASE + POLL_INTERVAL of the kill.

    The bound docs/operations.md promises ("When a runner is killed"): a lease runs at most LEASE past
    the last heartbeat, and the other runners wake when the earliest lease lapses (at most one poll
    interval later). Measured from the kill to the takeover claims (the dead runner's attempt rows
    end at the takeover), and to the first re-driven sink.
    """
    lease = 3.0
    holder = rig.runner("holder", lease="3s")
    rig.wait_registered(holder)
    ids = rig.seed([{"kind": "probe.ledger", "intent": {"i": i, "sleep": 1.0}} for i in range(10)])
    wait_for(
        lambda: any(line["pid"] == holder.pid for line in rig.ledger()) or rig.assert_alive("before the kill"),
        timeout=60,
        what="the holder to start firing its batch",
    )
    takers = [rig.runner(f"taker-{n}", lease="3s") for n in range(RUNNERS - 1)]
    rig.wait_registered(*takers)
    assert len(rig.ledger()) < len(ids) - 2, "the holder finished its batch before the takers came up; slow machine?"

    killed = wall(rig.kill(holder))
    rig.settle(len(ids), timeout=60, context="after the holder was killed")
    rig.assert_alive("after the holder was killed")
    rig.stop_all()

    snap, ledger = rig.snapshot(), rig.ledger()
    assert_everything_fired(rig, ids, snap, ledger)
    orphans = {
        a["wake"]: a["finished"] for a in snap["attempts"] if a["pid"] == holder.pid and a["outcome"] in TAKEN_OVER
    }
    assert orphans, "the holder held no claim when it was killed"
    redriven = [finished - killed for finished in orphans.values()]
    restarted = [line["wall"] - killed for line in ledger if line["id"] in orphans and line["pid"] != holder.pid]
    bound = lease + INTERVAL
    print(
        f"\n[{rig.label}] SIGKILL of a runner holding {len(orphans)} claims (lease {lease:.0f}s, poll {INTERVAL}s): "
        f"re-driven (claimed by another runner) {min(redriven):.2f}-{max(redriven):.2f}s after the kill, "
        f"first re-driven sink {min(restarted):.2f}s after; documented bound lease + poll = {bound:.1f}s"
    )
    assert {line["pid"] for line in ledger if line["id"] in orphans and line["pid"] != holder.pid} <= {
        t.pid for t in takers
    }
    assert max(redriven) <= bound, f"re-driven {max(redriven):.2f}s after the kill, over lease + poll ({bound:.1f}s)"


# --------------------------------------------------------------------------------------------------
# h: an outage longer than the lease while a live runner holds a finished outcome
# --------------------------------------------------------------------------------------------------

HELD_LEASE = 6.0  # seconds: heartbeat period 2 s, takeover grace max(6, BACKOFF_CAP 5 + 2 * 2) = 9 s
HELD_SINK = 1.5  # the held wake's sink: it finishes while the database is away
HOLDER_LAGS = 5.8  # the holder's route heals this long after the others': longer than BACKOFF_CAP


def test_an_outage_does_not_hand_a_live_runners_finished_work_to_another(rig: Rig) -> None:
    """Every runner behind its own proxy; all cut for longer than the lease while one is in a sink.

    The holder's sink finishes during the outage: it holds the outcome and tries to settle. The
    lease lapses. The others' routes heal first, then, :data:`HOLDER_LAGS` later (longer than the
    backoff cap, the longest a runner waits between tries, so on code without the grace a taker is
    sure to reach the database first), the holder's. A fourth runner boots during the outage. The
    wake's sink must have run once: nobody takes the lapsed lease over before the holder, back,
    renews it and settles.
    """
    lease = f"{HELD_LEASE:g}s"
    proxies = {name: TcpProxy(rig.server.port).start() for name in ("runner-0", "runner-1", "runner-2", "booted")}
    try:
        runners = {
            name: rig.runner(name, lease=lease, DATABASE_URL=rig.server.url(port=proxies[name].port))
            for name in ("runner-0", "runner-1", "runner-2")
        }
        rig.wait_registered(*runners.values())
        (wake,) = rig.seed([{"kind": "probe.ledger", "intent": {"sleep": HELD_SINK}}])
        first = wait_for(
            lambda: rig.ledger() or rig.assert_alive("before the outage"), timeout=60, what="the wake's sink to start"
        )
        holder = next(name for name, proc in runners.items() if proc.pid == first[0]["pid"])
        for proxy in proxies.values():
            proxy.cut()
        began = time.monotonic()
        booted = rig.runner("booted", lease=lease, DATABASE_URL=rig.server.url(port=proxies["booted"].port))
        time.sleep(HELD_LEASE + 1.5)  # the sink ended long ago; the lease has lapsed in the database
        for name, proxy in proxies.items():
            if name != holder:
                proxy.heal()
        time.sleep(HOLDER_LAGS)
        proxies[holder].heal()
        outage = time.monotonic() - began
        rig.settle(1, timeout=60, context="after the outage")
        time.sleep(HELD_LEASE)  # room for a late takeover to show in the ledger
        rig.assert_alive("after the outage")
        rig.stop_all()
    finally:
        for proxy in proxies.values():
            proxy.stop()

    snap, ledger = rig.snapshot(), rig.ledger()
    runs = Counter(line["id"] for line in ledger)
    holder_log = rig.procs.log(runners[holder])
    print(
        f"\n[{rig.label}] outage of {outage:.1f}s (lease {lease}, the holder's route {HOLDER_LAGS}s later): "
        f"sink runs {runs[wake]} (by pids {[line['pid'] for line in ledger]}); "
        f"attempts {dict(attempts_by_outcome(snap))}"
    )
    assert "fired wake(s) failed" in holder_log, f"the holder held no outcome through the outage:\n{holder_log}"
    assert runs[wake] == 1, (
        f"the wake's sink ran {runs[wake]} times: the lease lapsed during the outage and another runner "
        f"re-drove it before its live holder could settle (attempts {snap['attempts']})"
    )
    assert not [a for a in snap["attempts"] if a["outcome"] in TAKEN_OVER], snap["attempts"]
    assert snap["wakes"][str(wake)]["state"] == "fired"
    assert "registration: database unavailable" in rig.procs.log(booted), "the fourth runner did not boot in the outage"
