"""The one harness for tests with real processes (``tests/test_multiprocess.py``,
``tests/test_runner_processes.py``): start, watch and stop them, read what their sinks recorded.

The ``procs`` fixture (``tests/conftest.py``) hands a test a :class:`Procs` pointed at the
pytest-django test database. It starts ``manage.py runwakes`` runners and other ``manage.py``
commands with extra environment, and the short-lived children below; whatever is still running at
teardown is killed and reaped. The runners' probe sinks (``testproject/probe_sinks.py``) write
JSON lines into ``procs.probe_dir``; :meth:`Procs.records` and :meth:`Procs.phase` read them.

This module is also the entry point of the short-lived child processes::

    python -m tests.processes <action> <json-args>

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


class Procs:
    """Every process a test starts; whatever is still alive at teardown is killed and reaped.

    Each process's output goes to ``<workdir>/<name>.log`` (:meth:`log`); the probe sinks of the
    runners write into :attr:`probe_dir`.
    """

    def __init__(self, db_url: str, workdir: Path) -> None:
        self.db_url = db_url
        self.workdir = workdir
        self.probe_dir = workdir / "probe"
        self.probe_dir.mkdir(exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child: this test database, the probe directory, then ``extra``."""
        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.db_url,
            DJANGO_SETTINGS_MODULE="testproject.settings",
            WAKES_PROBE_DIR=str(self.probe_dir),
            PYTHONUNBUFFERED="1",
            PYTHONPATH=str(ROOT),
            WAKES_LOG_LEVEL="INFO",
        )
        env.update(extra)
        return env

    def start(self, args: list[str], *, name: str, **env: str) -> subprocess.Popen:
        """Start ``python ARGS`` in the project root; its output goes to ``<workdir>/<name>.log``."""
        log_path = self.workdir / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, *args], cwd=ROOT, env=self.env(**env), stdout=log, stderr=subprocess.STDOUT
            )
        proc.log_path = log_path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def runner(self, name: str, *args: str, **env: str) -> subprocess.Popen:
        """Start ``python manage.py runwakes ARGS`` with ``env`` added to its environment."""
        return self.start(["manage.py", "runwakes", *args], name=name, **env)

    def child(self, action: str, payload: dict[str, Any], *, name: str, **env: str) -> subprocess.Popen:
        """Start a short-lived child running ``action`` (see ``ACTIONS``) on ``payload``."""
        return self.start(["-m", "tests.processes", action, json.dumps(payload)], name=name, **env)

    def manage(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """Run ``python manage.py ARGS`` to completion and return its captured output."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    @staticmethod
    def log(proc: subprocess.Popen) -> str:
        return proc.log_path.read_text(encoding="utf-8", errors="replace")  # type: ignore[attr-defined]

    def alive(self, *procs: subprocess.Popen) -> bool:
        """False (for ``wait_for`` predicates) while all of ``procs`` run; raise with the log if one exited."""
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"pid {proc.pid} exited with {proc.returncode}:\n{self.log(proc)[-4000:]}")
        return False

    def stop(self, proc: subprocess.Popen, *, timeout: float = 30) -> int:
        """SIGTERM (a runner finishes the wakes in hand), then wait; SIGKILL if it hangs."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"pid {proc.pid} ignored SIGTERM for {timeout:.0f}s:\n{self.log(proc)}") from None

    def kill(self, proc: subprocess.Popen) -> int:
        """SIGKILL and reap; return a ``monotonic_ns`` taken after the process is certainly dead."""
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        return time.monotonic_ns()

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

    def records(self, *kinds: str) -> list[dict[str, Any]]:
        """The lines the probe sinks of these kinds wrote (every kind if none), file by file."""
        paths = sorted(path for kind in kinds or ("*",) for path in self.probe_dir.glob(f"{kind}-*.jsonl"))
        rows = []
        for path in paths:
            rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        return rows

    def phase(self, phase: str, **match: Any) -> list[dict[str, Any]]:
        """The probe lines of ``phase`` ("start", "end", ...) whose fields equal ``match``."""
        return [r for r in self.records() if r.get("phase") == phase and all(r.get(k) == v for k, v in match.items())]

    def cleanup(self) -> None:
        """Kill (and first continue, if stopped) whatever still runs, and reap everything."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
            proc.wait()


def asgi_server(procs: Procs, **env: str) -> tuple[subprocess.Popen, str]:
    """Start ``uvicorn testproject.asgi:application`` on a free loopback port; return it and its base URL."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = procs.start(
        ["-m", "uvicorn", "testproject.asgi:application", "--host", "127.0.0.1", "--port", str(port)],
        name=f"uvicorn-{port}",
        **env,
    )

    def up() -> bool:
        procs.alive(server)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    wait_for(up, timeout=60, what="uvicorn to listen")
    return server, f"http://127.0.0.1:{port}"


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


def _sync_periodic(args: dict[str, Any]) -> dict[str, list[str]]:
    from django_wakes.tasks import sync_periodic

    report = sync_periodic()
    return {"booked": report.booked, "replanned": report.replanned, "ended": report.ended, "kept": report.kept}


ACTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "schedule_idempotent": _schedule_idempotent,
    "schedule_coalesce": _schedule_coalesce,
    "resolve": _resolve,
    "once": _once,
    "sync_periodic": _sync_periodic,
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
