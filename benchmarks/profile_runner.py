"""Where a runner's time goes: drain ``n`` due no-op wakes with one ``runwakes`` under py-spy, sum its samples.

The reasons docs/performance.md gives for a missed target are read off this profile, not guessed::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/wakes_profile \\
        benchmarks/.env/bin/python -m benchmarks.profile_runner --n 10000 [--lanes 100] [-- --concurrency 4]

It migrates the database, seeds ``n`` due wakes (``benchmarks.jobs prepare``: VACUUM ANALYZEd), starts
``py-spy record --idle --threads`` on a real ``manage.py runwakes`` (options after ``--``), waits until
every wake is fired, stops the runner with SIGINT and prints, per thread, the share of samples that
fell in each group of frames below (the first group, in their order, with a frame anywhere in a
sample's stack), and the top functions by own samples. py-spy (``pip install py-spy``) samples from outside
the process; ``--idle`` keeps samples of threads that wait (on the database, a lock or the GIL), so
shares are of wall time. Needs ptrace (root in a container).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PYSPY = str(Path(PY).parent / "py-spy")

#: (label, substrings of a frame "function (file:line)"): the first group with a frame in a sample's
#: stack names it. Order matters: waiting on the database is matched before the Python that called it.
GROUPS = [
    ("start-up (imports, checks)", ("importlib", "django/__init__.py", "run_checks", "check_migrations")),
    ("waiting on the database (round trips, commits)", ("Connection.wait", "psycopg/waiting")),
    ("logging (the per-fire INFO line)", ("logging/__init__", "django_wakes/logs.py")),
    ("turning rows into Wake objects", ("from_db", "Model.__init__")),
    ("claim, Python side (engine/claim.py)", ("engine/claim.py",)),
    ("settle, Python side (engine/settle.py)", ("engine/settle.py",)),
    ("the sink itself (benchmarks/sinks.py)", ("benchmarks/sinks.py",)),
    ("idle: waiting for work, a lock or the GIL (threading, queue)", ("threading.py", "queue.py")),
    ("runner loop (django_wakes/runner/)", ("django_wakes/runner/",)),
    ("Django ORM, other", ("django/db",)),
]


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=ROOT, check=True, text=True, capture_output=True)


def fired(env: dict[str, str]) -> int:
    code = (
        "import django,os;os.environ.setdefault('DJANGO_SETTINGS_MODULE','benchmarks.settings');django.setup();"
        "from django_wakes.models import Wake;print(Wake.objects.filter(state='fired').count())"
    )
    return int(run([PY, "-c", code], env).stdout.strip())


def group_of(frames: list[str]) -> str:
    """The first group (in :data:`GROUPS` order) with a frame anywhere in the stack."""
    for label, needles in GROUPS:
        if any(needle in frame for frame in frames for needle in needles):
            return label
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--lanes", type=int, default=0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("runwakes", nargs="*", help="runwakes options (after --)")
    args = parser.parse_args()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    run([PY, "manage.py", "migrate", "--verbosity", "0"], env)
    run([PY, "-m", "benchmarks.jobs", "prepare", "--n", str(args.n), "--lanes", str(args.lanes)], env)
    out = Path(tempfile.mkdtemp()) / "profile.txt"
    runner = [PY, "manage.py", "runwakes", *args.runwakes]
    spy = subprocess.Popen(
        [PYSPY, "record", "--idle", "--threads", "--format", "raw", "--rate", str(args.rate), "-o", str(out), "--"]
        + runner,
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.perf_counter()
    while fired(env) < args.n:
        if spy.poll() is not None:
            raise SystemExit("the runner ended before it fired every wake")
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    for child in subprocess.run(["pgrep", "-P", str(spy.pid)], capture_output=True, text=True).stdout.split():
        os.kill(int(child), signal.SIGINT)
    spy.wait(timeout=60)
    threads: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    names: dict[str, str] = {}
    own: collections.Counter[str] = collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        head, *frames = stack.split(";")  # "thread (tid)" or "thread (tid): name", then outermost first
        tid, _, name = head.partition(": ")
        if name:
            names[tid] = name
        threads[tid][group_of(frames)] += int(count)
        if frames:
            own[frames[-1]] += int(count)
    report = {"n": args.n, "lanes": args.lanes, "runwakes": args.runwakes, "seconds_from_launch": round(seconds, 2)}
    print(json.dumps(report))
    for tid, groups in sorted(threads.items(), key=lambda t: -sum(t[1].values())):
        total = sum(groups.values())
        print(f"{tid} {names.get(tid, '')}: {total} samples ({total / args.rate:.2f} s)")
        for label, samples in groups.most_common():
            print(f"  {samples / total:6.1%}  {label}")
    total = sum(own.values())
    print("top functions by own samples (all threads):")
    for frame, samples in own.most_common(15):
        print(f"  {samples / total:6.1%}  {frame}")


if __name__ == "__main__":
    main()
