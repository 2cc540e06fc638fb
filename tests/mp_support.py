"""Helpers for tests/test_multiprocess.py: start, watch and stop real processes.

Also the entry point of the short-lived child processes those tests start::

    python -m tests.mp_support <action> <json-args>

A child sets Django up against ``DATABASE_URL``, opens its connection, writes ``ready-<n>`` in the
shared directory, waits for ``go`` to appear (so all children start their race together), runs
its action and prints one JSON document on stdout. Exceptions are reported by class name, so the
parent can tell an expected ``ApprovalAlreadyResolved`` from a surprise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------------


def database_url(settings_dict: dict[str, Any]) -> str | None:
    """Build a ``DATABASE_URL`` that points a child process at this (test) database; None if it cannot.

    An in-memory SQLite database cannot be shared with another process.
    """
    engine, name = settings_dict["ENGINE"], str(settings_dict["NAME"])
    if engine == "django.db.backends.sqlite3":
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return f"sqlite:///{os.path.abspath(name)}"
    scheme = {"django.db.backends.postgresql": "postgres", "django.db.backends.mysql": "mysql"}[engine]
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"{scheme}://{auth}{host}{port}/{quote(name, safe='')}"


def wait_for(predicate: Callable[[], Any], *, timeout: float = 10.0, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def read_jsonl(directory: Path, prefix: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(directory.glob(f"{prefix}-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


class Procs:
    """Every process a test starts; whatever is still alive at teardown is killed and reaped."""

    def __init__(self, db_url: str, workdir: Path) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.probe_dir = workdir / "probe"
        self.probe_dir.mkdir(exist_ok=True)
        self._procs: list[tuple[subprocess.Popen, Any]] = []
        self._count = 0

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.db_url,
            DJANGO_SETTINGS_MODULE="testproject.settings",
            WAKES_PROBE_DIR=str(self.probe_dir),
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(ROOT),
        )
        env.update(extra)
        return env

    def start(self, args: list[str], *, name: str, **env: str) -> subprocess.Popen:
        self._count += 1
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=self.env(**env), stdout=log, stderr=subprocess.STDOUT
        )
        proc.log_path = self.workdir / f"{name}.log"  # type: ignore[attr-defined]
        self._procs.append((proc, log))
        return proc

    def runner(self, name: str, *extra_args: str, **env: str) -> subprocess.Popen:
        """Start ``python manage.py runwakes`` (polling every 0.2 s at most)."""
        return self.start(["manage.py", "runwakes", "--interval", "0.2", *extra_args], name=name, **env)

    def child(self, action: str, payload: dict[str, Any], *, name: str, **env: str) -> subprocess.Popen:
        return self.start(["-m", "tests.mp_support", action, json.dumps(payload)], name=name, **env)

    def alive(self, proc: subprocess.Popen) -> bool:
        """False while ``proc`` runs; raise with its log if it has exited (for ``wait_for`` predicates)."""
        if proc.poll() is not None:
            raise AssertionError(f"pid {proc.pid} exited with {proc.returncode}:\n{self.log(proc)[-4000:]}")
        return False

    @staticmethod
    def log(proc: subprocess.Popen) -> str:
        return proc.log_path.read_text(encoding="utf-8", errors="replace")  # type: ignore[attr-defined]

    def stop(self, proc: subprocess.Popen, *, timeout: float = 30) -> int:
        """SIGTERM (the runner finishes the wake in hand), then wait; SIGKILL if it hangs."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"pid {proc.pid} ignored SIGTERM for {timeout:.0f}s") from None

    def finish(self, proc: subprocess.Popen, *, timeout: float = 90) -> Any:
        """Wait for a child to exit and return the JSON it printed last."""
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"child {proc.pid} still running after {timeout:.0f}s:\n{self.log(proc)}") from None
        output = self.log(proc)
        lines = [line for line in output.splitlines() if line.startswith("{")]
        assert rc == 0 and lines, f"child {proc.pid} exited {rc}:\n{output}"
        return json.loads(lines[-1])

    def cleanup(self) -> None:
        for proc, log in self._procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
            proc.wait()
            log.close()


