"""The noisy-neighbour rows of ``make bench`` (issue 28 points 1 and 5): fair share across workspaces.

Per database (PostgreSQL and MariaDB with 2 runners, SQLite with 1), each figure a ratio in the same run:

* **A alone**: ``BENCH_FAIR_A`` (100,000) no-op wakes due in workspace A, drained by real ``runwakes``
  processes: A's throughput (wakes/s from launching the runners to A's last fire).
* **B alone**: idle runners; another process books ``BENCH_FAIR_B`` (50) due-now ``bench.stamp`` wakes
  in workspace B one by one (``BENCH_FAIR_GAP`` s apart): B's lateness (the sink's ``time.time()``
  minus the wake's due time), p50/p99/max.
* **B beside A**: the same bookings while the runners drain A's backlog (they start once 5 % of A
  has fired): B's lateness, and A's throughput beside B (ratio to A alone: target ≥ 0.9; B's p99:
  target ≤ 1 s and ≤ 2× B alone).
* **10,000 workspaces**: ``BENCH_FAIR_WORKSPACES`` (10,000) × 10 due wakes (the same total as A),
  drained the same way: ratio to A alone (target ≥ 0.8).
* **one workspace, code before fair share**: A alone again with the runners of ``BENCH_FAIR_BASELINE``
  (a git revision, default ``main``; exported with ``git archive`` under ``benchmarks/.env``; empty:
  skipped; ``BENCH_FAIR_BASELINE_TREE``: the path of a tree exported beforehand): ratio of today's
  A-alone throughput to it (target ≥ 0.9).

``python -m benchmarks.fairness`` runs it alone (``BENCH_DBS``, ``BENCH_PG``, ``BENCH_MARIADB`` as in
``benchmarks.run``; ``BENCH_FAIR_DB``: the database name, default ``wakes_bench_fair``);
``benchmarks.run`` calls :func:`section` for ``BENCH_ONLY=fair``. The load average is printed with
every row: on a shared machine compare the ratios, not the absolute rates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QUICK = os.environ.get("BENCH_QUICK") == "1"
A_N = int(os.environ.get("BENCH_FAIR_A", "10000" if QUICK else "100000"))
B_N = int(os.environ.get("BENCH_FAIR_B", "50"))
GAP = float(os.environ.get("BENCH_FAIR_GAP", "0.05"))
WORKSPACES = int(os.environ.get("BENCH_FAIR_WORKSPACES", "1000" if QUICK else "10000"))
BASELINE = os.environ.get("BENCH_FAIR_BASELINE", "main")
DB_NAME = os.environ.get("BENCH_FAIR_DB", "wakes_bench_fair")
#: Which rows to measure (A alone always: every ratio is to it): ``b`` (B alone and beside A), ``many``, ``baseline``.
PAIRS = int(os.environ.get("BENCH_FAIR_PAIRS", "3"))
ROWS = set(os.environ.get("BENCH_FAIR_ROWS", "b,many,baseline").split(","))


# --------------------------------------------------------------------------------------------------
# Steps inside a Django process: python -m benchmarks.fairness step <name> <json>
# --------------------------------------------------------------------------------------------------


def step_seed(args: dict[str, Any]) -> dict[str, Any]:
    """Empty the tables; insert ``n`` due no-op wakes spread round-robin over ``workspaces`` workspaces."""
    from django.db import transaction

    from benchmarks.jobs import analyze, reset, vendor
    from django_wakes import clock
    from django_wakes.models import Wake

    reset()
    now = clock.now()
    n, workspaces = args["n"], args["workspaces"]
    names = ["A"] if workspaces == 1 else [f"ws-{i:05d}" for i in range(workspaces)]
    with transaction.atomic():
        for start in range(0, n, 5000):
            rows = [
                Wake(
                    workspace_id=names[i % len(names)],
                    trigger_type="at",
                    kind="bench.noop",
                    state="pending",
                    fire_at=now,
                    due_at=now,
                    created_at=now,
                    updated_at=now,
                    max_attempts=5,
                )
                for i in range(start, min(n, start + 5000))
            ]
            Wake.objects.bulk_create(rows, batch_size=1000)
    if vendor() in ("postgresql", "mysql"):
        analyze(vacuum=True)
    return {"seeded": n}


def step_book(args: dict[str, Any]) -> dict[str, Any]:
    """Book ``n`` due-now ``bench.stamp`` wakes in workspace B one by one, ``gap`` s apart; their due times."""
    import django_wakes

    due: dict[int, float] = {}
    for _ in range(args["n"]):
        wake = django_wakes.schedule(workspace_id="B", kind="bench.stamp", delay="0s")
        due[wake.pk] = wake.due_at.timestamp()
        time.sleep(args["gap"])
    return {"due": due}


STEPS = {"seed": step_seed, "book": step_book}


# --------------------------------------------------------------------------------------------------
# The orchestrator
# --------------------------------------------------------------------------------------------------


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _step(db: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.run import PY, child_env, run_json

    return run_json([PY, "-m", "benchmarks.fairness", "step", name, json.dumps(args)], child_env(db.url), "fairness")


def _baseline_tree() -> Path | None:
    """The code before fair share (``BENCH_FAIR_BASELINE``), exported once under benchmarks/.env."""
    from benchmarks.run import ROOT, WORK

    if os.environ.get("BENCH_FAIR_BASELINE_TREE"):  # a tree exported beforehand (no git where this runs)
        return Path(os.environ["BENCH_FAIR_BASELINE_TREE"])
    if not BASELINE:
        return None
    rev = subprocess.run(
        ["git", "rev-parse", "--short", BASELINE], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not rev:
        return None
    tree = WORK / f"baseline-{rev}"
    if not (tree / "manage.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.Popen(["git", "archive", rev], cwd=ROOT, stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
        archive.wait()
    return tree


def _runners(db: Any, count: int, tag: str, tree: Path | None = None, **env: str) -> list[Any]:
    from benchmarks.run import PY, child_env, start

    environment = child_env(db.url, **env)
    argv = [PY, "manage.py", "runwakes"]
    if tree is None:
        return [start(argv, environment, f"fair-{db.vendor}-{tag}") for _ in range(count)]
    environment["PYTHONPATH"] = str(tree)
    procs = []
    for _ in range(count):  # benchmarks.run.start runs in this tree; the baseline runs in its own
        from benchmarks.run import LOGS, _live

        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / f"fair-{db.vendor}-{tag}.log", "ab") as out:
            proc = subprocess.Popen(
                argv, cwd=tree, env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        _live.append(proc)
        procs.append(proc)
    return procs


def _fired(db: Any, workspace: str | None = None) -> int:
    where = f" AND workspace_id = '{workspace}'" if workspace else ""
    return int(db.scalar(f"SELECT count(*) FROM django_wakes_wake WHERE state = 'fired'{where}"))  # noqa: S608


def _drain(db: Any, count: int, tag: str, *, workspaces: int = 1, tree: Path | None = None) -> dict[str, Any]:
    """Seed A_N due wakes over ``workspaces`` workspaces; time ``count`` runners draining them."""
    from benchmarks.run import drain

    _step(db, "seed", {"n": A_N, "workspaces": workspaces})
    db.close()
    elapsed, fired = drain(lambda: _runners(db, count, tag, tree), lambda: _fired(db), A_N, 0.05)
    return {"rate": fired / elapsed, "wall_s": elapsed, "fired": fired, "load": _load()}


def _lateness(stamps: Path, due: dict[str, float]) -> dict[str, Any]:
    from benchmarks.run import percentile

    fired: dict[str, float] = {}
    if stamps.exists():
        for line in stamps.read_text().splitlines():
            pk, t = line.split()
            fired.setdefault(pk, float(t))
    late = [fired[pk] - due[pk] for pk in due if pk in fired]
    if not late:
        return {"n": 0, "fired": 0}
    return {
        "n": len(due),
        "fired": len(late),
        "p50_s": percentile(late, 0.5),
        "p99_s": percentile(late, 0.99),
        "max_s": max(late),
    }


def _b_alone(db: Any, count: int) -> dict[str, Any]:
    from benchmarks.run import DATA, stop

    _step(db, "seed", {"n": 0, "workspaces": 1})
    db.close()
    stamps = DATA / f"fair-stamps-{db.vendor}-alone.txt"
    stamps.unlink(missing_ok=True)
    procs = _runners(db, count, "b-alone", BENCH_STAMP_FILE=str(stamps))
    try:
        deadline = time.monotonic() + 60
        while int(db.scalar("SELECT count(*) FROM django_wakes_runner")) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the runners did not register")
            time.sleep(0.05)
        time.sleep(1.0)  # their LISTEN connections settle
        due = _step(db, "book", {"n": B_N, "gap": GAP})["due"]
        time.sleep(1.0)
    finally:
        stop(procs)
    return {**_lateness(stamps, due), "load": _load()}


def _b_beside_a(db: Any, count: int) -> dict[str, Any]:
    from benchmarks.run import DATA, PY, child_env, stop

    _step(db, "seed", {"n": A_N, "workspaces": 1})
    db.close()
    stamps = DATA / f"fair-stamps-{db.vendor}-beside.txt"
    stamps.unlink(missing_ok=True)
    t0 = time.perf_counter()
    procs = _runners(db, count, "b-beside-a", BENCH_STAMP_FILE=str(stamps))
    booker = None
    try:
        while _fired(db, "A") < A_N // 20:
            time.sleep(0.02)
        out = Path(DATA / f"fair-book-{db.vendor}.json")
        argv = [PY, "-m", "benchmarks.fairness", "step", "book", json.dumps({"n": B_N, "gap": GAP})]
        with open(out, "wb") as fh:
            booker = subprocess.Popen(argv, env=child_env(db.url), stdout=fh, cwd=Path(__file__).parent.parent)
        booker.wait(timeout=600)
        due = json.loads(out.read_text().strip().splitlines()[-1])["due"]
        deadline = time.monotonic() + 60
        while (
            int(db.scalar("SELECT count(*) FROM django_wakes_wake WHERE workspace_id = 'B' AND state = 'fired'")) < B_N
        ):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        a_left_after_b = A_N - _fired(db, "A")
        while _fired(db, "A") < A_N:
            time.sleep(0.05)
        a_wall = time.perf_counter() - t0
    finally:
        stop(procs)
        if booker is not None and booker.poll() is None:
            booker.kill()
    return {
        **_lateness(stamps, due),
        "a_rate": A_N / a_wall,
        "a_wall_s": a_wall,
        "a_left_after_b": a_left_after_b,
        "load": _load(),
    }


def section(vendors: list[str]) -> dict[str, Any]:
    """Measure every row on each of ``vendors`` (``postgres``, ``mariadb``, ``sqlite``); print and return them."""
    from benchmarks.run import Db, mariadb_reachable, migrate, say

    results: dict[str, Any] = {}
    tree = _baseline_tree()
    for vendor in vendors:
        if vendor == "mariadb" and (why := mariadb_reachable()):
            say(f"  fair share on mariadb: skipped ({why})")
            continue
        count = 1 if vendor == "sqlite" else 2
        db = Db(vendor, DB_NAME)
        db.recreate()
        migrate(db)
        r: dict[str, Any] = {"runners": count, "a_n": A_N, "b_n": B_N, "workspaces": WORKSPACES}
        r["a_alone"] = _drain(db, count, "a-alone")
        say(f"  {vendor}: A alone {r['a_alone']['rate']:,.0f}/s (load {r['a_alone']['load']})")
        if "b" in ROWS:
            _b_rows(db, vendor, count, r)
        if "many" in ROWS:
            _many_row(db, vendor, count, r)
        if tree is not None and "baseline" in ROWS:
            _baseline_row(db, vendor, count, r, tree)
        db.close()
        results[vendor] = r
    return results


def _b_rows(db: Any, vendor: str, count: int, r: dict[str, Any]) -> None:
    from benchmarks.run import say

    r["b_alone"] = _b_alone(db, count)
    say(f"  {vendor}: B alone {_late_line(r['b_alone'])}")
    r["b_beside_a"] = beside = _b_beside_a(db, count)
    say(
        f"  {vendor}: B beside A {_late_line(beside)}; A {beside['a_rate']:,.0f}/s"
        f" = {beside['a_rate'] / r['a_alone']['rate']:.2f}x alone (target >= 0.90);"
        f" B p99 {beside.get('p99_s', float('nan')) / max(r['b_alone'].get('p99_s', 1e-9), 1e-9):.1f}x alone"
        f" (target <= 2, and <= 1 s)"
    )


def _many_row(db: Any, vendor: str, count: int, r: dict[str, Any]) -> None:
    from benchmarks.run import say

    spread = WORKSPACES if A_N >= WORKSPACES else max(A_N // 10, 1)
    r["many"] = _drain(db, count, "many", workspaces=spread)
    say(
        f"  {vendor}: {spread:,} workspaces x {A_N // spread} {r['many']['rate']:,.0f}/s"
        f" = {r['many']['rate'] / r['a_alone']['rate']:.2f}x one workspace"
        f" (target >= 0.80; load {r['many']['load']})"
    )


def _baseline_row(db: Any, vendor: str, count: int, r: dict[str, Any], tree: Path) -> None:
    """A alone, the code before fair share and this one in turn, ``BENCH_FAIR_PAIRS`` times: medians and their ratio.

    In turn because a shared machine's load moves by tens of percent within minutes.
    """
    import statistics

    from benchmarks.run import say

    ours, before = [r["a_alone"]["rate"]], []
    for n in range(PAIRS):
        before.append(_drain(db, count, f"baseline-{n}", tree=tree)["rate"])
        if n < PAIRS - 1 or PAIRS == 1:
            ours.append(_drain(db, count, f"a-alone-{n + 1}")["rate"])
    r["baseline"] = {"tree": tree.name, "rates": before, "ours": ours, "load": _load()}
    ratio = statistics.median(ours) / statistics.median(before)
    say(
        f"  {vendor}: one workspace, no-op: median {statistics.median(ours):,.0f}/s"
        f" ({', '.join(f'{x:,.0f}' for x in ours)})"
        f" vs {statistics.median(before):,.0f}/s ({', '.join(f'{x:,.0f}' for x in before)}) before fair share"
        f" ({tree.name}), in turn = {ratio:.2f}x (target >= 0.90; load {_load()})"
    )


def _late_line(r: dict[str, Any]) -> str:
    if not r.get("fired"):
        return "nothing fired"
    return (
        f"{r['fired']}/{r['n']} fired, lateness p50 {r['p50_s'] * 1000:.0f} ms p99 {r['p99_s'] * 1000:.0f} ms"
        f" max {r['max_s'] * 1000:.0f} ms (load {r['load']})"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "step":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
        import django

        django.setup()
        print(json.dumps(STEPS[sys.argv[2]](json.loads(sys.argv[3]))), flush=True)
        return 0
    from benchmarks.run import DATA, DBS, OUT

    DATA.mkdir(parents=True, exist_ok=True)
    results = section([v for v in ("postgres", "mariadb", "sqlite") if v in DBS])
    out = OUT.with_name("fairness.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results: {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
