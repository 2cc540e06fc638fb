"""A steady creator for the HA tests: ``python -m tests.ha_load <json-args>`` (``tests/test_ha.py``).

It schedules ``probe.ha`` wakes, due within a second, one after another until ``args["stop"]`` exists,
as an application would through a failover: a create that fails with a transient database error is
tried again with the same idempotency key (so a create that committed but lost its answer is found,
not doubled). Each create that *returned* — acknowledged to the application — is appended to
``args["acks"]`` (one fsynced JSON line: the wake's id, its number, when) before the next one starts.
That file is what the test holds the cluster to: every acknowledged wake must exist and fire.

Every ``args["once_every"]``-th wake runs its effect inside ``once()``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

WS = "ws-ha"


def create(args: dict[str, Any]) -> dict[str, Any]:
    from django_wakes import schedule
    from django_wakes.engine.shared import TRANSIENT_ERRORS, backoff_delay, drop_broken_connections

    acks = os.open(args["acks"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    stop = Path(args["stop"])
    pause = float(args.get("pause", 0.02))
    once_every = int(args.get("once_every", 5))
    start = int(args.get("start", 0))
    n, failures, longest = start, 0, 0.0
    try:
        while not stop.exists():
            began, tries = time.monotonic(), 0
            while True:
                tries += 1
                try:
                    wake = schedule(
                        workspace_id=WS,
                        kind="probe.ha",
                        delay=timedelta(milliseconds=random.randint(0, 1000)),
                        intent={"i": n, "once": n % once_every == 0, "run": args.get("run", "")},
                        idempotency_key=f"ha-{n}",
                        max_attempts=10,
                    )
                    break
                except TRANSIENT_ERRORS:
                    failures += 1
                    drop_broken_connections()
                    time.sleep(backoff_delay(tries))
            longest = max(longest, time.monotonic() - began)
            line = {"i": n, "id": wake.pk, "wall": time.time()}
            os.write(acks, (json.dumps(line) + "\n").encode())
            os.fsync(acks)
            n += 1
            time.sleep(pause)
    finally:
        os.close(acks)
    return {"created": n - start, "failed_tries": failures, "longest_create_s": round(longest, 2)}


def main(argv: list[str]) -> None:
    import django

    args = json.loads(argv[0])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    print(json.dumps(create(args)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