@contextmanager
def race(procs: Procs, action: str, payloads: list[dict[str, Any]], *, timeout: float = 90) -> Iterator[list]:
    """Start one child per payload, release them together, yield the list their results fill."""
    barrier = procs.workdir / f"barrier-{action}-{time.monotonic_ns()}"
    barrier.mkdir()
    children = [
        procs.child(action, {**payload, "barrier": str(barrier), "n": n}, name=f"{action}-{n}")
        for n, payload in enumerate(payloads)
    ]

    def ready() -> bool:
        for child in children:
            if child.poll() is not None:
                raise AssertionError(f"child {child.pid} died before the race:\n{procs.log(child)}")
        return len(list(barrier.glob("ready-*"))) == len(children)

    wait_for(ready, timeout=timeout, what=f"{len(children)} {action} children to be ready")
    (barrier / "go").touch()
    results: list[Any] = []
    yield results
    results.extend(procs.finish(child, timeout=timeout) for child in children)


# --------------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------------


def _outcome(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        return {"ok": call()}
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which judges it
        return {"error": type(exc).__name__, "message": str(exc)[:500]}


def _schedule_idempotent(args: dict[str, Any]) -> list[dict[str, Any]]:
    from django_wakes import schedule

    return [
        _outcome(
            lambda k=k: (
                schedule(
                    workspace_id=args["workspace"],
                    delay="1h",
                    kind="probe.record",
                    idempotency_key=k,
                    intent={"by": args["n"]},
                ).pk
            )
        )
        for k in args["keys"]
    ]


def _schedule_coalesce(args: dict[str, Any]) -> list[dict[str, Any]]:
    from django_wakes import schedule

    return [
        _outcome(
            lambda lane=lane: (
                schedule(
                    workspace_id=args["workspace"],
                    delay="1h",
                    kind="probe.record",
                    serial_key=lane,
                    coalesce=True,
                    intent={"by": args["n"]},
                ).pk
            )
        )
        for lane in args["lanes"]
    ]


def _resolve(args: dict[str, Any]) -> list[dict[str, Any]]:
    from django_wakes import resolve

    return [_outcome(lambda t=token: resolve(t, {"answer_by": args["n"]}, "demo").pk) for token in args["tokens"]]


def _once(args: dict[str, Any]) -> list[dict[str, Any]]:
    from django.conf import settings

    from django_wakes import once

    if args.get("once_lease"):
        settings.WAKES["ONCE_LEASE"] = args["once_lease"]
    effects = Path(args["effects"])

    def make_fn(key: str) -> Callable[[], Any]:
        def fn() -> Any:
            with effects.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "pid": os.getpid(), "n": args.get("n")}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            time.sleep(args.get("fn_seconds", 0))
            return {"ran_in": os.getpid(), "n": args.get("n"), "key": key}

        return fn

    return [
        _outcome(lambda k=k: once(args["session"], k, make_fn(k), on_interrupted=args.get("on_interrupted", "raise")))
        for k in args["keys"]
    ]


ACTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "schedule_idempotent": _schedule_idempotent,
    "schedule_coalesce": _schedule_coalesce,
    "resolve": _resolve,
    "once": _once,
}


def main(argv: list[str]) -> None:
    import django

    action, args = argv[0], json.loads(argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    from django.db import connection

    connection.ensure_connection()
    barrier = Path(args["barrier"]) if args.get("barrier") else None
    if barrier is not None:
        (barrier / f"ready-{args['n']}").touch()
        deadline = time.monotonic() + 120
        while not (barrier / "go").exists():
            if time.monotonic() > deadline:
                raise SystemExit("never released")
            time.sleep(0.0005)
    result = ACTIONS[action](args)
    connection.close()
    print(json.dumps({"pid": os.getpid(), "n": args.get("n"), "results": result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
